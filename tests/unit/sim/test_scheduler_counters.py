"""The scheduler stand-in with partitionable devices: counter accounting over every allocated claim,
first fit in slice and device order, pool validity and the gate off (A12-A15), on slices the vNPU
slice builder makes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.dra.vnpu_slices import Layout, build_vnpu_slices
from npu_plugin.inventory.vnpu_plans import ChipPlan, served_chips, serving, with_known_templates
from npu_plugin.sim.scheduler import (
    DeviceRequest,
    UnschedulableError,
    pick,
    published,
    remaining_counters,
)

REPO = Path(__file__).resolve().parents[3]
SETTINGS = SliceSettings("npu.huawei.com", "n1", None, UnhealthyPolicy.REMOVE)
VIR05 = 'device.attributes["npu.huawei.com"].vnpuTemplate == "vir05_1c_16g"'
VIR10 = 'device.attributes["npu.huawei.com"].vnpuTemplate == "vir10_3c_32g"'


def class_selector(name: str) -> str:
    for path in (REPO / "manifests" / "deviceclasses").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "DeviceClass" and doc["metadata"]["name"] == name:
                return str(doc["spec"]["selectors"][0]["cel"]["expression"])
    raise AssertionError(f"no DeviceClass {name}")


def stored(layout: Layout = Layout.SPLIT) -> list[Any]:
    inventory = profile_inventory("atlas-800t-a2")
    plans = {}
    for device in inventory.devices:
        chip, _ = with_known_templates(inventory.vnpu[device.physical_id])
        plans[device.physical_id] = ChipPlan(chip, *serving(chip, VnpuMode.DYNAMIC, None))
    pairs = [(d, True) for d in inventory.devices]
    return [dict(s) for s in build_vnpu_slices(SETTINGS, pairs, served_chips(plans), layout, 1)]


class Cluster:
    """Claims allocated one after another from the same slices, as the scheduler counts them."""

    def __init__(self, slices: list[Any], partitionable: bool = True) -> None:
        self.devices, self.counters = published(slices, partitionable=partitionable)
        self.taken: set[tuple[str, str, str]] = set()

    def allocate(self, *requests: DeviceRequest, device_class: str = "vnpu.npu.huawei.com") -> list[str]:
        left = remaining_counters(self.counters, self.devices, self.taken)
        free = [d for d in self.devices if d.key not in self.taken]
        results = pick(free, requests, (class_selector(device_class),), left)
        self.taken |= {(r["driver"], r["pool"], r["device"]) for r in results}
        return [r["device"] for r in results]


@pytest.mark.parametrize("layout", [Layout.SPLIT, Layout.COMBINED])
def test_vnpus_pack_onto_the_lowest_chip_first(layout: Layout) -> None:  # A12
    cluster = Cluster(stored(layout))
    got = [cluster.allocate(DeviceRequest("vnpu", selectors=(VIR05,)))[0] for _ in range(5)]
    assert got == [*(f"npu-0-vir05-1c-16g-{k}" for k in range(4)), "npu-1-vir05-1c-16g-0"]


@pytest.mark.parametrize(("layout", "first"), [(Layout.SPLIT, "npu-0"), (Layout.COMBINED, "npu-7")])
def test_across_slices_the_order_the_scheduler_reads_them_decides(layout: Layout, first: str) -> None:
    """Slices reach the scheduler in name order, which generateName makes arbitrary: the split layout keeps an
    8-chip box in one device slice (so vNPUs still pack onto npu-0), the combined one (1.34) has a slice per chip,
    so the first vNPU lands on whichever chip's slice comes first (as `simulate`, on 1.34, shows)."""
    cluster = Cluster(list(reversed(stored(layout))))
    assert cluster.allocate(DeviceRequest("vnpu", selectors=(VIR05,))) == [f"{first}-vir05-1c-16g-0"]


