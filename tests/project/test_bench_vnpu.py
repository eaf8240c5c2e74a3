"""The vNPU benchmark's pure helpers: its 16-die inventory, health rewrites, complete pools, slice
writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_vnpu import expected_names, node, p99_ratio, slice_writes, with_health
from benchmarks.common import complete_pool, write_inventory
from npu_plugin.ascend.device import Health
from npu_plugin.backends.fake.inventory_file import parse_inventory_file
from tests.support.fakeapi import RecordedRequest


def test_node_parses_with_every_chip_dynamic_and_its_own_id_range(tmp_path: Path) -> None:
    inventory = node(16)
    written = write_inventory(tmp_path / "inventory.yaml", inventory.devices, inventory.vnpu)
    parsed = parse_inventory_file(written.read_text(), "bench")
    assert [d.physical_id for d in parsed.devices] == list(range(16))
    assert len({d.pci_bus_id for d in parsed.devices}) == 16
    assert all(chip.dynamic_supported for chip in parsed.vnpu.values())
    assert [parsed.vnpu[i].id_range[0] for i in (0, 15)] == [100, 340]


@pytest.mark.parametrize(("physical_id", "changed"), [(3, [3]), (0, [0]), (99, [])])
def test_with_health_changes_one_device_and_leaves_the_original(physical_id: int, changed: list[int]) -> None:
    original = node(4).devices
    rewritten = with_health(original, physical_id, Health.CRITICAL)
    assert [d.physical_id for d in rewritten if d.health is Health.CRITICAL] == changed
    assert all(d.health is Health.OK for d in original)


def test_expected_names_cover_each_chip_and_the_first_of_each_template() -> None:
    names = expected_names(node(2))
    assert {"npu-0", "npu-1", "npu-0-vir05-1c-16g-0", "npu-1-vir10-3c-32g-0"} <= names
    assert len(names) == 2 * (1 + len(node(1).vnpu[0].templates))


def slice_(generation: int, count: int, *devices: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"pool": {"generation": generation, "resourceSliceCount": count}}
    if devices:
        spec["devices"] = [{"name": d} for d in devices]
    return {"spec": spec}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([slice_(1, 1, "npu-0")], (1, ["npu-0"])),
        ([slice_(2, 2), slice_(2, 2, "npu-0", "npu-0-vir05-1c-16g-0")], (2, ["npu-0", "npu-0-vir05-1c-16g-0"])),
        ([slice_(2, 2, "npu-0")], None),
        ([slice_(1, 1, "npu-0"), slice_(2, 1, "npu-1")], None),
        ([], None),
    ],
)
def test_complete_pool(items: list[dict[str, Any]], expected: tuple[int, list[str]] | None) -> None:
    assert complete_pool(items) == expected


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ([], 0),
        ([RecordedRequest("POST", SLICES, {}, 201), RecordedRequest("PUT", f"{SLICES}/a", {}, 200)], 2),
        ([RecordedRequest("DELETE", f"{SLICES}/a", {}, 200), RecordedRequest("PATCH", f"{SLICES}/b", {}, 200)], 2),
        ([RecordedRequest("GET", SLICES, {"watch": "true"}, 200), RecordedRequest("GET", f"{SLICES}/a", {}, 200)], 0),
        ([RecordedRequest("PUT", "/apis/resource.k8s.io/v1/namespaces/d/resourceclaims/c/status", {}, 200)], 0),
    ],
)
def test_slice_writes_count_only_writes_of_slices(requests: list[RecordedRequest], expected: int) -> None:
    assert slice_writes(requests) == expected


@pytest.mark.parametrize(
    ("vnpu", "whole", "expected"),
    [([0.002, 0.004], [0.001, 0.002], 2.0), ([0.003], [0.003], 1.0), ([0.001, 0.001, 0.009], [0.003], 3.0)],
)
def test_p99_ratio(vnpu: list[float], whole: list[float], expected: float) -> None:
    assert p99_ratio(vnpu, whole) == expected
