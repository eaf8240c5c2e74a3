"""The ownership ledger of both mode: which API serves each device, and safe handover (pure).

Every device has one owner. A device whose owner differs from the partition (`--dra-devices`, or
the Node's own split, which wins) is
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


SPLIT_ALL, SPLIT_NONE = "all", "none"  # the relative forms: every device, or none, to DRA
# What an item that is no id, range, `all` or `none` must look like to be taken as a topology group
# name (one this node may lack); anything else does not parse.
_GROUP_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")
SPLIT_KEY_SUFFIX = "dra-devices"


@dataclass(frozen=True, slots=True)
class Split:
    """A parsed DRA split: the ids (of this node's devices) and topology groups it gives DRA, and
    the items that name nothing on this node (ignored, never an error: one DaemonSet serves a mixed
    fleet)."""

    ids: frozenset[int]
    groups: frozenset[str] = frozenset()
    ignored: tuple[str, ...] = ()


def parse_split(text: str, devices: Sequence[Device], source: str = "--dra-devices") -> Split:
    """`4-7,9`, `ring-1` (or a mix), `all` or `none` → the split; ConfigError naming `source` for a
    value that does not parse or repeats a device. Ids and groups this node lacks are ignored."""
    known = {d.physical_id for d in devices}
    groups: dict[str, set[int]] = {}
    for device in devices:
        groups.setdefault(device.topology_group, set()).add(device.physical_id)
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ConfigError(f"{source} is empty; give physical ids (4-7,9), topology groups (ring-1), all or none")
    if SPLIT_NONE in items:
        if len(items) > 1:
            raise ConfigError(f"{source}: {SPLIT_NONE!r} cannot be combined with other items ({text!r})")
        return Split(frozenset())
    chosen: set[int] = set()
    named_groups: set[str] = set()
    ignored: list[str] = []
    for item in items:
        ids, missing = _item_ids(item, known, groups, source)
        if overlap := chosen & ids:
            raise ConfigError(f"{source}: {item!r} repeats device(s) {sorted(overlap)}")
        chosen |= ids
        if item in groups or (missing and not item[0].isdigit()):
            named_groups.add(item)
        if missing:
            ignored.append(item)
    return Split(frozenset(chosen), frozenset(named_groups - {SPLIT_ALL}), tuple(ignored))


def parse_device_list(text: str, devices: Sequence[Device], flag: str = "--dra-devices") -> frozenset[int]:
    """A strict split (`--share-devices`): every item must name devices of this node; ConfigError
    naming `flag` otherwise."""
    split = parse_split(text, devices, flag)
    known = sorted(d.physical_id for d in devices)
    for item in split.ignored:
        if (ids := _named_ids(item, flag)) is None:
            here = ", ".join(sorted({d.topology_group for d in devices})) or "none"
            raise ConfigError(
                f"{flag}: {item!r} is neither an id, a range like 4-7, nor a topology group (groups here: {here})"
            )
        unknown = sorted(ids - set(known))
        raise ConfigError(f"{flag}: no device with physical id {unknown} on this node (devices: {known})")
    return split.ids


def _named_ids(item: str, source: str) -> set[int] | None:
    """The ids an id or range item names; None for any other item."""
    if item.isdigit():
        return {int(item)}
    if match := _RANGE.match(item):
        low, high = int(match.group(1)), int(match.group(2))
        if low > high:
            raise ConfigError(f"{source}: range {item!r} runs backwards")
        return set(range(low, high + 1))
    return None


def _item_ids(item: str, known: Collection[int], groups: Mapping[str, set[int]], source: str) -> tuple[set[int], bool]:
    """The ids of this node an item names, and whether it names something this node lacks."""
    if item == SPLIT_ALL:
        return set(known), False
    if item in groups:
        return set(groups[item]), False
    if (ids := _named_ids(item, source)) is None:
        if _GROUP_NAME.match(item):
            return set(), True  # a topology group this node does not have
        here = ", ".join(sorted(groups)) or "none"
        raise ConfigError(
            f"{source}: {item!r} is neither an id, a range like 4-7, a topology group (groups here: {here}), "
            f"{SPLIT_ALL} nor {SPLIT_NONE}"
        )
    return ids & set(known), bool(ids - set(known))


def node_split(driver: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[str, str] | None:
    """The split a Node carries for this driver, and where it was read: the annotation
    `<driver>/dra-devices` (the same syntax as --dra-devices), else the label of that key, whose
    values cannot hold commas, so `_` separates its items (`0-3_ring-1`). None when it has neither."""
    key = f"{driver}/{SPLIT_KEY_SUFFIX}"
    if (value := annotations.get(key)) is not None:
        return value, f"the Node's annotation {key}"
    if (value := labels.get(key)) is not None:
        return value.replace("_", ","), f"the Node's label {key}"
    return None


@dataclass(frozen=True, slots=True)
class Partition:
    """The owner each device should have, before any handover: all of them the mode's in
    device-plugin and dra mode; in both mode DRA's when --dra-devices names it by id or by topology
    group. It applies to devices found after start too: there an id cannot name one (ids are checked
    against the devices at start), a group can."""

    mode: Mode
    dra_ids: frozenset[int] = frozenset()
    dra_groups: frozenset[str] = frozenset()
    ignored: tuple[str, ...] = ()  # items of the split that name nothing on this node

    @classmethod
    def of(
        cls, mode: Mode, dra_devices: str | None, devices: Sequence[Device], source: str = "--dra-devices"
    ) -> Partition:
        if mode is not Mode.BOTH or dra_devices is None:
            return cls(mode)
        split = parse_split(dra_devices, devices, source)
        return cls(mode, split.ids, split.groups, split.ignored)

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
