"""What the API server's version and feature gates change: `/version`, whether
DRAPartitionableDevices, DRADeviceTaints, DRAConsumableCapacity and DRAExtendedResource are on, and
the fields the write strategies drop while a gate is off (`pkg/registry/resource/resourceslice/
strategy.go` `dropDisabledFields`: slice counters, taints, `allowMultipleAllocations` and request
policies; the DeviceClass strategy: `extendedResourceName`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npu_plugin.sim._fakeapi.kinds import JSON

SUPPORTED_MINORS = (34, 35, 36, 37)
PARTITIONABLE_ON_BY_DEFAULT_FROM = 36  # alpha in 1.33-1.35, beta and on by default in 1.36
DEVICE_TAINTS_ON_BY_DEFAULT_FROM = 36  # alpha in 1.33-1.35, beta and on in 1.36, GA in 1.37
EXTENDED_RESOURCE_ON_BY_DEFAULT_FROM = 36  # KEP-5004: alpha in 1.34-1.35, beta in 1.36, GA in 1.37
CONSUMABLE_CAPACITY_ON_BY_DEFAULT_FROM = 36  # alpha in 1.34-1.35, beta and on in 1.36
_DEVICE_FIELDS = ("consumesCounters", "nodeName", "nodeSelector", "allNodes")


@dataclass
class Cluster:
    """The server's Kubernetes minor version and the DRAPartitionableDevices, DRADeviceTaints and
    DRAConsumableCapacity gates (None: the version's default)."""

    minor: int = 34
    partitionable_gate: bool | None = None
    device_taints_gate: bool | None = None
    consumable_capacity_gate: bool | None = None

    def __post_init__(self) -> None:
        if self.minor not in SUPPORTED_MINORS:
            shown = ", ".join(f"1.{minor}" for minor in SUPPORTED_MINORS)
            raise ValueError(f"Kubernetes 1.{self.minor} is not simulated ({shown})")

    @property
    def device_taints(self) -> bool:
        if self.device_taints_gate is not None:
            return self.device_taints_gate
        return self.minor >= DEVICE_TAINTS_ON_BY_DEFAULT_FROM

    @property
    def consumable_capacity(self) -> bool:
        if self.consumable_capacity_gate is not None:
            return self.consumable_capacity_gate
        return self.minor >= CONSUMABLE_CAPACITY_ON_BY_DEFAULT_FROM

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

    def drop_disabled_class_fields(self, new: JSON, old: JSON | None) -> None:
        """`dropDisabledDRAExtendedResourceFields` of the DeviceClass strategy: with
        DRAExtendedResource off (its default before 1.36), a write loses `extendedResourceName`
        unless the stored class already has it."""
        if self.minor >= EXTENDED_RESOURCE_ON_BY_DEFAULT_FROM or (old or {}).get("spec", {}).get(
            "extendedResourceName"
        ):
            return
        spec = new.get("spec")
        if isinstance(spec, dict):
            spec.pop("extendedResourceName", None)

    def drop_disabled_fields(self, new: JSON, old: JSON | None) -> None:
        """`dropDisabledDRADeviceTaintsFields`, `dropDisabledDRAConsumableCapacityFields` and
        `dropDisabledDRAPartitionableDevicesFields`: with a gate off, a write loses the devices'
        taints, their `allowMultipleAllocations` and capacities' `requestPolicy`, or the slice's
        counters and per-device node selection, unless the stored object already uses them (a
        ratchet, so an update never strips what an earlier, gate-on write stored)."""
        spec = new.get("spec")
        if not isinstance(spec, dict):
            return
        if not self.device_taints and not (old is not None and _uses_taints(old)):
            for device in _devices(spec):
                device.pop("taints", None)
        if not self.consumable_capacity and not (old is not None and _uses_consumable_capacity(old)):
            for device in _devices(spec):
                device.pop("allowMultipleAllocations", None)
                for capacity in (device.get("capacity") or {}).values():
                    if isinstance(capacity, dict):
                        capacity.pop("requestPolicy", None)
        if self.partitionable_devices or (old is not None and _uses_partitionable_fields(old)):
            return
        spec.pop("sharedCounters", None)
        spec.pop("perDeviceNodeSelection", None)
        for device in _devices(spec):
            for key in _DEVICE_FIELDS:
                device.pop(key, None)


def _devices(spec: JSON) -> list[dict[str, Any]]:
    devices = spec.get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _uses_taints(obj: JSON) -> bool:
    return any(device.get("taints") for device in _devices(obj.get("spec") or {}))


def _uses_consumable_capacity(obj: JSON) -> bool:
    return any(
        "allowMultipleAllocations" in device
        or any(isinstance(c, dict) and "requestPolicy" in c for c in (device.get("capacity") or {}).values())
        for device in _devices(obj.get("spec") or {})
    )


def _uses_partitionable_fields(obj: JSON) -> bool:
    spec = obj.get("spec") or {}
    if spec.get("sharedCounters") or spec.get("perDeviceNodeSelection"):
        return True
    return any(device.get(key) for device in _devices(spec) for key in _DEVICE_FIELDS)
