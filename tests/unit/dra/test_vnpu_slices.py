"""dra/vnpu_slices.py: counter sets, candidates, static vNPUs and the split, combined and fallback
layouts, against the built-in profiles' driver tables (910B3, 910A, 310P3)."""

from __future__ import annotations

import re
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import Vnpu, VnpuChips, VnpuMode, static_only_reason
from npu_plugin.backends.fake.profiles import PROFILES, profile_inventory
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.dra.vnpu_slices import Layout, build_vnpu_slices, layout_for
from npu_plugin.inventory.vnpu_plans import ChipPlan, served_chips, serving, with_known_templates

DRIVER = "npu.huawei.com"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
A2_SET = {"aicore": "20", "aicpu": "7", "vpc": "9", "vdec": "2", "jpegd": "24", "jpege": "4", "vnpus": "16"}


def settings(policy: str = "remove") -> SliceSettings:
    return SliceSettings(DRIVER, "n1", "node-uid", UnhealthyPolicy(policy))


def plans_for(
    profile: str, mode: VnpuMode = VnpuMode.DYNAMIC, vnpus: dict[int, list[tuple[int, str]]] | None = None
) -> tuple[list[Device], dict[int, ChipPlan]]:
    """The profile's devices and each chip's plan, as the servers make it (vNPUs in `vnpus` are
    ours)."""
    inventory = profile_inventory(profile)
    devices, plans = inventory.devices, {}
    ours = frozenset(i for listed in (vnpus or {}).values() for i, _ in listed)
    for device in devices:
        chip, _ = with_known_templates(inventory.vnpu[device.physical_id])
        chip = replace(
            chip, vnpus=tuple(Vnpu(device.physical_id, i, t) for i, t in (vnpus or {}).get(chip.physical_id, []))
        )
        on_card = sum(1 for d in devices if d.card_id == device.card_id)
        how, reason = serving(chip, mode, static_only_reason(device.device_type, on_card), ours)
        plans[device.physical_id] = ChipPlan(chip, how, reason)
    return devices, plans


def slices(
    profile: str,
    layout: Layout,
    *,
    policy: str = "remove",
    unhealthy: frozenset[int] = frozenset(),
    **kwargs: Any,
) -> list[Any]:
    devices, plans = plans_for(profile, **kwargs)
    pairs = [(d, d.physical_id not in unhealthy) for d in devices]
    return list(build_vnpu_slices(settings(policy), pairs, served_chips(plans), layout, generation=3))


def all_devices(built: list[Any]) -> list[dict[str, Any]]:
    return [d for s in built for d in s["spec"].get("devices", [])]


def names(built: list[Any]) -> list[str]:
    return [d["name"] for d in all_devices(built)]