def test_a_chip_with_a_vnpu_is_never_given_whole_and_a_whole_chip_gives_no_vnpu() -> None:  # A13
    cluster = Cluster(stored())
    assert cluster.allocate(DeviceRequest("vnpu", selectors=(VIR05,))) == ["npu-0-vir05-1c-16g-0"]
    by_name = 'device.attributes["npu.huawei.com"].physicalId == 0'
    with pytest.raises(UnschedulableError):
        cluster.allocate(DeviceRequest("npu", selectors=(by_name,)), device_class="npu.huawei.com")
    assert cluster.allocate(DeviceRequest("npu"), device_class="npu.huawei.com") == ["npu-1"]
    chip2 = 'device.attributes["npu.huawei.com"].physicalId == 2'
    assert cluster.allocate(DeviceRequest("npu", selectors=(chip2,)), device_class="npu.huawei.com") == ["npu-2"]
    with pytest.raises(UnschedulableError):
        cluster.allocate(DeviceRequest("vnpu", selectors=(chip2,)))


def test_templates_mix_on_a_chip_within_its_counters() -> None:  # A14
    cluster = Cluster(stored())
    assert cluster.allocate(DeviceRequest("big", selectors=(VIR10,))) == ["npu-0-vir10-3c-32g-0"]
    assert cluster.allocate(DeviceRequest("a", selectors=(VIR05,))) == ["npu-0-vir05-1c-16g-0"]
    assert cluster.allocate(DeviceRequest("b", selectors=(VIR05,))) == ["npu-0-vir05-1c-16g-1"]
    assert cluster.allocate(DeviceRequest("c", selectors=(VIR05,))) == ["npu-1-vir05-1c-16g-0"]


def test_all_npus_need_the_class_that_leaves_vnpus_out() -> None:  # A15
    old_class = 'device.driver == "npu.huawei.com"'
    cluster = Cluster(stored())
    with pytest.raises(UnschedulableError):
        pick(cluster.devices, [DeviceRequest("all", all_devices=True)], (old_class,), cluster.counters)
    got = cluster.allocate(DeviceRequest("all", all_devices=True), device_class="npu.huawei.com")
    assert got == [f"npu-{i}" for i in range(8)]


def test_with_the_scheduler_gate_off_only_devices_without_counters_are_seen() -> None:
    devices, counters = published(stored(), partitionable=False)
    assert (devices, counters) == ([], {})  # every device of a split chip consumes counters
    fallback, _ = published(stored(Layout.FALLBACK), partitionable=False)
    assert [d.key[2] for d in fallback] == [f"npu-{i}" for i in range(8)]


def test_a_pool_whose_devices_name_an_unknown_counter_is_unusable() -> None:
    slices = stored()
    assert published(slices)[0]
    broken = copy.deepcopy(slices)
    broken[1]["spec"]["devices"][0]["consumesCounters"][0]["counterSet"] = "npu-9-counters"
    assert published(broken) == ([], {})
    twice = copy.deepcopy(slices)
    twice[0]["spec"]["sharedCounters"].append(twice[0]["spec"]["sharedCounters"][0])
    assert published(twice) == ([], {})


def test_allocate_claim_counts_the_counters_of_every_stored_claim() -> None:
    from npu_plugin.sim.rest import RestClient
    from npu_plugin.sim.scheduler import allocate_claim
    from tests.support.fakeapi import FakeKubeAPI

    with FakeKubeAPI(kubernetes_minor=35, partitionable_devices=True) as api:
        for body in stored():
            api.put_object("ResourceSlice", body)
        client = RestClient(api.url)
        vnpu = class_selector("vnpu.npu.huawei.com")
        got = [
            allocate_claim(
                client,
                namespace="default",
                name=f"c{i}",
                node="n1",
                requests=[DeviceRequest("vnpu", selectors=(VIR10,))],
                class_selectors=(vnpu,),
                device_class="vnpu.npu.huawei.com",
            )["status"]["allocation"]["devices"]["results"][0]["device"]
            for i in range(3)
        ]
        assert got == ["npu-0-vir10-3c-32g-0", "npu-0-vir10-3c-32g-1", "npu-1-vir10-3c-32g-0"]
        claim = api.get_object("ResourceClaim", "c0")
        assert claim is not None
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "vnpu.npu.huawei.com"
