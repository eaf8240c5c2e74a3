"""The ownership ledger of both mode: which API serves each device, and safe handover (pure).

Every device has one owner. A device whose owner differs from the partition (`--dra-devices`) is
*draining*: still served to the claims or containers holding it, never offered to new ones, and it
moves once nothing holds it. "Held" is unknown (None) when the kubelet's PodResources API cannot be
read; then a device is assumed held (the safe side).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from npu_plugin.ascend.device import Device
from npu_plugin.config import Mode
from npu_plugin.errors import ConfigError

_RANGE = re.compile(r"^(\d+)-(\d+)$")


class Owner(StrEnum):
    """Which API serves a device; every device has exactly one."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


def parse_device_list(text: str, devices: Sequence[Device], flag: str = "--dra-devices") -> frozenset[int]:
    """`4-7,9` or `ring-1` (or a mix) → physical ids; ConfigError naming `flag` for anything unknown
    or repeated."""
    known = {d.physical_id for d in devices}
    groups: dict[str, set[int]] = {}
    for device in devices:
        groups.setdefault(device.topology_group, set()).add(device.physical_id)
    chosen: set[int] = set()
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ConfigError(f"{flag} is empty; give physical ids (4-7,9) or topology groups (ring-1)")
    for item in items:
        ids = _item_ids(item, known, groups, flag)
        if overlap := chosen & ids:
            raise ConfigError(f"{flag}: {item!r} repeats device(s) {sorted(overlap)}")
        chosen |= ids
    return frozenset(chosen)


def _item_ids(item: str, known: Collection[int], groups: Mapping[str, set[int]], flag: str) -> set[int]:
    if item in groups:
        return set(groups[item])
    if item.isdigit():
        ids = {int(item)}
    elif match := _RANGE.match(item):
        low, high = int(match.group(1)), int(match.group(2))
        if low > high:
            raise ConfigError(f"{flag}: range {item!r} runs backwards")
        ids = set(range(low, high + 1))
    else:
        allowed = ", ".join(sorted(groups)) or "none"
        raise ConfigError(
            f"{flag}: {item!r} is neither an id, a range like 4-7, nor a topology group (groups here: {allowed})"
        )
    if unknown := sorted(ids - set(known)):
        raise ConfigError(f"{flag}: no device with physical id {unknown} on this node (devices: {sorted(known)})")
    return ids


@dataclass(frozen=True, slots=True)
class Partition:
    """The owner each device should have, before any handover: all of them the mode's in
    device-plugin and dra mode; in both mode DRA's when --dra-devices names it by id or by topology
    group. It applies to devices found after start too: there an id cannot name one (ids are checked
    against the devices at start), a group can."""

    mode: Mode
    dra_ids: frozenset[int] = frozenset()
    dra_groups: frozenset[str] = frozenset()

    @classmethod
    def of(cls, mode: Mode, dra_devices: str | None, devices: Sequence[Device]) -> Partition:
        if mode is not Mode.BOTH or dra_devices is None:
            return cls(mode)
        groups = {d.topology_group for d in devices if d.topology_group}
        named = frozenset(item.strip() for item in dra_devices.split(",") if item.strip() in groups)
        return cls(mode, parse_device_list(dra_devices, devices), named)

    def owner_of(self, device: Device) -> Owner:
        if self.mode is Mode.DEVICE_PLUGIN:
            return Owner.DEVICE_PLUGIN
        if self.mode is Mode.DRA or device.physical_id in self.dra_ids or device.topology_group in self.dra_groups:
            return Owner.DRA
        return Owner.DEVICE_PLUGIN

    def owners(self, devices: Sequence[Device]) -> dict[int, Owner]:
        return {d.physical_id: self.owner_of(d) for d in devices}


@dataclass(frozen=True, slots=True)
class Holders:
    """Devices in use per side; `device_plugin` is None when the PodResources API could not be
    read."""

    device_plugin: frozenset[int] | None
    dra: frozenset[int]


def initial_owners(desired: Mapping[int, Owner], holders: Holders) -> dict[int, Owner]:
    """Owners at start: a device still held by one side stays there, whatever the partition says."""
    owners = {}
    for physical_id, want in desired.items():
        if physical_id in holders.dra:
            owners[physical_id] = Owner.DRA
        elif holders.device_plugin is None and want is Owner.DRA:
            owners[physical_id] = Owner.DEVICE_PLUGIN  # cannot tell whether a container holds it: keep it
        elif holders.device_plugin is not None and physical_id in holders.device_plugin:
            owners[physical_id] = Owner.DEVICE_PLUGIN
        else:
            owners[physical_id] = want
    return owners


def next_owners(desired: Mapping[int, Owner], current: Mapping[int, Owner], holders: Holders) -> dict[int, Owner]:
    """Draining devices that nothing holds any more move to their desired owner."""
    owners = dict(current)
    for physical_id, owner in current.items():
        want = desired[physical_id]
        if owner is want:
            continue
        released_by_device_plugin = (
            owner is Owner.DEVICE_PLUGIN
            and holders.device_plugin is not None
            and physical_id not in holders.device_plugin
        )
        released_by_dra = owner is Owner.DRA and physical_id not in holders.dra
        if released_by_device_plugin or released_by_dra:
            owners[physical_id] = want
    return owners
