"""`npu-plugin inventory`: print what discovery finds as a table, JSON, YAML or ResourceSlices."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.config import BackendOptions, UnhealthyPolicy
from npu_plugin.device import Device
from npu_plugin.errors import ConfigError
from npu_plugin.inventory_file import inventory_document
from npu_plugin.quantity import format_bytes

_COLUMNS = ("PHYS", "LOGIC", "CARD", "CHIP", "NAME", "TYPE", "MEMORY", "AICORE", "NUMA", "PCI", "GROUP", "HEALTH")


def render_table(devices: Sequence[Device]) -> str:
    rows = [_COLUMNS] + [
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
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Output:
    """What `inventory` prints: `form` is table, json, yaml or resourceslice; the rest is for slices."""

    form: str
    node_name: str | None = None
    driver: str = "npu.huawei.com"
    unhealthy_policy: UnhealthyPolicy = UnhealthyPolicy.REMOVE


def render_slices(output: Output, devices: Sequence[Device]) -> str:
    from npu_plugin.dra.slices import SliceSettings, build_slices

    if not output.node_name:
        raise ConfigError("--output resourceslice needs --node-name (or NODE_NAME)")
    settings = SliceSettings(
        driver=output.driver, node_name=output.node_name, node_uid=None, unhealthy_policy=output.unhealthy_policy
    )
    slices = build_slices(settings, [(d, d.health.healthy) for d in devices], generation=1)
    return yaml.safe_dump_all(slices, sort_keys=False)


def run_inventory(options: BackendOptions, output: Output) -> int:
    backend = open_backend(options)
    try:
        devices = discover(backend)
    finally:
        backend.close()
    document: dict[str, Any] = inventory_document(devices)
    if output.form == "table":
        text = render_table(devices)
    elif output.form == "json":
        text = json.dumps(document, indent=2)
    elif output.form == "yaml":
        text = yaml.safe_dump(document, sort_keys=False).rstrip("\n")
    else:
        text = render_slices(output, devices).rstrip("\n")
    sys.stdout.write(text + "\n")
    return 0
