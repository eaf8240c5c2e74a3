"""The kubelet's plugin watcher (pkg/kubelet/pluginmanager), for the simulators.

It scans a registrar directory tree for Unix sockets (names starting with '.' are ignored), calls
GetInfo on each new one, lets a handler accept or refuse the plugin, and reports the verdict with
NotifyRegistrationStatus. Refused or unreachable plugins are tried again after `retry_interval`; a
socket that vanishes or is re-created (another inode) deregisters its plugin first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import grpc

from npu_plugin._proto import pluginregistration_v1_pb2 as reg_pb
from npu_plugin._proto import pluginregistration_v1_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)
P = TypeVar("P")


class RegistrationRejectedError(Exception):
    """A handler refuses a plugin; the message is what NotifyRegistrationStatus carries."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One registration attempt as the plugin saw it (`error` empty when registered)."""

    socket: Path
    registered: bool
    error: str


class PluginHandler(Protocol[P]):
    def accept(self, info: reg_pb.PluginInfo, socket: Path) -> P:
        """Register the plugin, or raise RegistrationRejectedError."""

    def deregister(self, plugin: P) -> None: ...


@dataclass
class _Socket(Generic[P]):
    identity: tuple[int, int]
    plugin: P | None = None
    retry_at: float = 0.0


class PluginWatcher(Generic[P]):
    def __init__(
        self, directory: Path, handler: PluginHandler[P], *, scan_interval: float, retry_interval: float
    ) -> None:
        self.directory, self._handler = directory, handler
        self._scan_interval, self._retry_interval = scan_interval, retry_interval
        self.attempts: list[Attempt] = []
        self._sockets: dict[Path, _Socket[P]] = {}
        self._scanner: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._scanner = asyncio.create_task(self._scan_forever(), name="plugin-watcher")

    async def stop(self) -> None:
        """Stop scanning and deregister every plugin."""
        if self._scanner is not None:
            self._scanner.cancel()
            await asyncio.gather(self._scanner, return_exceptions=True)
            self._scanner = None
        for path in list(self._sockets):
            self._forget(path)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Until `predicate()` holds, re-checked after each (de)registration; TimeoutError
        otherwise."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _scan_forever(self) -> None:
        while True:
            await self._scan_once()
            await asyncio.sleep(self._scan_interval)

    def _find_sockets(self) -> dict[Path, tuple[int, int]]:
        found = {}
        for folder, _dirs, files in os.walk(self.directory):
            for name in files:
                path = Path(folder) / name
                with contextlib.suppress(FileNotFoundError):
                    info = path.lstat()
                    if not name.startswith(".") and stat.S_ISSOCK(info.st_mode):
                        found[path] = (info.st_ino, info.st_mtime_ns)
        return found

    async def _scan_once(self) -> None:
        found = await asyncio.to_thread(self._find_sockets)
        for path in [p for p, entry in self._sockets.items() if found.get(p) != entry.identity]:
            self._forget(path)
        now = time.monotonic()
        for path, identity in found.items():
            entry = self._sockets.setdefault(path, _Socket(identity))
            if entry.plugin is None and now >= entry.retry_at:
                await self._register(path, entry)

    async def _register(self, socket: Path, entry: _Socket[P]) -> None:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(reg_pb.InfoRequest(), timeout=1.0)
            except grpc.aio.AioRpcError as rpc_error:
                self._failed(socket, entry, f"GetInfo failed: {rpc_error.details()}")
                return
            verdict = ""
            try:
                entry.plugin = self._handler.accept(info, socket)
            except RegistrationRejectedError as rejection:
                verdict = str(rejection)
            await self._notify(stub, socket, entry, verdict)

    async def _notify(self, stub: reg_grpc.RegistrationAsyncStub, socket: Path, entry: _Socket[P], error: str) -> None:
        try:
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=not error, error=error), timeout=5.0
            )
        except grpc.aio.AioRpcError as rpc_error:
            error = error or f"NotifyRegistrationStatus failed: {rpc_error.details()}"
        if error:
            self._failed(socket, entry, error)
            return
        log.info("plugin at %s registered", socket)
        self.attempts.append(Attempt(socket, True, ""))
        self._signal()

    def _failed(self, socket: Path, entry: _Socket[P], error: str) -> None:
        log.info("registration of %s failed: %s", socket, error)
        self.attempts.append(Attempt(socket, False, error))
        entry.retry_at = time.monotonic() + self._retry_interval
        self._signal()

    def _forget(self, socket: Path) -> None:
        entry = self._sockets.pop(socket)
        if entry.plugin is not None:
            log.info("plugin at %s deregistered", socket)
            self._handler.deregister(entry.plugin)
            self._signal()
