"""The benchmarks' pure helpers: complete pools, the peak rate of a running count, --fleet's argument."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from benchmarks.bench_fleet import peak_per_second
from benchmarks.common import pool_devices, requests_per_hour
from benchmarks.run import fleet_size
from tests.fakeapi import RecordedRequest


def slice_(generation: int, count: int, *devices: str) -> dict[str, Any]:
    return {
        "spec": {
            "pool": {"generation": generation, "resourceSliceCount": count},
            "devices": [{"name": d} for d in devices],
        }
    }


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([slice_(1, 1, "npu-10", "npu-2")], ["npu-2", "npu-10"]),
        ([slice_(2, 2, "npu-1"), slice_(2, 2, "npu-0")], ["npu-0", "npu-1"]),
        ([slice_(2, 2, "npu-1")], None),
        ([slice_(1, 1, "npu-0"), slice_(2, 1, "npu-1")], None),
        ([], None),
        ([slice_(3, 1)], []),
    ],
)
def test_pool_devices_only_of_a_complete_pool(items: list[dict[str, Any]], expected: list[str] | None) -> None:
    assert pool_devices(items) == expected


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([], 0),
        ([(0.0, 0), (0.5, 3), (1.0, 4)], 4),
        ([(0.0, 0), (0.5, 5), (1.5, 6), (2.5, 20)], 14),
        ([(10.0, 2), (10.1, 2)], 2),
        ([(0.0, 0), (1.0, 10), (2.0, 20), (3.0, 30)], 10),
    ],
)
def test_peak_per_second(samples: list[tuple[float, int]], expected: int) -> None:
    assert peak_per_second(samples) == expected


@pytest.mark.parametrize("text", ["0", "-3", "many", ""])
def test_fleet_size_must_be_a_positive_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--fleet takes a number of nodes"):
        fleet_size(text)


def test_fleet_size() -> None:
    assert fleet_size("5") == 5


def request(method: str, query: dict[str, str] | None = None) -> RecordedRequest:
    return RecordedRequest(method, "/apis/resource.k8s.io/v1/resourceslices", query or {}, 200)


def test_requests_per_hour_counts_the_window_and_takes_watches_from_their_timeouts() -> None:
    watches = [request("GET", {"watch": "true", "timeoutSeconds": str(s)}) for s in (300, 600)]
    window = [request("GET"), request("PUT"), watches[1]]
    rates = requests_per_hour([request("GET"), watches[0], *window], window, seconds=600, nodes=2)
    assert rates == {"LIST": 3.0, "UPDATE": 3.0, "WATCH": 8.0}


def test_requests_per_hour_without_a_watch_counts_only() -> None:
    assert requests_per_hour([request("GET")], [request("GET")], seconds=3600) == {"LIST": 1.0}