def test_split_layout_puts_eight_counter_sets_first_then_one_device_slice() -> None:  # A2
    built = slices("atlas-800t-a2", Layout.SPLIT)
    assert len(built) == 2
    counters, devices = (s["spec"] for s in built)
    assert "devices" not in counters
    assert "sharedCounters" not in devices
    assert [c["name"] for c in counters["sharedCounters"]] == [f"npu-{i}-counters" for i in range(8)]
    for counter_set in counters["sharedCounters"]:
        assert {k: v["value"] for k, v in counter_set["counters"].items()} == A2_SET
    assert len(devices["devices"]) == 56
    for s in built:
        assert s["spec"]["nodeName"] == "n1"
        assert s["spec"]["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 2}
        assert s["metadata"]["ownerReferences"][0]["uid"] == "node-uid"


def test_combined_layout_gives_each_dynamic_chip_one_slice_with_its_set_and_devices() -> None:  # A3
    built = slices("atlas-800t-a2", Layout.COMBINED)
    assert len(built) == 8
    for i, s in enumerate(built):
        assert [c["name"] for c in s["spec"]["sharedCounters"]] == [f"npu-{i}-counters"]
        assert len(s["spec"]["devices"]) == 7
        assert {d["name"] for d in s["spec"]["devices"]} >= {f"npu-{i}"}
        assert s["spec"]["pool"]["resourceSliceCount"] == 8


@pytest.mark.parametrize("layout", [Layout.SPLIT, Layout.COMBINED])
def test_names_go_chip_by_chip_smallest_template_first_and_the_whole_npu_last(layout: Layout) -> None:  # A4
    listed = names(slices("atlas-800t-a2", layout))
    assert listed[:8] == [
        *(f"npu-0-vir05-1c-16g-{k}" for k in range(4)),
        "npu-0-vir10-3c-32g-0",
        "npu-0-vir10-3c-32g-1",
        "npu-0",
        "npu-1-vir05-1c-16g-0",
    ]
    assert all(DNS_LABEL.fullmatch(n) and len(n) <= 63 for n in listed)
    candidate = all_devices(slices("atlas-800t-a2", layout))[0]
    assert candidate["attributes"]["vnpuTemplate"] == {"string": "vir05_1c_16g"}
    assert candidate["attributes"]["vnpuMode"] == {"string": "dynamic"}
    assert "resource.kubernetes.io/pciBusID" not in candidate["attributes"]
    assert candidate["attributes"]["physicalId"] == {"int": 0}
    assert candidate["capacity"] == {
        "memCapacity": {"value": "16Gi"},
        "aiCore": {"value": "5"},
        "aiCpu": {"value": "1"},
    }


def test_chips_sort_numerically_and_a_chip_is_never_split_across_slices() -> None:
    devices, plans = plans_for("atlas-300i-pro")
    many = [replace(devices[i % 4], physical_id=i) for i in range(12)]
    plans = {i: ChipPlan(replace(plans[i % 4].chip, physical_id=i), plans[i % 4].serving) for i in range(12)}
    built = build_vnpu_slices(
        settings(), [(d, True) for d in reversed(many)], served_chips(plans), Layout.SPLIT, generation=1
    )
    counter_slices = [s for s in built if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 4]
    device_slices = [s["spec"]["devices"] for s in built if "devices" in s["spec"]]
    assert [len(d) for d in device_slices] == [63, 63, 63, 63]  # 21 per chip, at most 64 per slice
    chips = [[int(d["attributes"]["physicalId"]["int"]) for d in chunk] for chunk in device_slices]
    assert [sorted(set(c)) for c in chips] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert all(c == sorted(c) for c in chips)
    assert device_slices[3][-1]["name"] == "npu-11"


def test_the_whole_npu_consumes_every_counter_and_a_candidate_its_template() -> None:  # A5
    by_name = {d["name"]: d for d in all_devices(slices("atlas-800t-a2", Layout.SPLIT))}
    whole = by_name["npu-0"]["consumesCounters"]
    assert len(whole) == 1
    assert whole[0]["counterSet"] == "npu-0-counters"
    assert {k: v["value"] for k, v in whole[0]["counters"].items()} == A2_SET
    for k in range(4):
        (used,) = by_name[f"npu-0-vir05-1c-16g-{k}"]["consumesCounters"]
        assert used["counterSet"] == "npu-0-counters"
        assert {c: v["value"] for c, v in used["counters"].items()} == {
            "aicore": "5",
            "aicpu": "1",
            "vpc": "2",
            "jpegd": "6",
            "jpege": "1",
            "vnpus": "1",
        }
    assert all(len(d["consumesCounters"]) == 1 for d in by_name.values())


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_no_counter_is_memory(profile: str) -> None:
    for s in slices(profile, Layout.SPLIT):
        for counter_set in s["spec"].get("sharedCounters", []):
            assert "memory" not in counter_set["counters"]


def _totals(counter_set: dict[str, Any]) -> dict[str, Decimal]:
    return {k: _quantity(v["value"]) for k, v in counter_set["counters"].items()}


def _quantity(text: str) -> Decimal:
    return Decimal(text[:-1]) / 1000 if text.endswith("m") else Decimal(text)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_template_publishes_as_many_candidates_as_an_empty_chip_holds(profile: str) -> None:  # A6
    built = slices(profile, Layout.SPLIT)
    sets = {c["name"]: _totals(c) for s in built for c in s["spec"].get("sharedCounters", [])}
    per_template: dict[tuple[str, str], list[dict[str, Decimal]]] = {}
    for device in all_devices(built):
        if "vnpuTemplate" in device["attributes"]:
            (used,) = device["consumesCounters"]
            key = (used["counterSet"], device["attributes"]["vnpuTemplate"]["string"])
            per_template.setdefault(key, []).append({k: _quantity(v["value"]) for k, v in used["counters"].items()})
    _, plans = plans_for(profile)
    dynamic = {f"npu-{p}-counters": plan.chip.templates for p, plan in plans.items() if f"npu-{p}-counters" in sets}
    # Every template of every dynamic chip fits an empty chip at least once, so each publishes
    # candidates.
    assert set(per_template) == {(name, t.name) for name, templates in dynamic.items() for t in templates}
    for (set_name, _), uses in per_template.items():
        totals, one = sets[set_name], uses[0]
        n = len(uses)
        assert all(n * amount <= totals[c] for c, amount in one.items())
        assert any((n + 1) * amount > totals[c] for c, amount in one.items())


def test_a_310p3_chip_of_an_atlas_300i_pro_publishes_21_devices_with_seven_vir01() -> None:  # A6
    listed = names(slices("atlas-300i-pro", Layout.SPLIT))
    chip0 = [n for n in listed if n == "npu-0" or n.startswith("npu-0-")]
    assert len(chip0) == 21
    assert [n for n in chip0 if n.startswith("npu-0-vir01-")] == [f"npu-0-vir01-{k}" for k in range(7)]
    assert len(listed) == 84


@pytest.mark.parametrize("profile", ["atlas-300i-duo", "atlas-800-9000"])
@pytest.mark.parametrize("layout", list(Layout))
def test_duo_and_910a_chips_publish_no_counters_and_no_candidates(profile: str, layout: Layout) -> None:  # A7
    built = slices(profile, layout)
    assert len(built) == 1
    assert "sharedCounters" not in built[0]["spec"]
    assert names(built) == [f"npu-{i}" for i in range(len(names(built)))]
    assert all("consumesCounters" not in d for d in all_devices(built))


def test_fallback_offers_whole_npus_without_counters_and_hides_chips_running_dynamic_vnpus() -> None:
    built = slices("atlas-800t-a2", Layout.FALLBACK, vnpus={2: [(132, "vir05_1c_16g")]})
    assert len(built) == 1
    assert "sharedCounters" not in built[0]["spec"]
    assert names(built) == [f"npu-{i}" for i in (0, 1, 3, 4, 5, 6, 7)]
    assert all("consumesCounters" not in d for d in all_devices(built))


def test_a_chip_with_vnpus_someone_else_made_serves_them_as_plain_static_devices() -> None:
    devices, plans = plans_for("atlas-800t-a2")
    foreign = replace(plans[0].chip, vnpus=(Vnpu(0, 102, "vir05_1c_16g"), Vnpu(0, 100, "vir10_3c_32g")))
    plans[0] = ChipPlan(foreign, *serving(foreign, VnpuMode.DYNAMIC, None))
    for layout in Layout:
        built = build_vnpu_slices(settings(), [(d, True) for d in devices], served_chips(plans), layout, generation=1)
        chip0 = [d for d in all_devices(built) if d["attributes"]["physicalId"] == {"int": 0}]
        assert [d["name"] for d in chip0] == ["npu-0-vnpu-100", "npu-0-vnpu-102"]
        assert all(s["spec"].get("sharedCounters", [{}])[0].get("name") != "npu-0-counters" for s in built)
    static = chip0[1]
    assert "consumesCounters" not in static
    assert "resource.kubernetes.io/pciBusID" not in static["attributes"]
    assert static["attributes"]["vnpuMode"] == {"string": "static"}
    assert static["attributes"]["vnpuId"] == {"int": 102}
    assert static["attributes"]["vnpuTemplate"] == {"string": "vir05_1c_16g"}
    assert static["capacity"]["aiCore"] == {"value": "5"}


def test_static_mode_publishes_existing_vnpus_and_the_other_chips_whole_in_plain_slices() -> None:
    built = slices("atlas-800t-a2", Layout.SPLIT, mode=VnpuMode.STATIC, vnpus={5: [(180, "vir10_3c_32g")]})
    assert len(built) == 1
    assert names(built) == ["npu-0", "npu-1", "npu-2", "npu-3", "npu-4", "npu-5-vnpu-180", "npu-6", "npu-7"]


def test_an_unhealthy_chip_keeps_its_counter_set_and_its_devices_leave_or_are_tainted() -> None:
    removed = slices("atlas-800t-a2", Layout.SPLIT, unhealthy=frozenset({1}))
    assert len(removed[0]["spec"]["sharedCounters"]) == 8
    assert not [n for n in names(removed) if n == "npu-1" or n.startswith("npu-1-")]
    tainted = slices("atlas-800t-a2", Layout.SPLIT, policy="taint", unhealthy=frozenset({1}))
    chip1 = [d for d in all_devices(tainted) if d["attributes"]["physicalId"] == {"int": 1}]
    assert len(chip1) == 7
    assert all(d["taints"][0]["key"] == "npu.huawei.com/health" for d in chip1)


def test_offered_templates_limit_the_candidates() -> None:
    devices, plans = plans_for("atlas-800t-a2")
    built = build_vnpu_slices(
        settings(),
        [(d, True) for d in devices],
        served_chips(plans, frozenset({"vir10_3c_32g"})),
        Layout.SPLIT,
        generation=1,
    )
    assert names(built)[:3] == ["npu-0-vir10-3c-32g-0", "npu-0-vir10-3c-32g-1", "npu-0"]


def test_an_empty_pool_is_one_slice_without_devices() -> None:
    assert [
        s["spec"]["devices"] for s in build_vnpu_slices(settings(), [], VnpuChips({}), Layout.SPLIT, generation=1)
    ] == [[]]


@pytest.mark.parametrize(
    ("minor", "partitionable", "layout"),
    [(34, True, Layout.COMBINED), (35, True, Layout.SPLIT), (36, True, Layout.SPLIT), (35, False, Layout.FALLBACK)],
)
def test_the_layout_follows_the_api_server(minor: int, partitionable: bool, layout: Layout) -> None:
    assert layout_for(minor, partitionable) is layout
