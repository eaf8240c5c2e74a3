"""The benchmarks' pure helpers: complete pools, the peak rate of a running count, --fleet's
argument; and the bytecode every daemon of a run starts from."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import pytest

import benchmarks.run
from benchmarks.bench_fleet import peak_per_second
from benchmarks.common import WatchLives, at_rest_per_node_hour, per_node_hour, pool_devices, watch_lives
from benchmarks.run import fleet_size
from tests.support.fakeapi import RecordedRequest


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


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def request(method: str, query: dict[str, str] | None = None) -> RecordedRequest:
    return RecordedRequest(method, SLICES, query or {}, 200)


def test_per_node_hour_counts_every_verb_over_the_window() -> None:
    window = [request("GET"), request("PUT"), request("GET", {"watch": "true"})]
    assert per_node_hour(window, seconds=600, nodes=2) == {"LIST": 3.0, "UPDATE": 3.0, "WATCH": 3.0}


def watch(started: float, ended: float | None, end: str = "timeout") -> RecordedRequest:
    return RecordedRequest("GET", SLICES, {"watch": "true"}, 200, started=started, ended=ended, end=end)


def test_watch_lives_are_the_watches_that_ended_by_themselves_within_the_window() -> None:
    requests = [
        watch(0.0, 300.0),  # ended before the window
        watch(10.0, 460.0),
        watch(20.0, 620.0),
        watch(300.0, 900.0),  # ends after the window: open at its close
        watch(460.0, 470.0, "server stopped"),
        watch(470.0, 480.0, "connection lost"),  # the client closed it: counts
        watch(480.0, None),  # open
        watch(800.0, None),  # after the window
        request("GET"),
    ]
    lives = watch_lives(requests, since=400.0, until=700.0)
    assert lives == WatchLives((450.0, 600.0, 10.0), {"timeout": 2, "server stopped": 1, "connection lost": 1}, 2)
    assert lives.per_hour == round(3600 / ((450 + 600 + 10) / 3), 1)


@pytest.mark.parametrize(
    ("lives", "expected"),
    [
        (WatchLives((300.0, 600.0), {"timeout": 2}, 2), {"LIST": 0.5, "UPDATE": 1.0, "WATCH": 8.0}),
        (WatchLives((), {"server stopped": 2}, 0), None),  # not measured
        (WatchLives((), {}, 2), None),
    ],
)
def test_at_rest_takes_watch_from_the_lifetimes_and_every_other_verb_as_counted(
    lives: WatchLives, expected: dict[str, float] | None
) -> None:
    assert at_rest_per_node_hour({"LIST": 0.5, "UPDATE": 1.0, "WATCH": 5.7}, lives) == expected


def test_watch_lives_say_where_the_watch_rate_came_from() -> None:
    measured = WatchLives((300.0, 600.0), {"timeout": 2}, 2).note()
    assert measured == "WATCH from 2 watch lifetimes (mean 450 s, 300-600 s; ended: timeout 2; 2 open)"
    unmeasured = WatchLives((), {}, 3).note()
    assert unmeasured == "no watch ended by itself in the window (ended: none; 3 open): WATCH not measured"


def test_bench_daemons_find_the_package_compiled_where_python_looks() -> None:
    source = Path(benchmarks.run.__file__).resolve().parent.parent / "npu_plugin" / "daemon.py"
    benchmarks.run.compile_package()
    cached = Path(importlib.util.cache_from_source(str(source)))
    assert cached.is_file() and cached.stat().st_mtime >= source.stat().st_mtime
