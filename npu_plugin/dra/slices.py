"""The ResourceSlices DRA mode publishes for a node's pool (pure: devices in, API objects out)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from npu_plugin.ascend.device import Device, LinkState
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.shared_devices import SHARE_COUNT_ATTRIBUTE, shared_capacity
from npu_plugin.dra.slice_owners import LABELS, PUBLISHER
from npu_plugin.dra.taints import TaintRules, device_taints
from npu_plugin.inventory.sharing import Sharing
from npu_plugin.kubeapi.protocol import (
    CounterSet,
    DeviceAttribute,
    DeviceCapacity,
    ObjectMeta,
    OwnerReference,
    ResourceSlice,
    ResourceSliceSpec,
    SliceDevice,
)
from npu_plugin.kubeapi.quantity import format_bytes

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64


@dataclass(frozen=True, slots=True)
class SliceSettings:
    """`unhealthy_policy` auto renders as taint: the publisher resolves it to remove when the API
    server strips taints; `taint_rules` say what the server accepts and the fault policy."""

    driver: str
    node_name: str
    node_uid: str | None
    unhealthy_policy: UnhealthyPolicy
    taint_rules: TaintRules = field(default_factory=TaintRules)
    sharing: Sharing = field(default_factory=Sharing)  # the shared chips
    share_capacity: bool = False  # the API server keeps consumable capacity: shared chips are published as such
    publisher: str | None = None  # the instance that writes (slice_owners.PUBLISHER); None: not said

    def shares(self, device: Device) -> int:
        """How many shares the chip is published with: 0 for an exclusive device."""
        return self.sharing.shares(device.physical_id) if self.share_capacity else 0


@dataclass(frozen=True, slots=True)
class SliceContent:
    """What one slice holds: counter sets, devices, or (1.34 only) both; None means the key is
    absent."""

    devices: list[SliceDevice] | None
    counter_sets: list[CounterSet] | None = None


def device_entry(
    driver: str,
    device: Device,
    healthy: bool,
    policy: UnhealthyPolicy,
    rules: TaintRules | None = None,
    *,
    shares: int = 0,
) -> SliceDevice | None:
    """A device of a slice; None when the remove policy keeps an unhealthy device out. Otherwise
    the device carries the taints of its health level and fault codes (`taints.py`); the remove
    policy writes none. With `shares` it is a shared chip (`shared_devices.py`)."""
    if not healthy and policy is UnhealthyPolicy.REMOVE:
        return None
    attributes: dict[str, DeviceAttribute] = {
        "chipName": {"string": device.chip_name},
        "deviceType": {"string": device.device_type},
        "physicalId": {"int": device.physical_id},
        "logicId": {"int": device.logic_id},
        "cardId": {"int": device.card_id},
        "chipId": {"int": device.chip_id},
        "topologyGroup": {"string": device.topology_group},
    }
    if device.numa_node is not None:
        attributes["numaNode"] = {"int": device.numa_node}
    if device.driver_version:
        attributes["driverVersion"] = {"string": device.driver_version}
    if device.pci_bus_id:
        attributes["resource.kubernetes.io/pciBusID"] = {"string": device.pci_bus_id}
    if device.pcie_root:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": device.pcie_root}
    attributes |= network_attributes(device)
    capacity: dict[str, DeviceCapacity] = {"memCapacity": {"value": format_bytes(device.memory)}}
    if device.ai_core is not None:
        capacity["aiCore"] = {"value": str(device.ai_core)}
    if shares:
        attributes[SHARE_COUNT_ATTRIBUTE] = {"int": shares}
        capacity = shared_capacity(device, shares)
    entry: SliceDevice = {"name": device.dra_name, "attributes": attributes, "capacity": capacity}
    if shares:
        entry["allowMultipleAllocations"] = True
    if policy is not UnhealthyPolicy.REMOVE and (
        taints := device_taints(
            driver,
            device.health,
            healthy,
            device.faults,
            rules or TaintRules(),
            link_down=device.link is LinkState.DOWN,
        )
    ):
        entry["taints"] = taints
    return entry


def network_attributes(device: Device) -> dict[str, DeviceAttribute]:
    """`deviceIP` (string: an address is at most 45 characters, within the 64 a string attribute may
    hold), `superPodId`, `serverIndex` and `rackId` (int), each only when the device has it."""
    attributes: dict[str, DeviceAttribute] = {}
    if device.device_ip:
        attributes["deviceIP"] = {"string": device.device_ip}
    for name, value in (
        ("superPodId", device.super_pod_id),
        ("serverIndex", device.server_index),
        ("rackId", device.rack_id),
    ):
        if value is not None:
            attributes[name] = {"int": value}
    return attributes


def slice_specs(settings: SliceSettings, devices: Sequence[tuple[Device, bool]]) -> list[list[SliceDevice]]:
    """Device lists, one per slice, in physical-id order, chunked to the API server's limits."""
    entries = [
        e
        for d, healthy in sorted(devices, key=lambda pair: pair[0].physical_id)
        if (
            e := device_entry(
                settings.driver, d, healthy, settings.unhealthy_policy, settings.taint_rules, shares=settings.shares(d)
            )
        )
        is not None
    ]
    limit = MAX_DEVICES_WITH_TAINTS if any("taints" in e for e in entries) else MAX_DEVICES
    chunks = [entries[i : i + limit] for i in range(0, len(entries), limit)]
    return chunks or [[]]


def slice_object(
    settings: SliceSettings,
    devices: list[SliceDevice] | None,
    generation: int,
    count: int,
    counter_sets: list[CounterSet] | None = None,
) -> ResourceSlice:
    """One slice of the pool; a counter-only slice (`devices` None) has no `devices` key at all, a
    device slice no `sharedCounters` key: Kubernetes 1.35+ rejects a slice where both are set, an
    empty list included."""
    metadata: ObjectMeta = {"generateName": f"{settings.node_name}-{settings.driver}-", "labels": dict(LABELS)}
    if settings.node_uid:
        owner: OwnerReference = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": settings.node_name,
            "uid": settings.node_uid,
            "controller": True,
        }
        metadata["ownerReferences"] = [owner]
    if settings.publisher:
        metadata["annotations"] = {PUBLISHER: settings.publisher}
    spec: ResourceSliceSpec = {
        "driver": settings.driver,
        "nodeName": settings.node_name,
        "pool": {"name": settings.node_name, "generation": generation, "resourceSliceCount": count},
    }
    if counter_sets is not None:
        spec["sharedCounters"] = counter_sets
    if devices is not None:
        spec["devices"] = devices
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec}


def build_slices(
    settings: SliceSettings, devices: Sequence[tuple[Device, bool]], generation: int
) -> list[ResourceSlice]:
    """Every slice of the pool at `generation` (an empty pool is one slice with no devices)."""
    chunks = slice_specs(settings, devices)
    return [slice_object(settings, chunk, generation, len(chunks)) for chunk in chunks]
