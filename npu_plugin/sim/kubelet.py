"""A kubelet stand-in for Device Plugin v1beta1: the Registration server, dial-back and
ListAndWatch.

It follows pkg/kubelet/cm/devicemanager: at start it removes every socket from the plugin directory
(keeping its checkpoint and other files), serves `kubelet.sock`; Register checks the API version and
the extended resource name, dials the plugin's endpoint inside the directory, calls
GetDevicePluginOptions before answering, then keeps a ListAndWatch stream open. Used by the tests
and by `npu-plugin simulate`. Errors of the plugin's own RPCs reach the caller as
`grpc.aio.AioRpcError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.sim.podresources import PodResourcesSimulator

log = logging.getLogger(__name__)
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT = "kubelet_internal_checkpoint"
SUPPORTED_VERSIONS = ("v1beta1",)
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def is_extended_resource_name(name: str) -> bool:
    """The kubelet's v1helper.IsExtendedResourceName: `domain/name`, not in kubernetes.io,
    quota-safe."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, short = f"requests.{name}".partition("/")
    labels = prefix.split(".")
    return (
        len(prefix) <= 253
        and all(_DNS_LABEL.match(label) for label in labels)
        and len(short) <= 63
        and "/" not in short
        and bool(_QUALIFIED_NAME.match(short))
    )


@dataclass
class PluginConnection:
    """One registered plugin as the kubelet's device manager keeps it."""

    resource_name: str
    endpoint: Path
    options: pb.DevicePluginOptions
    channel: grpc.aio.Channel
    registered_at: float
    devices: dict[str, pb.Device] = field(default_factory=dict)
    updates: int = 0
    stream_open: bool = False
    stream: asyncio.Task[None] | None = None

    @property
    def stub(self) -> pb_grpc.DevicePluginAsyncStub:
        return pb_grpc.DevicePluginStub(self.channel)

    def healthy_ids(self) -> list[str]:
        return sorted(i for i, d in self.devices.items() if d.health == "Healthy")


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletSimulator) -> None:
        self._kubelet = kubelet

    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.Empty:
        try:
            await self._kubelet.register(request)
        except RegistrationRejectedError as error:
            await context.abort(grpc.StatusCode.UNKNOWN, str(error))
        return pb.Empty()


class RegistrationRejectedError(Exception):
    """Why the kubelet refused a Register call (the plugin sees it as the RPC's error message)."""


