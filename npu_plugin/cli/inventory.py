"""`npu-plugin inventory`: print what discovery finds as a table, JSON, YAML or ResourceSlices."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml

from npu_plugin.ascend.device import DEFAULT_DRIVER, Device, id_prefix
from npu_plugin.ascend.vnpu import (
    AICORE,
    TEMPLATE_RESOURCES,
    ChipVnpu,
    VnpuMode,
    candidate_count,
    dp_suffix,
    format_counter,
)
from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.backends.options import BackendOptions
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.errors import ConfigError
from npu_plugin.inventory.sharing import Sharing
from npu_plugin.inventory.vnpu_plans import ChipPlan, Serving, VnpuReader, published_templates, served_chips
from npu_plugin.kubeapi.quantity import format_bytes

CONSUMABLE_CAPACITY_FROM_MINOR = 36  # DRAConsumableCapacity: alpha and off in 1.34 and 1.35, on from 1.36
_COLUMNS = ("PHYS", "LOGIC", "CARD", "CHIP", "NAME", "TYPE", "MEMORY", "AICORE", "NUMA", "PCI", "GROUP", "HEALTH")


def render_table(devices: Sequence[Device], sharing: Sharing | None = None) -> str:
    """One row per chip; with shared chips, a SHARES column: how many, and the memory of each."""
    rows = [
        (
            str(d.physical_id),
            str(d.logic_id),
            str(d.card_id),
            str(d.chip_id),
            d.chip_name,
            d.device_type,
            format_bytes(d.memory),
            _dash(d.ai_core),
            _dash(d.numa_node),
            _dash(d.pci_bus_id),
            d.topology_group,
            d.health.value,
        )
        for d in devices
    ]
    if sharing is None or not sharing.enabled:
        return _aligned([_COLUMNS, *rows])
    shares = [_shares(d, sharing) for d in devices]
    return _aligned([(*_COLUMNS, "SHARES"), *((*row, n) for row, n in zip(rows, shares, strict=True))])


def _shares(device: Device, sharing: Sharing) -> str:
    from npu_plugin.dra.shared_devices import share_unit

    if not (count := sharing.shares(device.physical_id)):
        return "-"
    return f"{count} x {format_bytes(share_unit(device.memory, count))}"


def _aligned(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


_RESOURCES = (AICORE, *TEMPLATE_RESOURCES)


def render_vnpu_tables(plans: Mapping[int, ChipPlan], offered: frozenset[str] | None = None) -> str:
    """Per chip: how it is served, its totals (- where the chip reports none), id range and vNPUs;
    then its templates with how many an empty chip holds (candidates, for chips split on demand)."""
    if not plans:
        return "no chip reports vNPUs"
    chips = [
        (
            f"npu-{p}",
            plan.serving.value,
            plan.chip.mode.value,
            *(_amount(plan.chip.totals.get(name)) for name in _RESOURCES),
            f"{plan.chip.id_range[0]}-{plan.chip.id_range[1]}",
            " ".join(f"{v.vnpu_id}:{v.template}" for v in plan.chip.vnpus) or "-",
        )
        for p, plan in sorted(plans.items())
    ]
    templates = [
        (
            f"npu-{p}",
            t.name,
            format_bytes(t.memory),
            str(t.aicore),
            *(format_counter(t.uses.get(name, Decimal(0))) for name in TEMPLATE_RESOURCES),
            _candidates(plan, t.name, offered),
        )
        for p, plan in sorted(plans.items())
        for t in plan.chip.templates
    ]
    upper = tuple(name.upper() for name in _RESOURCES)
    text = _aligned([("CHIP", "SERVED", "MODE", *upper, "IDS", "VNPUS"), *chips])
    if templates:
        text += "\n\n" + _aligned([("CHIP", "TEMPLATE", "MEMORY", *upper, "CANDIDATES"), *templates])
    return text


def _amount(value: Decimal | None) -> str:
    return "-" if value is None else format_counter(value)


def _candidates(plan: ChipPlan, template: str, offered: frozenset[str] | None) -> str:
    spec = plan.chip.template(template)
    if plan.serving is not Serving.DYNAMIC or spec is None or (offered is not None and template not in offered):
        return "-"
    return str(candidate_count(plan.chip, spec))


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Output:
    """What `inventory` prints: `form` is table, json, yaml, resourceslice or deviceclasses; the
    rest is for slices and classes."""

    form: str
    node_name: str | None = None
    driver: str = DEFAULT_DRIVER
    unhealthy_policy: UnhealthyPolicy = UnhealthyPolicy.REMOVE
    vnpu: VnpuMode = VnpuMode.OFF
    vnpu_templates: frozenset[str] | None = None
    kubernetes_minor: int = 35  # the layout of vNPU slices: split from 1.35, combined on 1.34
    share_devices: str | None = None
    share_count: int | None = None

    def __post_init__(self) -> None:
        if self.vnpu_templates is not None and self.vnpu is not VnpuMode.DYNAMIC:
            raise ConfigError(
                f"--vnpu-templates chooses what --vnpu dynamic creates; it is unused with --vnpu {self.vnpu}"
            )


def render_slices(
    output: Output, devices: Sequence[Device], plans: Mapping[int, ChipPlan], sharing: Sharing | None = None
) -> str:
    """The node's slices at generation 1; with --vnpu, in the layout of `--kubernetes-version` with
    DRAPartitionableDevices on (the layout without counters is the one of `--vnpu static`); shared
    chips with consumable capacity where that version has DRAConsumableCapacity on by default."""
    from npu_plugin.dra.slices import SliceSettings, build_slices
    from npu_plugin.dra.taints import NONE_EFFECT_FROM_MINOR, TaintRules
    from npu_plugin.dra.vnpu_slices import build_vnpu_slices, layout_for

    if not output.node_name:
        raise ConfigError("--output resourceslice needs --node-name (or NODE_NAME)")
    settings = SliceSettings(
        driver=output.driver,
        node_name=output.node_name,
        node_uid=None,
        unhealthy_policy=output.unhealthy_policy,
        taint_rules=TaintRules(none_effect=output.kubernetes_minor >= NONE_EFFECT_FROM_MINOR),
        sharing=sharing or Sharing(),
        share_capacity=output.kubernetes_minor >= CONSUMABLE_CAPACITY_FROM_MINOR,
    )
    pairs = [(d, d.health.healthy) for d in devices]
    if output.vnpu is VnpuMode.OFF:
        slices = build_slices(settings, pairs, generation=1)
    else:
        layout = layout_for(output.kubernetes_minor, partitionable=True)
        chips = served_chips(plans, output.vnpu_templates, settings.sharing.shared)
        slices = build_vnpu_slices(settings, pairs, chips, layout, 1)
    return yaml.safe_dump_all(slices, sort_keys=False)


def render_device_classes(output: Output, devices: Sequence[Device], plans: Mapping[int, ChipPlan]) -> str:
    """A DeviceClass with `extendedResourceName` per device-plugin resource the node's products can
    advertise (its families' whole-NPU names; with --vnpu, a vNPU name per template its chips can
    hold), then, with --vnpu, one class per (chip family, template) the node's vNPU devices have."""
    from npu_plugin.dra.deviceclasses import extended_device_classes, template_device_classes

    types = {d.physical_id: d.device_type for d in devices}
    vnpu_names: dict[tuple[str, str], set[str]] = {}
    for physical_id, plan in plans.items():
        for template in plan.chip.templates:
            if (suffix := dp_suffix(template.name)) is not None:
                vnpu_names.setdefault((id_prefix(types[physical_id]), suffix), set()).add(template.name)
    classes = extended_device_classes(output.driver, types.values(), vnpu_names)
    if output.vnpu is not VnpuMode.OFF:
        templates = published_templates(plans, output.vnpu_templates)
        pairs = {(types[physical_id], template) for physical_id, template in templates}
        classes += template_device_classes(output.driver, pairs)
    return yaml.safe_dump_all(classes, sort_keys=False)


