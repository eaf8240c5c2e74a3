"""The static CDI spec `--cdi-enabled` writes at start-up for Allocate's cdi_devices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from npu_plugin.atomic import make_directories, write_atomic
from npu_plugin.cdi import CDI_DIR_MODE, CdiDevice, render_spec, spec_bytes
from npu_plugin.device import Device
from npu_plugin.edits import ContainerEdits, HostLayout, container_edits


def static_spec_path(cdi_root: Path, driver: str) -> Path:
    return cdi_root / f"{driver}-device-plugin.json"


def static_devices(layout: HostLayout, devices: Sequence[Device]) -> tuple[list[CdiDevice], ContainerEdits]:
    """One CDI device per NPU holding only its own device node; common nodes and mounts are spec-wide.

    ASCEND_VISIBLE_DEVICES stays out of the per-device edits: several devices injected together would
    overwrite each other's value. Allocate sets it in `envs` instead.
    """
    per_device = []
    for device in devices:
        edits = container_edits(replace(layout, common_nodes=(), driver_mounts=()), [device.physical_id])
        per_device.append(CdiDevice(device.dra_name, replace(edits, env=())))
    shared = container_edits(layout, [])
    common = ContainerEdits(env=(), device_nodes=shared.device_nodes, mounts=shared.mounts)
    return per_device, common


def write_static_spec(cdi_root: Path, driver: str, layout: HostLayout, devices: Sequence[Device]) -> Path:
    make_directories(cdi_root, CDI_DIR_MODE)
    per_device, common = static_devices(layout, devices)
    path = static_spec_path(cdi_root, driver)
    write_atomic(path, spec_bytes(render_spec(driver, per_device, common)), durable=False)  # rewritten at every start
    return path