class KubeletSimulator:
    """Serves `<plugin_dir>/kubelet.sock`; `plugins` holds what each registered resource
    advertises."""

    def __init__(
        self, plugin_dir: Path, dial_timeout: float = 10.0, pod_resources: PodResourcesSimulator | None = None
    ) -> None:
        """`pod_resources` learns what `admit` hands out, as the kubelet's PodResources API does."""
        self.plugin_dir = plugin_dir
        self.pod_resources = pod_resources
        self.socket = plugin_dir / KUBELET_SOCKET
        self.dial_timeout = dial_timeout
        self.plugins: dict[str, PluginConnection] = {}
        self.registrations: list[tuple[str, float]] = []
        self.rejections: list[str] = []
        self.socket_created_at: float | None = None
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Condition()

    async def start(self, clean: bool = True) -> None:
        """Clean the directory like a starting kubelet, then serve kubelet.sock.

        `clean=False` leaves the plugins' sockets in place: a kubelet.sock re-created on its own.
        """
        self.plugin_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        if clean:
            remove_sockets(self.plugin_dir)
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        self.socket_created_at = time.monotonic()
        await server.start()
        self._server = server

    async def stop(self) -> None:
        """Disconnect every plugin and stop serving; kubelet.sock is removed."""
        for resource in list(self.plugins):
            await self._disconnect(self.plugins.pop(resource))
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        await self._notify()

    async def restart(self) -> None:
        """A kubelet restart: the plugins lose their streams, every socket goes, kubelet.sock
        returns."""
        await self.stop()
        await self.start()

    async def register(self, request: pb.RegisterRequest) -> None:
        """The kubelet's Register: validate, dial back, GetDevicePluginOptions, then start
        ListAndWatch."""
        try:
            validate(request)
            connection = await self._connect(request)
        except RegistrationRejectedError as error:
            self.rejections.append(str(error))
            log.info("registration rejected: %s", error)
            raise
        if (previous := self.plugins.get(request.resource_name)) is not None:
            await self._disconnect(previous)
        self.plugins[request.resource_name] = connection
        name = f"list-and-watch {request.resource_name}"
        connection.stream = asyncio.create_task(self._watch(connection), name=name)
        self.registrations.append((request.resource_name, connection.registered_at))
        await self._notify()

    async def _connect(self, request: pb.RegisterRequest) -> PluginConnection:
        endpoint = self.plugin_dir / request.endpoint
        channel = grpc.aio.insecure_channel(f"unix://{endpoint}")
        try:
            await asyncio.wait_for(channel.channel_ready(), self.dial_timeout)
            stub = pb_grpc.DevicePluginStub(channel)
            options = await stub.GetDevicePluginOptions(pb.Empty(), timeout=self.dial_timeout)
        except (TimeoutError, grpc.aio.AioRpcError) as error:
            await channel.close()
            raise RegistrationRejectedError(f"failed to dial device plugin {endpoint}: {error!r}") from None
        return PluginConnection(request.resource_name, endpoint, options, channel, time.monotonic())

    async def _watch(self, connection: PluginConnection) -> None:
        stream = connection.stub.ListAndWatch(pb.Empty())
        connection.stream_open = True
        try:
            async for response in stream:
                connection.devices = {d.ID: d for d in response.devices}
                connection.updates += 1
                await self._notify()
        except grpc.aio.AioRpcError as error:
            log.info("ListAndWatch of %s ended: %s", connection.resource_name, error.code().name)
        finally:
            connection.stream_open = False
            if self.plugins.get(connection.resource_name) is connection:
                del self.plugins[connection.resource_name]
            await self._notify()

    async def _disconnect(self, connection: PluginConnection) -> None:
        if connection.stream is not None:
            connection.stream.cancel()
            await asyncio.gather(connection.stream, return_exceptions=True)
        await connection.channel.close()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        """Wait until `predicate()` holds after some change; TimeoutError names `what`."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout)
            except TimeoutError:
                raise TimeoutError(f"kubelet simulator: no {what} within {timeout}s") from None

    def plugin(self, resource: str) -> PluginConnection:
        try:
            return self.plugins[resource]
        except KeyError:
            raise LookupError(f"no device plugin registered for {resource}") from None

    async def allocate(self, resource: str, ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        """Allocate for one container, as the kubelet does when the container is created."""
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])
        response = await self.plugin(resource).stub.Allocate(request, timeout=10)
        return response.container_responses[0]

    async def admit(
        self, resource: str, ids: Sequence[str], *, namespace: str, pod: str, container: str
    ) -> pb.ContainerAllocateResponse:
        """A container admitted with these devices: Allocate, then (as the kubelet records a
        successful allocation) the container holds them in the PodResources API."""
        response = await self.allocate(resource, ids)
        if self.pod_resources is not None:
            self.pod_resources.hold_devices(namespace, pod, container, list(ids), resource)
        return response

    async def preferred(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """GetPreferredAllocation for one container; the kubelet asks even when available ==
        size."""
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = await self.plugin(resource).stub.GetPreferredAllocation(request, timeout=10)
        return list(response.container_responses[0].deviceIDs)


def validate(request: pb.RegisterRequest) -> None:
    """The checks the kubelet's Register makes before it dials the plugin."""
    if request.version not in SUPPORTED_VERSIONS:
        raise RegistrationRejectedError(
            f"requested device plugin API version {request.version!r} is not supported by the kubelet; "
            f"supported versions are {list(SUPPORTED_VERSIONS)}"
        )
    if not is_extended_resource_name(request.resource_name):
        raise RegistrationRejectedError(f"invalid name of device plugin socket: {request.resource_name!r}")


def remove_sockets(directory: Path) -> None:
    """What a starting kubelet does to its device-plugin directory: every socket goes, the rest
    stays."""
    for path in directory.iterdir():
        if path.name != CHECKPOINT and path.is_socket():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
