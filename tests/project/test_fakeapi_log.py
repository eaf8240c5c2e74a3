"""The fake API's request log: the node a request selects, and how many requests were answered at
once."""

from __future__ import annotations

import pytest

from tests.support.fakeapi.faults import RecordedRequest, most_at_once

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"fieldSelector": "spec.nodeName=node-007,spec.driver=npu.huawei.com"}, "node-007"),
        ({"fieldSelector": "spec.driver=npu.huawei.com,spec.nodeName=node-1"}, "node-1"),
        ({"fieldSelector": "spec.driver=npu.huawei.com"}, None),
        ({"watch": "true"}, None),
    ],
)
def test_the_node_a_request_selects(query: dict[str, str], expected: str | None) -> None:
    assert RecordedRequest("GET", SLICES, query, 200).node == expected


def timed(started: float, ended: float | None) -> RecordedRequest:
    return RecordedRequest("GET", SLICES, {}, 200, started=started, ended=ended)


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([], 0),
        ([(0.0, 1.0)], 1),
        ([(0.0, 1.0), (1.0, 2.0)], 1),  # one ends as the next arrives
        ([(0.0, 1.0), (0.5, 2.0)], 2),
        ([(0.0, 3.0), (1.0, 1.5), (2.0, 2.5)], 2),
        ([(0.0, 3.0), (1.0, 2.5), (2.0, 4.0)], 3),
        ([(0.0, None), (5.0, 6.0)], 2),  # still being answered
        ([(2.0, 3.0), (0.0, 2.5)], 2),  # in any order
    ],
)
def test_most_at_once(spans: list[tuple[float, float | None]], expected: int) -> None:
    assert most_at_once(timed(started, ended) for started, ended in spans) == expected
