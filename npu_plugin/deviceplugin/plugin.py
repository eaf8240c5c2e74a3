"""Device Plugin lifecycle: serve the socket, register with the kubelet, follow kubelet restarts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import grpc
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.backoff import retry_forever
from npu_plugin.deviceplugin.service import DevicePluginService
from npu_plugin.sockets import start_unix_server, stop_unix_server
from npu_plugin.tasks import first_of

log = logging.getLogger(__name__)
KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"


def socket_name(resource_name: str, pod_uid: str | None) -> str:
    short = resource_name.split("/", 1)[1]
    return f"npu-plugin-{short}-{pod_uid}.sock" if pod_uid else f"npu-plugin-{short}.sock"


class RegistrationError(Exception):
    pass


class _KubeletWatch(FileSystemEventHandler):
    def __init__(self, loop: asyncio.AbstractEventLoop, plugin: DevicePlugin) -> None:
        self._loop, self._plugin = loop, plugin

    def on_any_event(self, event: FileSystemEvent) -> None:
        name = Path(str(event.src_path)).name
        if event.event_type == "moved":
            name = Path(str(event.dest_path)).name
        self._loop.call_soon_threadsafe(self._plugin.on_file_event, name, event.event_type)


class DevicePlugin:
    """Serves v1beta1.DevicePlugin and keeps it registered for as long as `run` runs."""

    def __init__(
        self, directory: Path, resource_name: str, pod_uid: str | None,
        make_service: Callable[[], DevicePluginService],
        on_registered: Callable[[bool], None] = lambda _registered: None,
    ) -> None:
        self.directory, self.resource_name = directory, resource_name
        self.socket = directory / socket_name(resource_name, pod_uid)
        self._make_service = make_service
        self._on_registered = on_registered
        self.registered = False
        self._restart = asyncio.Event()
        self._kubelet_appeared = asyncio.Event()

    def on_file_event(self, name: str, kind: str) -> None:
        """Kubelet restart: it deletes every socket here and re-creates kubelet.sock."""
        if name == KUBELET_SOCKET and kind in ("created", "moved"):
            self._kubelet_appeared.set()
            if self.registered:
                log.info("kubelet.sock re-created: the kubelet restarted, registering again")
                self._restart.set()
        elif name == self.socket.name and kind == "deleted" and self.registered and not self.socket.exists():
            log.info("our socket %s was deleted: the kubelet restarted", self.socket)
            self._restart.set()

    async def run(self, stop: asyncio.Event) -> None:
        observer = Observer()
        observer.schedule(_KubeletWatch(asyncio.get_running_loop(), self), str(self.directory), recursive=False)
        observer.daemon = True
        observer.start()
        try:
            while not stop.is_set():
                await self._serve_once(stop)
        finally:
            observer.stop()
            await asyncio.to_thread(observer.join, 2)

    async def _serve_once(self, stop: asyncio.Event) -> None:
        service = self._make_service()
        server = await start_unix_server(
            self.socket, lambda s: pb_grpc.add_DevicePluginServicer_to_server(service, s)
        )
        log.info("device plugin serving on %s", self.socket)
        try:
            await self._register_until_done(stop)
            if stop.is_set():
                return
            self._set_registered(True)
            self._restart.clear()
            await first_of(stop.wait(), self._restart.wait())
        finally:
            self._set_registered(False)
            # Old streams close before the socket goes, so the kubelet never reads a dead stream.
            service.close_streams()
            await stop_unix_server(server, self.socket, grace=0.2)

    async def _register_until_done(self, stop: asyncio.Event) -> None:
        registering = asyncio.ensure_future(retry_forever(
            self._register_once, what="registration with the kubelet", log=log,
            retry_on=(RegistrationError,), wake=self._kubelet_appeared,
        ))
        await first_of(registering, stop.wait())

    async def _register_once(self) -> None:
        kubelet = self.directory / KUBELET_SOCKET
        if not kubelet.exists():
            raise RegistrationError(f"{kubelet} does not exist yet")
        request = pb.RegisterRequest(
            version=API_VERSION, endpoint=self.socket.name, resource_name=self.resource_name,
            options=pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
        )
        async with grpc.aio.insecure_channel(f"unix://{kubelet}") as channel:
            try:
                await pb_grpc.RegistrationStub(channel).Register(request, timeout=5)
            except grpc.aio.AioRpcError as error:
                raise RegistrationError(f"{error.code().name}: {error.details()}") from None
        log.info("registered %s with the kubelet (endpoint %s)", self.resource_name, self.socket.name)

    def _set_registered(self, registered: bool) -> None:
        if registered != self.registered:
            self.registered = registered
            self._on_registered(registered)