def run_inventory(options: BackendOptions, output: Output) -> int:
    backend = open_backend(options)
    try:
        devices = discover(backend)
        sharing = Sharing.of(output.share_devices, output.share_count, devices)
        vnpu_backend = backend if output.vnpu is not VnpuMode.OFF and isinstance(backend, VnpuBackend) else None
        plans = (
            {} if vnpu_backend is None else VnpuReader(vnpu_backend, output.vnpu, output.vnpu_templates).read(devices)
        )
        if output.form == "table":
            text = render_table(devices, sharing)
            if output.vnpu is not VnpuMode.OFF:
                text += "\n\n" + render_vnpu_tables(plans, output.vnpu_templates)
        elif output.form in ("json", "yaml"):
            document: dict[str, Any] = inventory_document(devices, vnpu_facts(vnpu_backend, devices))
            text = (
                json.dumps(document, indent=2) if output.form == "json" else yaml.safe_dump(document, sort_keys=False)
            )
        elif output.form == "deviceclasses":
            text = render_device_classes(output, devices, plans)
        else:
            text = render_slices(output, devices, plans, sharing)
    finally:
        backend.close()
    sys.stdout.write(text.rstrip("\n") + "\n")
    return 0


def vnpu_facts(backend: VnpuBackend | None, devices: Sequence[Device]) -> dict[int, ChipVnpu] | None:
    """What the backend says about each chip's vNPUs, as the inventory file's `vnpu:` blocks; None
    with --vnpu off."""
    if backend is None:
        return None
    facts = {d.physical_id: backend.chip_vnpu(d.physical_id) for d in devices}
    return {p: chip for p, chip in facts.items() if chip is not None}
