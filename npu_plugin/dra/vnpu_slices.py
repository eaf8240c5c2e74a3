"""The ResourceSlices of a node whose chips serve vNPUs (pure: devices and per-chip plans in, API
objects out).

A chip split on demand (dynamic) publishes one counter set `npu-<phy>-counters`, one device per
template instance an empty chip holds (`npu-<phy>-<template>-<k>`, smallest first) and the whole
`npu-<phy>` last, which consumes every counter at its total: allocating one makes the scheduler
refuse the other. A chip serving the vNPUs it has (static) publishes them as plain devices
`npu-<phy>-vnpu-<id>` and never itself whole.

Three layouts, one per API server:
- split (Kubernetes 1.35+, which allows counters or devices in a slice, not both): counter-only
  slices first (at most 8 sets each), then device slices (at most 64 devices each);
- combined (1.34): one slice per dynamic chip with its set and its devices, the other chips in
  plain slices;
- fallback (DRAPartitionableDevices off, where the API server drops counters): no counters and no
  candidates; a dynamic chip is offered whole only while it holds no vNPU, or one device would be
  handed out twice.
A chip's devices never span two slices, so the scheduler's first fit sees them in the order written
here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from enum import StrEnum

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import (
    Candidate,
    ChipVnpu,
    Vnpu,
    VnpuChips,
    VnpuTemplate,
    candidates,
    consumption,
    counter_totals,
    format_counter,
    static_name,
)
from npu_plugin.dra.slices import (
    MAX_DEVICES,
    MAX_DEVICES_WITH_TAINTS,
    SliceContent,
    SliceSettings,
    device_entry,
    slice_object,
)
from npu_plugin.kubeapi.protocol import (
    Counter,
    CounterSet,
    DeviceAttribute,
    DeviceCapacity,
    ResourceSlice,
    SliceDevice,
)
from npu_plugin.kubeapi.quantity import format_bytes

MAX_COUNTER_SETS = 8  # per slice, Kubernetes 1.35+
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"  # a vNPU's own function is unknown until it exists


class Layout(StrEnum):
    SPLIT = "split"
    COMBINED = "combined"
    FALLBACK = "fallback"


def layout_for(minor: int, partitionable: bool) -> Layout:
    """The layout an API server of Kubernetes 1.<minor> stores intact, given whether
    DRAPartitionableDevices keeps counters."""
    if not partitionable:
        return Layout.FALLBACK
    return Layout.SPLIT if minor >= 35 else Layout.COMBINED


def counter_set_name(physical_id: int) -> str:
    return f"npu-{physical_id}-counters"


def _counters(amounts: Mapping[str, Decimal]) -> dict[str, Counter]:
    return {name: {"value": format_counter(amount)} for name, amount in amounts.items()}


def counter_set(chip: ChipVnpu) -> CounterSet:
    return {"name": counter_set_name(chip.physical_id), "counters": _counters(counter_totals(chip))}


def _vnpu_entry(
    parent: SliceDevice, name: str, template: VnpuTemplate | None, extra: dict[str, DeviceAttribute]
) -> SliceDevice:
    """A vNPU device: the parent's attributes but its PCI address, the vNPU's own, the template's
    capacities and the parent's health taint."""
    attributes = {k: v for k, v in parent["attributes"].items() if k != PCI_BUS_ID} | extra
    capacity: dict[str, DeviceCapacity] = {}
    if template is not None:
        attributes["vnpuTemplate"] = {"string": template.name}
        capacity = {
            "memCapacity": {"value": format_bytes(template.memory)},
            "aiCore": {"value": str(template.aicore)},
            "aiCpu": {"value": format_counter(template.aicpu)},
        }
    entry: SliceDevice = {"name": name, "attributes": attributes, "capacity": capacity}
    if "taints" in parent:
        entry["taints"] = parent["taints"]
    return entry


def candidate_entry(parent: SliceDevice, chip: ChipVnpu, candidate: Candidate) -> SliceDevice:
    entry = _vnpu_entry(parent, candidate.name, candidate.template, {"vnpuMode": {"string": "dynamic"}})
    entry["consumesCounters"] = [
        {
            "counterSet": counter_set_name(chip.physical_id),
            "counters": _counters(consumption(chip, candidate.template)),
        }
    ]
    return entry


