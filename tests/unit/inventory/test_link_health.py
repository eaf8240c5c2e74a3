"""RoCE link health: a link down for --link-down-timeout makes the device unhealthy with its own
reason, and it recovers as from any fault. Sample times are given, never read from a clock."""

from __future__ import annotations

import logging

import pytest

from npu_plugin.ascend.device import Health, LinkState
from npu_plugin.inventory.state import Inventory, LinkClock, Reason
from tests.support.fake_devices import profile_devices

UP, DOWN, UNKNOWN = LinkState.UP, LinkState.DOWN, LinkState.UNKNOWN
ALL_OK = dict.fromkeys(range(8), Health.OK)


@pytest.mark.parametrize(
    ("timeout", "samples", "expired"),
    [
        (30, [(0, DOWN), (25, DOWN), (30, DOWN)], [False, False, True]),
        (30, [(0, DOWN), (20, UP), (25, DOWN), (50, DOWN), (55, DOWN)], [False, False, False, False, True]),
        (30, [(0, DOWN), (20, UNKNOWN), (30, UNKNOWN)], [False, False, True]),  # a failed query is no evidence of up
        (30, [(0, UNKNOWN), (40, UNKNOWN)], [False, False]),  # nor of down
        (30, [(0, DOWN), (40, None), (41, UP)], [False, True, False]),  # not asked: the count goes on
        (0, [(0, DOWN), (5, UP)], [True, False]),
    ],
)
def test_link_clock(timeout: float, samples: list[tuple[float, LinkState | None]], expired: list[bool]) -> None:
    clock = LinkClock(timeout)
    assert [clock.observe(state, now) for now, state in samples] == expired


def inventory(timeout: float = 30, recoveries: int = 3) -> Inventory:
    devices = profile_devices("atlas-800t-a2")
    return Inventory(devices, failure_threshold=2, recovery_threshold=recoveries, link_down_timeout=timeout)


def view_of(inv: Inventory, physical_id: int = 3) -> tuple[bool, Reason | None, LinkState]:
    view = inv.snapshot().get(physical_id)
    assert view is not None
    return view.healthy, view.reason, view.published.link


def sample(inv: Inventory, now: float, link: LinkState, level: Health = Health.OK) -> None:
    inv.observe(ALL_OK | {3: level}, links={3: link} | {i: UP for i in range(8) if i != 3}, now=now)


def test_a_link_down_past_the_timeout_turns_the_device_unhealthy_at_once_with_its_reason() -> None:
    inv = inventory(timeout=30)
    for now in (0, 5, 10, 15, 20, 25):
        sample(inv, now, DOWN)
        assert view_of(inv) == (True, None, UP), now
    sample(inv, 30, DOWN)  # no failure threshold on top: the timeout is the debounce
    assert view_of(inv) == (False, Reason.LINK_DOWN, DOWN)
    assert all(v.healthy for v in inv.snapshot().devices if v.physical_id != 3)


def test_recovery_is_as_for_other_faults() -> None:
    inv = inventory(timeout=0, recoveries=3)
    sample(inv, 0, DOWN)
    assert view_of(inv) == (False, Reason.LINK_DOWN, DOWN)
    sample(inv, 5, UP)
    sample(inv, 10, UP)
    assert view_of(inv) == (False, Reason.LINK_DOWN, DOWN)  # still recovering: the reason stays
    sample(inv, 15, UP)
    assert view_of(inv) == (True, None, UP)


def test_a_short_drop_changes_nothing_published() -> None:
    inv = inventory(timeout=30)
    sample(inv, 0, UP)
    before = inv.snapshot().get(3)
    sample(inv, 5, DOWN)
    sample(inv, 10, UP)
    after = inv.snapshot().get(3)
    assert before is not None and after is not None
    assert (after.healthy, after.reason, after.published) == (before.healthy, before.reason, before.published)


def test_a_bad_level_during_a_link_fault_keeps_its_own_level_and_the_first_reason() -> None:
    inv = inventory(timeout=0)
    sample(inv, 0, DOWN)
    sample(inv, 5, DOWN, Health.CRITICAL)
    sample(inv, 10, DOWN, Health.CRITICAL)
    view = inv.snapshot().get(3)
    assert view is not None
    assert (view.healthy, view.reason, view.level) == (False, Reason.LINK_DOWN, Health.CRITICAL)


def test_devices_without_a_link_sample_are_untouched() -> None:
    inv = inventory(timeout=0)
    inv.observe(ALL_OK, now=0)
    assert all(v.healthy and v.reason is None for v in inv.snapshot().devices)


def test_link_events_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    inv = inventory(timeout=10)
    for now, link in ((0, DOWN), (5, DOWN), (10, DOWN), (15, DOWN), (20, UP), (25, UP)):
        sample(inv, now, link)
    said = [r.getMessage() for r in caplog.records]
    assert sum("RoCE link of npu-3 is down" in m for m in said) == 1
    assert sum("npu-3 turned unhealthy (its RoCE link is down for 10 s or more)" in m for m in said) == 1
    assert sum("RoCE link of npu-3 is up again" in m for m in said) == 1
