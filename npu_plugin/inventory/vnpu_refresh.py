"""The chips' existing vNPUs, re-read from the backend every health interval: the driver announces
no change, and an administrator's npu-smi may add or remove one at any time. One read per interval
serves every part of the daemon that shows vNPUs (the device plugin's lists, DRA's slices); each
hears of a change, never of an unchanged read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.errors import NpuPluginError
from npu_plugin.inventory.state import Inventory

log = logging.getLogger(__name__)
# The chips that hold vNPUs now, with their vNPUs; read from the backend in a worker thread.
VnpuRead = Callable[[Sequence[Device]], Mapping[int, tuple[Vnpu, ...]]]
VnpusChanged = Callable[[Mapping[int, tuple[Vnpu, ...]]], None]


class VnpuRelist:
    """The last good read of every chip's vNPUs (only chips holding any, each sorted by id);
    `refresh` reads once, `run` every `interval` until stopped. Listeners run on the event loop,
    after a read that changed something."""

    def __init__(self, inventory: Inventory, read: VnpuRead, interval: float) -> None:
        self._inventory, self._read, self._interval = inventory, read, interval
        self.vnpus: Mapping[int, tuple[Vnpu, ...]] = MappingProxyType({})
        self._listeners: list[VnpusChanged] = []
        self._failing: str | None = None  # the error of the failing reads, logged once until a read succeeds

    def on_change(self, listener: VnpusChanged) -> None:
        self._listeners.append(listener)

    async def refresh(self) -> None:
        """Read the vNPUs once; a failed read keeps the last good one, and is logged when its error
        is new."""
        devices = [v.device for v in self._inventory.snapshot().devices]
        try:
            read = await asyncio.to_thread(self._read, devices)
        except (NpuPluginError, OSError) as error:
            if str(error) != self._failing:  # once per failure, not once per interval
                log.warning("vNPU listing failed, keeping the last one: %s", error, extra={"error": str(error)})
                self._failing = str(error)
            return
        if self._failing is not None:
            log.info("vNPU listing works again")
            self._failing = None
        vnpus = {p: tuple(sorted(v, key=lambda x: x.vnpu_id)) for p, v in read.items() if v}
        if vnpus == dict(self.vnpus):
            return
        log.info("vNPUs now: %s", _describe(vnpus), extra={"vnpus": _describe(vnpus)})
        self.vnpus = MappingProxyType(vnpus)
        for listener in self._listeners:
            listener(self.vnpus)

    async def run(self, stop: asyncio.Event) -> None:
        """Re-read the vNPUs every interval until `stop`."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval)
            if not stop.is_set():
                await self.refresh()


def _describe(vnpus: Mapping[int, tuple[Vnpu, ...]]) -> str:
    return (
        ", ".join(
            f"npu-{p}: " + " ".join(f"{v.vnpu_id}({v.template})" for v in chip) for p, chip in sorted(vnpus.items())
        )
        or "none"
    )
