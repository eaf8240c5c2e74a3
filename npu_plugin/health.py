"""Feeds the inventory: polls backend health and watches --dev-root and the fake inventory file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from npu_plugin.backends.base import Backend
from npu_plugin.backends.fake import FakeBackend
from npu_plugin.errors import BackendError
from npu_plugin.inventory import Inventory
from npu_plugin.logs import device_key

log = logging.getLogger(__name__)
_DEVICE_NODE = re.compile(r"^davinci(\d+)$")


class _Relay(FileSystemEventHandler):
    """Hands watchdog events (on its thread) to a callback on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[str, bool], None]) -> None:
        self._loop, self._callback = loop, callback

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("created", "deleted", "modified", "closed", "moved"):
            self._loop.call_soon_threadsafe(self._callback, _path(event.src_path), event.event_type != "deleted")
            if event.event_type == "moved":
                self._loop.call_soon_threadsafe(self._callback, _path(event.src_path), False)
                self._loop.call_soon_threadsafe(self._callback, _path(event.dest_path), True)


def _path(raw: str | bytes) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


class HealthMonitor:
    """Samples the backend every `interval` seconds and relays file-system events to the inventory.

    `sample_once()` is public so tests can drive the poller step by step without timing.
    """

    def __init__(self, backend: Backend, inventory: Inventory, dev_root: Path, interval: float) -> None:
        self._backend, self._inventory = backend, inventory
        self._dev_root, self._interval = dev_root, interval
        self._observer: Observer | None = None  # type: ignore[valid-type]
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
        self._reload_pending = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def sample_once(self) -> None:
        levels = await asyncio.to_thread(self._backend.sample)
        self._inventory.observe(levels)

    async def run(self, stop: asyncio.Event) -> None:
        """Sample until `stop` is set; the sleep between samples ends at once on stop."""
        while not stop.is_set():
            await self.sample_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval)

    def start_watching(self) -> None:
        loop = asyncio.get_running_loop()
        observer = Observer()
        if self._dev_root.is_dir():
            observer.schedule(_Relay(loop, self._on_dev_event), str(self._dev_root), recursive=False)
        if isinstance(self._backend, FakeBackend) and self._backend.inventory_path is not None:
            folder = self._backend.inventory_path.resolve().parent
            observer.schedule(_Relay(loop, self._on_inventory_event), str(folder), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def stop_watching(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
            self._observer = None

    def _on_dev_event(self, path: str, exists: bool) -> None:
        match = _DEVICE_NODE.match(Path(path).name)
        if match is None or int(match.group(1)) not in self._watched_nodes:
            return
        pid = int(match.group(1))
        present = Path(path).exists()
        if not present:
            log.warning("device node %s vanished", path, extra={"device": device_key([pid])})
        self._inventory.set_present(pid, present)

    def _on_inventory_event(self, path: str, _exists: bool) -> None:
        assert isinstance(self._backend, FakeBackend) and self._backend.inventory_path is not None
        if Path(path).resolve() != self._backend.inventory_path.resolve() or self._reload_pending:
            return
        self._reload_pending = True
        task = asyncio.get_running_loop().create_task(self._reload(), name="inventory-file-reload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload(self) -> None:
        self._reload_pending = False
        assert isinstance(self._backend, FakeBackend)
        try:
            devices = await asyncio.to_thread(self._backend.reload)
        except BackendError as error:
            log.warning("inventory file rewrite rejected: %s", error, extra={"error": str(error)})
            return
        # Health levels in the file reach the inventory through the poller, so the hysteresis counts
        # samples, not file writes.
        self._inventory.update_devices(devices)
