"""The handover workflow of dra and both modes: who holds what now, owners at start, draining
devices moved.

The rules are the pure functions of `inventory/ownership.py`; this component feeds them what the
kubelet's PodResources API and the DRA checkpoint say is held, and applies their answers to the
inventory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from npu_plugin.ascend.device import device_key
from npu_plugin.config import Mode
from npu_plugin.errors import NpuPluginError
from npu_plugin.handover.podresources import list_held
from npu_plugin.inventory.ownership import Holders, Owner, initial_owners, next_owners
from npu_plugin.inventory.state import Inventory

log = logging.getLogger(__name__)
POLL_SECONDS = 2.0


class Handover:
    """Decides owners at start (`take_ownership`) and moves draining devices while `run` runs.

    `mode` is the daemon's. In both mode a device whose holders cannot be read stays with the
    device plugin. In dra mode only a device-plugin pod from before the node was switched can hold
    a device, and in device-plugin mode only a container of a DRA claim prepared before it was: the
    device waits until that container ends (a node switched from dra while claims are prepared must
    not hand their NPUs to a second pod).
    """

    def __init__(
        self,
        *,
        inventory: Inventory,
        pod_resources_socket: Path,
        resource_name: str,
        driver: str,
        dra_held: Callable[[], set[int]],
        mode: Mode,
        on_handed_over: Callable[[Owner], None] = lambda _owner: None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._inventory = inventory
        self._socket, self._resource_name, self._driver = pod_resources_socket, resource_name, driver
        self._dra_held, self._mode = dra_held, mode
        self._keeps_device_plugin_side = mode is Mode.BOTH
        self._on_handed_over, self._poll_seconds = on_handed_over, poll_seconds
        self._warned = False

    async def holders(self) -> Holders:
        """Who holds which device now: running containers (PodResources) and prepared claims."""
        listed = await list_held(self._socket, self._resource_name, self._driver)
        dra_held = await asyncio.to_thread(self._dra_held)
        if listed is not None:
            return Holders(device_plugin=frozenset(listed[0]), dra=frozenset(dra_held | listed[1]))
        if not self._warned:
            self._warned = True
            log.warning(
                "cannot read the kubelet PodResources API at %s: %s",
                self._socket,
                {
                    Mode.BOTH: "devices stay with the device plugin until it can be read",
                    Mode.DRA: "devices that device-plugin pods still hold cannot be detected",
                    Mode.DEVICE_PLUGIN: "devices that containers of DRA claims still hold cannot be detected",
                }[self._mode],
            )
        # Both mode cannot tell which devices containers hold, so it assumes all of them (the safe
        # side); dra mode has no device-plugin side to keep them on, and the seed manifests do not
        # mount the socket.
        return Holders(device_plugin=None if self._keeps_device_plugin_side else frozenset(), dra=frozenset(dra_held))

    async def take_ownership(self) -> None:
        """Owners at start: a device still held by one side stays there until released."""
        desired = self._inventory.desired_owners()
        for physical_id, owner in initial_owners(desired, await self.holders()).items():
            if owner is not desired[physical_id]:
                key = device_key([physical_id])
                if self._keeps_device_plugin_side:  # both mode: either side may keep it
                    log.info(
                        "device %s stays with %s until released (--dra-devices gives it to %s)",
                        key,
                        owner.value,
                        desired[physical_id].value,
                        extra={"device": key},
                    )
                elif self._mode is Mode.DRA:  # only a device-plugin pod from before the switch can hold it
                    log.info(
                        "device %s is still held by a container the device plugin gave it to: DRA publishes it "
                        "once released",
                        key,
                        extra={"device": key},
                    )
                else:  # device-plugin mode: only a container of a claim prepared before the switch
                    log.warning(
                        "device %s is still held by a container of a DRA claim (the node was switched from dra "
                        "with claims prepared): the device plugin offers it once that container ends",
                        key,
                        extra={"device": key},
                    )
            self._inventory.set_owner(physical_id, owner)

    async def run(self, stop: asyncio.Event) -> None:
        """Move draining devices to their partition side as soon as nothing holds them; ends when
        none drains."""
        while not stop.is_set() and any(v.draining for v in self._inventory.snapshot().devices):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._poll_seconds)
            if stop.is_set():
                return
            current = {v.physical_id: v.owner for v in self._inventory.snapshot().devices}
            try:
                holders = await self.holders()
            except NpuPluginError as error:
                log.warning("handover waits: %s", error, extra={"error": str(error)})
                continue
            desired = self._inventory.desired_owners()
            for physical_id, owner in next_owners(desired, current, holders).items():
                if owner is not current[physical_id]:
                    key = device_key([physical_id])
                    log.info(
                        "device %s released by %s, now served by %s",
                        key,
                        current[physical_id].value,
                        owner.value,
                        extra={"device": key},
                    )
                    self._inventory.set_owner(physical_id, owner)
                    self._on_handed_over(owner)