def static_entry(parent: SliceDevice, chip: ChipVnpu, vnpu: Vnpu) -> SliceDevice:
    """An existing vNPU served as it is; its template name is kept even when the chip no longer
    lists it."""
    entry = _vnpu_entry(
        parent,
        static_name(chip.physical_id, vnpu.vnpu_id),
        chip.template(vnpu.template),
        {"vnpuMode": {"string": "static"}, "vnpuId": {"int": vnpu.vnpu_id}},
    )
    entry["attributes"].setdefault("vnpuTemplate", {"string": vnpu.template})
    return entry


def chip_entries(parent: SliceDevice, physical_id: int, vnpu: VnpuChips, layout: Layout) -> list[SliceDevice]:
    """A chip's devices in the order first fit should see them; `parent` is its whole-NPU entry."""
    chip = vnpu.chips.get(physical_id)
    if chip is None:
        return [parent]
    if physical_id not in vnpu.dynamic:
        return [static_entry(parent, chip, v) for v in sorted(chip.vnpus, key=lambda v: v.vnpu_id)] or [parent]
    if layout is Layout.FALLBACK:
        return [] if chip.vnpus else [parent]
    whole: SliceDevice = {
        **parent,
        "consumesCounters": [
            {"counterSet": counter_set_name(chip.physical_id), "counters": _counters(counter_totals(chip))}
        ],
    }
    return [candidate_entry(parent, chip, c) for c in candidates(chip, vnpu.offered)] + [whole]


def _packed(groups: Sequence[list[SliceDevice]]) -> list[list[SliceDevice]]:
    """Chips' device lists packed in order into slices within the API server's limit; never a chip
    split."""
    entries = [e for group in groups for e in group]
    advanced = any("taints" in e or "consumesCounters" in e for e in entries)
    limit = MAX_DEVICES_WITH_TAINTS if advanced else MAX_DEVICES
    chunks: list[list[SliceDevice]] = []
    for group in groups:
        if not chunks or len(chunks[-1]) + len(group) > limit:
            chunks.append([])
        chunks[-1].extend(group)
    return chunks


def vnpu_slice_contents(
    settings: SliceSettings,
    devices: Sequence[tuple[Device, bool]],
    vnpu: VnpuChips,
    layout: Layout,
) -> list[SliceContent]:
    """Every slice's content, in the layout's order (an empty pool is one slice with no devices)."""
    counted: list[tuple[ChipVnpu, list[SliceDevice]]] = []  # dynamic chips, with their counter sets
    groups: list[list[SliceDevice]] = []  # every other chip's devices (all chips' in the split layout)
    for device, healthy in sorted(devices, key=lambda pair: pair[0].physical_id):
        entry = device_entry(
            settings.driver,
            device,
            healthy,
            settings.unhealthy_policy,
            settings.taint_rules,
            shares=settings.shares(device),
        )
        physical_id = device.physical_id
        # An unhealthy chip's devices may leave; its counter set stays: it is the chip's, not a
        # device's.
        entries = chip_entries(entry, physical_id, vnpu, layout) if entry is not None else []
        chip = vnpu.chips.get(physical_id)
        dynamic = chip is not None and physical_id in vnpu.dynamic and layout is not Layout.FALLBACK
        if dynamic:
            assert chip is not None
            counted.append((chip, entries))
        if entries and not (dynamic and layout is Layout.COMBINED):
            groups.append(entries)
    contents: list[SliceContent] = []
    if layout is Layout.COMBINED:
        contents = [SliceContent(entries, [counter_set(chip)]) for chip, entries in counted]
    else:
        sets = [counter_set(chip) for chip, _ in counted]
        contents = [SliceContent(None, sets[i : i + MAX_COUNTER_SETS]) for i in range(0, len(sets), MAX_COUNTER_SETS)]
    contents += [SliceContent(chunk) for chunk in _packed(groups)]
    return contents or [SliceContent([])]


def build_vnpu_slices(
    settings: SliceSettings,
    devices: Sequence[tuple[Device, bool]],
    vnpu: VnpuChips,
    layout: Layout,
    generation: int,
) -> list[ResourceSlice]:
    """Every slice of the pool at `generation`: same pool, generation and slice count on each."""
    contents = vnpu_slice_contents(settings, devices, vnpu, layout)
    return [slice_object(settings, c.devices, generation, len(contents), c.counter_sets) for c in contents]
