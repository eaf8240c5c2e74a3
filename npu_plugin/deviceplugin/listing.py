"""What the device plugin lists: the inventory's devices and, under `--vnpu static`, the vNPUs of
its chips.

A vNPU is its own extended resource, named as Ascend's device plugin names it so tools that parse
Ascend's ids keep working: resource `huawei.com/Ascend910-5c.1cpu.16g`, device id
`Ascend910-5c.1cpu.16g-164-4` (vNPU 164 of chip 4). A chip with any vNPU is never offered whole: the
driver cannot mount a split NPU.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from npu_plugin.ascend.device import Device, id_prefix
from npu_plugin.ascend.vnpu import Vnpu, dp_suffix, dp_vnpu_id
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import DeviceView, Inventory, Snapshot

if TYPE_CHECKING:
    from npu_plugin.inventory.vnpu_refresh import VnpuRelist


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """One vNPU as the device plugin offers it."""

    device_id: str  # Ascend910-5c.1cpu.16g-164-4
    resource_name: str  # huawei.com/Ascend910-5c.1cpu.16g
    vnpu: Vnpu


def vnpu_resource_name(domain: str, device_type: str, template: str) -> str | None:
    """`huawei.com/Ascend910-5c.1cpu.16g` for a vir05_1c_16g vNPU of a 910 chip; None where the
    template's name gives no suffix."""
    suffix = dp_suffix(template)
    return None if suffix is None else f"{domain}/{id_prefix(device_type)}-{suffix}"


def virtual_devices(
    domain: str, devices: Iterable[Device], vnpus: Mapping[int, tuple[Vnpu, ...]]
) -> list[VirtualDevice]:
    """The vNPUs of these chips that have a resource, by chip and vNPU id (pure)."""
    listed = []
    for device in sorted(devices, key=lambda d: d.physical_id):
        for vnpu in sorted(vnpus.get(device.physical_id, ()), key=lambda v: v.vnpu_id):
            resource = vnpu_resource_name(domain, device.device_type, vnpu.template)
            if resource is not None:
                prefix, suffix = resource.split("/", 1)[1].split("-", 1)
                device_id = dp_vnpu_id(prefix, suffix, vnpu.vnpu_id, device.physical_id)
                listed.append(VirtualDevice(device_id, resource, vnpu))
    return listed


@dataclass(frozen=True, slots=True)
class Listing:
    """The inventory at one version and the vNPUs at one read."""

    snapshot: Snapshot
    vnpus: Mapping[int, tuple[Vnpu, ...]]  # chips that hold any vNPU
    virtual: tuple[VirtualDevice, ...]
    _by_id: dict[str, VirtualDevice] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {d.device_id: d for d in self.virtual})

    def split(self, physical_id: int) -> bool:
        """Whether the chip holds vNPUs, and so is offered only through them."""
        return physical_id in self.vnpus

    def whole(self, owner: Owner) -> tuple[DeviceView, ...]:
        return tuple(v for v in self.snapshot.owned_by(owner) if not self.split(v.physical_id))

    def virtual_device(self, device_id: str) -> VirtualDevice | None:
        return self._by_id.get(device_id)

    def offered(self, resource_name: str) -> list[tuple[VirtualDevice, DeviceView]]:
        """The vNPUs of a resource on the device plugin's chips, with their parent chip."""
        pairs = [(d, self.snapshot.get(d.vnpu.physical_id)) for d in self.virtual if d.resource_name == resource_name]
        return [(d, view) for d, view in pairs if view is not None and view.owner is Owner.DEVICE_PLUGIN]

    def resources(self) -> set[str]:
        """The vNPU resources present on the device plugin's chips."""
        return {
            d.resource_name
            for d in self.virtual
            if (view := self.snapshot.get(d.vnpu.physical_id)) and view.owner is Owner.DEVICE_PLUGIN
        }


class DeviceListing:
    """The inventory joined with the chips' vNPUs (from `relist`, None with --vnpu off), kept
    current: every change of either reaches the watchers."""

    def __init__(self, inventory: Inventory, domain: str = "huawei.com", relist: VnpuRelist | None = None) -> None:
        self._inventory, self._domain, self._relist = inventory, domain, relist
        self._vnpus: Mapping[int, tuple[Vnpu, ...]] = MappingProxyType({})
        self._virtual: tuple[VirtualDevice, ...] = ()
        self._waiters: set[asyncio.Event] = set()
        if relist is not None:
            relist.on_change(self._vnpus_changed)

    def current(self) -> Listing:
        return Listing(self._inventory.snapshot(), self._vnpus, self._virtual)

    async def refresh(self) -> None:
        """Read the vNPUs once (before serving, so no split chip is ever listed whole)."""
        if self._relist is not None:
            await self._relist.refresh()

    def _vnpus_changed(self, vnpus: Mapping[int, tuple[Vnpu, ...]]) -> None:
        devices = [v.device for v in self._inventory.snapshot().devices]
        self._vnpus = vnpus
        self._virtual = tuple(virtual_devices(self._domain, devices, vnpus))
        self.nudge()

    def nudge(self) -> None:
        """Send every watcher the current listing again (what it maps to changed: --volcano)."""
        for waiter in self._waiters:
            waiter.set()

    async def watch(self) -> AsyncGenerator[Listing, None]:
        """The current listing at once, then the newest after every change (coalesced)."""
        changed = asyncio.Event()
        self._waiters.add(changed)
        follower = asyncio.create_task(self._follow(changed), name="listing-follower")
        try:
            while True:
                await changed.wait()
                changed.clear()
                yield self.current()
        finally:
            self._waiters.discard(changed)
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    async def _follow(self, changed: asyncio.Event) -> None:
        async with contextlib.aclosing(self._inventory.watch()) as snapshots:
            async for _ in snapshots:
                changed.set()
