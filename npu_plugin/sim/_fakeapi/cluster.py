"""What the API server's version and feature gates change: `/version`, whether
DRAPartitionableDevices is on, and the ResourceSlice fields its strategy drops on write while that
gate is off."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npu_plugin.sim._fakeapi.kinds import JSON

SUPPORTED_MINORS = (34, 35, 36)
PARTITIONABLE_ON_BY_DEFAULT_FROM = 36  # alpha in 1.33-1.35, beta and on by default in 1.36
_DEVICE_FIELDS = ("consumesCounters", "nodeName", "nodeSelector", "allNodes")


@dataclass
class Cluster:
    """The server's Kubernetes minor version and the DRAPartitionableDevices gate (None: the
    version's default)."""

    minor: int = 34
    partitionable_gate: bool | None = None

    def __post_init__(self) -> None:
        if self.minor not in SUPPORTED_MINORS:
            raise ValueError(f"Kubernetes 1.{self.minor} is not simulated (1.34, 1.35 or 1.36)")

    @property
    def partitionable_devices(self) -> bool:
        if self.partitionable_gate is not None:
            return self.partitionable_gate
        return self.minor >= PARTITIONABLE_ON_BY_DEFAULT_FROM

    def version(self) -> JSON:
        return {
            "major": "1",
            "minor": str(self.minor),
            "gitVersion": f"v1.{self.minor}.0-npu-plugin-fake",
            "platform": "linux/amd64",
        }

    def drop_disabled_fields(self, new: JSON, old: JSON | None) -> None:
        """`dropDisabledDRAPartitionableDevicesFields`: with the gate off, a write loses the slice's
        counters and per-device node selection, unless the stored object already uses them (a
        ratchet, so an update never strips what an earlier, gate-on write stored)."""
        if self.partitionable_devices or (old is not None and _uses_partitionable_fields(old)):
            return
        spec = new.get("spec")
        if not isinstance(spec, dict):
            return
        spec.pop("sharedCounters", None)
        spec.pop("perDeviceNodeSelection", None)
        for device in _devices(spec):
            for key in _DEVICE_FIELDS:
                device.pop(key, None)


def _devices(spec: JSON) -> list[dict[str, Any]]:
    devices = spec.get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _uses_partitionable_fields(obj: JSON) -> bool:
    spec = obj.get("spec") or {}
    if spec.get("sharedCounters") or spec.get("perDeviceNodeSelection"):
        return True
    return any(device.get(key) for device in _devices(spec) for key in _DEVICE_FIELDS)
