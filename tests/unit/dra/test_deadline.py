"""dra/deadline.py: when a Prepare answers, and how long a driver call may take within that."""

from __future__ import annotations

import pytest

from npu_plugin.dra.deadline import DEFAULT_SECONDS, MARGIN_SECONDS, MIN_WAIT_SECONDS, answer_by, wait_left


@pytest.mark.parametrize(
    ("time_remaining", "expected"),
    [
        (None, 100.0 + DEFAULT_SECONDS),  # no deadline: the default bound
        (45.0, 100.0 + 45.0 - MARGIN_SECONDS),  # the kubelet's deadline, less the margin to answer
        (6.0, 100.0 + 6.0 - MARGIN_SECONDS),
        (MARGIN_SECONDS, 100.0),  # no time to wait at all
        (0.5, 100.0),  # never before the call started
        (0.0, 100.0),
    ],
    ids=["no-deadline", "kubelet", "short", "just-the-margin", "less-than-the-margin", "expired"],
)
def test_answer_by_leaves_the_margin_before_the_deadline(time_remaining: float | None, expected: float) -> None:
    assert answer_by(time_remaining, 100.0) == expected


@pytest.mark.parametrize(
    ("deadline", "now", "expected"),
    [
        (143.0, 100.0, 43.0),  # the first create of a batch gets what is left
        (143.0, 140.0, 3.0),  # a later one, less
        (143.0, 142.5, MIN_WAIT_SECONDS),  # never less than the minimum
        (143.0, 150.0, MIN_WAIT_SECONDS),  # even past the deadline a started create gets its chance
    ],
    ids=["first", "later", "at-the-minimum", "past-the-deadline"],
)
def test_wait_left_is_what_remains_but_at_least_the_minimum(deadline: float, now: float, expected: float) -> None:
    assert wait_left(deadline, now) == expected
