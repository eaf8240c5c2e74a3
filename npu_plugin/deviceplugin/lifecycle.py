"""Device Plugin lifecycle: serve the socket, register with the kubelet, follow kubelet stops and
restarts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.aio.backoff import retry_forever
from npu_plugin.aio.tasks import first_of
from npu_plugin.deviceplugin.service import DevicePluginService
from npu_plugin.host.dirwait import wait_for_directory
from npu_plugin.host.fswatch import DirectoryWatch
from npu_plugin.host.sockets import start_unix_server, stop_unix_server

log = logging.getLogger(__name__)
KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"
# The kubelet dials back with a 10 s timeout inside Register; wait a little longer than that.
REGISTER_TIMEOUT = 15.0


def socket_name(resource_name: str, pod_uid: str | None) -> str:
    short = resource_name.split("/", 1)[1]
    return f"npu-plugin-{short}-{pod_uid}.sock" if pod_uid else f"npu-plugin-{short}.sock"


class RegistrationError(Exception):
    """One registration attempt failed; retried with back-off."""


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which file `path` is now: a re-created kubelet.sock differs even when its inode number is
    reused."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_ctime_ns


class DevicePlugin:
    """Serves v1beta1.DevicePlugin and keeps it registered for as long as `run` runs."""

    def __init__(
        self,
        directory: Path,
        resource_name: str,
        pod_uid: str | None,
        make_service: Callable[[], DevicePluginService],
        on_registered: Callable[[bool], None] = lambda _registered: None,
    ) -> None:
        self.directory, self.resource_name = directory, resource_name
        self.socket = directory / socket_name(resource_name, pod_uid)
        self._make_service = make_service
        self._on_registered = on_registered
        self.registered = False
        self._serving = False
        self._registered_with: tuple[int, int, int] | None = None
        # The kubelet.sock the current registration attempt dials: an event about that very file is
        # old news.
        self._registering_with: tuple[int, int, int] | None = None
        self._restart = asyncio.Event()

    def on_file_event(self, name: str, kind: str) -> None:
        """Kubelet stop: kubelet.sock goes, and with it our registration. Kubelet start: it deletes
        every socket here and creates kubelet.sock.

        Events arrive late and out of step with our own unlink/bind, so each one is checked against
        the files as they are now: a stale event changes nothing.
        """
        if not self._serving:
            return
        kubelet = _identity(self.directory / KUBELET_SOCKET)
        if (
            name == KUBELET_SOCKET
            and kind == "created"
            and kubelet is not None
            and kubelet not in (self._registered_with, self._registering_with)
        ):
            # A kubelet.sock no attempt has dialed yet: a new round registers at once instead of
            # sleeping out its back-off. One already being dialed is left alone: restarting would
            # register twice with one kubelet.
            log.info("kubelet.sock (re-)created: registering again")
            self._restart.set()
        elif name == KUBELET_SOCKET and kind == "deleted" and kubelet is None and self._registered_with is not None:
            log.warning("kubelet.sock was deleted: the kubelet stopped, so the device plugin is not registered")
            self._restart.set()
        elif name == self.socket.name and kind == "deleted" and not self.socket.exists():
            log.info("our socket %s was deleted: the kubelet restarted", self.socket)
            self._restart.set()

    async def run(self, stop: asyncio.Event) -> None:
        # The directory is the kubelet's: on a node without a kubelet yet, wait for it rather than
        # make it.
        if not await wait_for_directory(self.directory, stop, "the kubelet"):
            return
        watch = DirectoryWatch()
        watch.add(self.directory, lambda path, kind: self.on_file_event(Path(path).name, kind))
        watch.start()
        try:
            while not stop.is_set():
                await self._serve_once(stop)
        finally:
            await asyncio.to_thread(watch.stop)

    async def _serve_once(self, stop: asyncio.Event) -> None:
        service = self._make_service()
        server = await start_unix_server(self.socket, lambda s: pb_grpc.add_DevicePluginServicer_to_server(service, s))
        self._serving = True
        self._restart.clear()
        log.info("device plugin serving on %s", self.socket)
        try:
            await first_of(self._register_until_done(), stop.wait(), self._restart.wait())
            if stop.is_set() or self._restart.is_set():
                return
            self._set_registered(True)
            await first_of(stop.wait(), self._restart.wait())
        finally:
            self._serving = False
            self._registered_with = None
            self._registering_with = None
            self._set_registered(False)
            # Old streams close before the socket goes, so the kubelet never reads a dead stream.
            service.close_streams()
            await stop_unix_server(server, self.socket, grace=0.2)

    async def _register_until_done(self) -> None:
        await retry_forever(
            self._register_once,
            what="registration with the kubelet",
            log=log,
            retry_on=(RegistrationError,),
            repeat_level=logging.DEBUG,  # a node whose kubelet is not up yet retries for as long as it takes
        )

    async def _register_once(self) -> None:
        kubelet = self.directory / KUBELET_SOCKET
        identity = _identity(kubelet)
        if identity is None:
            raise RegistrationError(f"{kubelet} does not exist yet")
        self._registering_with = identity
        if not self.socket.exists():
            # Deleted before the event that reports it could be told apart from our own unlink.
            self._restart.set()
            raise RegistrationError(f"our socket {self.socket} was deleted")
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket.name,
            resource_name=self.resource_name,
            options=pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
        )
        async with grpc.aio.insecure_channel(f"unix://{kubelet}") as channel:
            try:
                await pb_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT)
            except grpc.aio.AioRpcError as error:
                raise RegistrationError(f"{error.code().name}: {error.details()}") from None
        self._registered_with = identity
        log.info("registered %s with the kubelet (endpoint %s)", self.resource_name, self.socket.name)

    def _set_registered(self, registered: bool) -> None:
        if registered != self.registered:
            self.registered = registered
            self._on_registered(registered)
