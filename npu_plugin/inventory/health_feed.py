"""Feeds the inventory: polls backend health and watches --dev-root and the backend's own change
feed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from npu_plugin.ascend.device import Health, LinkState, device_key, has_roce, parse_device_node
from npu_plugin.backends.base import Backend, ChangeSource, FaultSource, LinkSource
from npu_plugin.host.fswatch import DirectoryWatch
from npu_plugin.inventory.state import Inventory

log = logging.getLogger(__name__)


class HealthMonitor:
    """Samples the backend every `interval` seconds and relays file-system events to the inventory.

    `sample_once()` is public so tests can drive the poller step by step without timing.
    """

    def __init__(self, backend: Backend, inventory: Inventory, dev_root: Path, interval: float) -> None:
        self._backend, self._inventory = backend, inventory
        self._dev_root, self._interval = dev_root, interval
        self._watch: DirectoryWatch | None = None
        self._watched_nodes = {
            v.physical_id for v in inventory.snapshot().devices if (dev_root / v.device.device_node).exists()
        }
        if missing := sorted({v.physical_id for v in inventory.snapshot().devices} - self._watched_nodes):
            log.warning(
                "no device node under %s for devices %s; their presence is not watched",
                dev_root,
                missing,
                extra={"device": device_key(missing)},
            )

    async def sample_once(self) -> None:
        roce = [v.physical_id for v in self._inventory.snapshot().devices if has_roce(v.device.device_type)]
        levels, faults, links = await asyncio.to_thread(self._sample, roce)
        self._inventory.observe(levels, faults, links)

    def _sample(self, roce: list[int]) -> tuple[dict[int, Health], dict[int, tuple[int, ...]], dict[int, LinkState]]:
        """Health levels, the fault codes of devices whose level is not OK (no fault query for a
        healthy node), and the RoCE link of the devices that have one (none asked on 310/310P)."""
        levels = self._backend.sample()
        troubled = [physical_id for physical_id, level in levels.items() if level is not Health.OK]
        faults = self._backend.fault_codes(troubled) if troubled and isinstance(self._backend, FaultSource) else {}
        links = self._backend.link_states(roce) if roce and isinstance(self._backend, LinkSource) else {}
        return levels, faults, links

    async def run(self, stop: asyncio.Event) -> None:
        """Sample until `stop` is set; the sleep between samples ends at once on stop."""
        while not stop.is_set():
            await self.sample_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval)

    def start_watching(self) -> None:
        watch = DirectoryWatch()
        if self._dev_root.is_dir():
            watch.add(self._dev_root, self._on_dev_event)
        if isinstance(self._backend, ChangeSource):
            # Health levels in a changed device list reach the inventory through the poller, so the
            # hysteresis counts samples, not file writes.
            self._backend.watch_changes(watch, self._inventory.update_devices)
        watch.start()
        self._watch = watch

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _on_dev_event(self, path: str, _kind: str) -> None:
        physical_id = parse_device_node(Path(path).name)
        if physical_id is None or physical_id not in self._watched_nodes:
            return
        present = Path(path).exists()
        if not present:
            log.warning("device node %s vanished", path, extra={"device": device_key([physical_id])})
        self._inventory.set_present(physical_id, present)
