"""The benchmarks' pure helpers: request verbs, complete pools, the peak rate of a running count."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from benchmarks.bench_fleet import peak_per_second
from benchmarks.common import pool_devices, verb
from benchmarks.run import fleet_size

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", SLICES, {}, "LIST"),
        ("GET", SLICES, {"watch": "true", "resourceVersion": "7"}, "WATCH"),
        ("GET", SLICES, {"watch": "1"}, "WATCH"),
        ("GET", SLICES, {"watch": "false"}, "LIST"),
        ("GET", f"{SLICES}/node-a-npu-x7", {}, "GET"),
        ("GET", "/api/v1/nodes/node-a", {}, "GET"),
        ("GET", "/api/v1/nodes", {}, "LIST"),
        ("POST", SLICES, {}, "CREATE"),
        ("PUT", f"{SLICES}/node-a-npu-x7", {}, "UPDATE"),
        ("PATCH", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c/status", {}, "PATCH"),
        ("DELETE", f"{SLICES}/node-a-npu-x7", {}, "DELETE"),
        ("DELETE", SLICES, {"fieldSelector": "spec.nodeName=node-a"}, "DELETECOLLECTION"),
        ("OPTIONS", SLICES, {}, "OPTIONS"),
    ],
)
def test_verb(method: str, path: str, query: dict[str, str], expected: str) -> None:
    assert verb(method, path, query) == expected


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
