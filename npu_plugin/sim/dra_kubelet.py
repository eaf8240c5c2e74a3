"""A kubelet stand-in for DRA: registration, Prepare/Unprepare, the health stream, slice wiping.

It follows pkg/kubelet/cm/dra/plugin on top of the plugin watcher (`plugin_watcher`): at start it
deletes this node's ResourceSlices of every driver; it accepts plugins of type "DRAPlugin", takes
the first of the plugin's supported services that it knows (`v1.DRAPlugin`, `v1beta1.DRAPlugin`)
and, as kubelets from 1.37 do, the newest health service the plugin advertises
(`v1.DRAResourceHealth` before `v1alpha1.DRAResourceHealth`; none advertised, no health stream);
it refuses an endpoint already registered, with the kubelet's own error texts; a driver left
without plugins has its slices wiped after `wipe_delay` seconds (30 s in the kubelet). Used by the
tests and by `npu-plugin simulate`; RPC errors reach the caller as `grpc.aio.AioRpcError`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from npu_plugin._proto import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from npu_plugin._proto import pluginregistration_v1_pb2 as reg_pb
from npu_plugin.sim.plugin_watcher import Attempt, PluginWatcher, RegistrationRejectedError
from npu_plugin.sim.rest import SLICES_PATH, RestClient, RestError

log = logging.getLogger(__name__)
PLUGIN_TYPE = "DRAPlugin"
KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
_MODULES: dict[str, tuple[ModuleType, Any]] = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc.DRAPluginStub),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc.DRAPluginStub),
}
# The kubelet's healthServicesSupportedByKubelet, newest first.
HEALTH_SERVICES: dict[str, tuple[ModuleType, Any]] = {
    "v1.DRAResourceHealth": (dra_health_v1_pb2, dra_health_v1_pb2_grpc.DRAResourceHealthStub),
    "v1alpha1.DRAResourceHealth": (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub),
}
CALL_TIMEOUT = 45.0  # the kubelet's defaultClientCallTimeout


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None  # v1 answers it for a share of a shared device


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    pool: str
    device: str
    health: str  # UNKNOWN | HEALTHY | UNHEALTHY
    timeout_seconds: int
    message: str = ""


@dataclass
class PluginConnection:
    driver: str
    endpoint: str
    service: str
    socket: Path
    supported: tuple[str, ...]
    channel: grpc.aio.Channel

    @property
    def health_service(self) -> str | None:
        return pick_health_service(self.supported)


def choose_service(supported: Sequence[str], known: Sequence[str]) -> str:
    """The kubelet's validateSupportedServices: the first of the plugin's list that it knows."""
    if not supported:
        raise ValueError("empty list of supported gRPC services (aka supported versions)")
    for service in supported:
        if service in known:
            return service
    raise ValueError(
        f"none of services supported by the plugin ({list(supported)}) are supported by the kubelet ({list(known)})"
    )


def pick_health_service(supported: Sequence[str]) -> str | None:
    """The kubelet's pickHealthService: the newest health service both sides know, whatever the
    plugin's order; None (no health stream) when the plugin advertises none."""
    return next((service for service in HEALTH_SERVICES if service in supported), None)


def validate_info(info: reg_pb.PluginInfo, socket: Path, known: Sequence[str], taken: Iterable[str]) -> tuple[str, str]:
    """(endpoint, chosen service) for a plugin's GetInfo answer, or RegistrationRejectedError."""
    if info.type != PLUGIN_TYPE:
        raise RegistrationRejectedError(
            f"RegisterPlugin error -- no handler registered for plugin type: {info.type} at socket {socket}"
        )
    endpoint = info.endpoint or str(socket)
    try:
        service = choose_service(list(info.supported_versions), known)
    except ValueError as error:
        raise RegistrationRejectedError(
            "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA "
            f"driver plugin {info.name} at endpoint {endpoint}: {error}"
        ) from None
    if endpoint in taken:
        raise RegistrationRejectedError(
            "RegisterPlugin error -- plugin registration failed with err: endpoint "
            f"{endpoint} already registered for DRA driver plugin {info.name}"
        )
    return endpoint, service


class DraKubeletSimulator:
    """Start with `start()` (or `async with`); `plugins` holds the registered plugins by driver,
    newest last."""

    def __init__(
        self,
        registrar_dir: Path,
        *,
        node_name: str,
        api_url: str | None = None,
        services: Sequence[str] = KUBELET_SERVICES,
        scan_interval: float = 0.05,
        retry_interval: float = 0.5,
        wipe_delay: float | None = 30.0,
    ) -> None:
        self.node_name, self.services = node_name, tuple(services)
        self._rest = RestClient(api_url) if api_url else None
        self._wipe_delay = wipe_delay
        self.plugins: dict[str, list[PluginConnection]] = {}
        self._watcher = PluginWatcher(registrar_dir, self, scan_interval=scan_interval, retry_interval=retry_interval)
        self._wipes: dict[str, asyncio.Task[None]] = {}
        self._retired: list[grpc.aio.Channel] = []

    async def __aenter__(self) -> DraKubeletSimulator:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    @property
    def attempts(self) -> list[Attempt]:
        return self._watcher.attempts

    # ---- lifecycle
    async def start(self) -> None:
        """Wipe this node's slices (when an API is known), then watch the registrar directory."""
        await self.wipe_slices()
        self._watcher.start()

    async def stop(self) -> None:
        await self._watcher.stop()
        wipes, self._wipes = list(self._wipes.values()), {}
        for task in wipes:
            task.cancel()
        await asyncio.gather(*wipes, return_exceptions=True)
        for channel in self._retired:
            await channel.close()
        self._retired.clear()

    async def restart(self) -> None:
        """Like a kubelet restart: forget every plugin, wipe the node's slices, register again."""
        await self.stop()
        await self.start()

    async def wipe_slices(self, driver: str | None = None, deadline: float = 10.0) -> None:
        """DeleteCollection of this node's ResourceSlices (one driver's, or all), retried until
        `deadline`."""
        if self._rest is None:
            return
        selector = f"spec.nodeName={self.node_name}" + (f",spec.driver={driver}" if driver else "")
        log.info("deleting ResourceSlices with %s", selector)
        give_up, delay = time.monotonic() + deadline, 0.05
        while True:
            try:
                await asyncio.to_thread(self._rest.request, "DELETE", SLICES_PATH, query={"fieldSelector": selector})
                return
            except RestError:
                if time.monotonic() + delay > give_up:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    # ---- the DRA plugin handler
    def accept(self, info: reg_pb.PluginInfo, socket: Path) -> PluginConnection:
        taken = [p.endpoint for p in self.plugins.get(info.name, [])]
        endpoint, service = validate_info(info, socket, self.services, taken)
        plugin = PluginConnection(
            info.name,
            endpoint,
            service,
            socket,
            tuple(info.supported_versions),
            grpc.aio.insecure_channel(f"unix://{endpoint}"),
        )
        self.plugins.setdefault(info.name, []).append(plugin)
        if (wipe := self._wipes.pop(info.name, None)) is not None:
            wipe.cancel()
        return plugin

    def deregister(self, plugin: PluginConnection) -> None:
        # Closed at stop, not now: closing would cancel calls a caller still has in flight on it.
        self._retired.append(plugin.channel)
        remaining = [p for p in self.plugins.get(plugin.driver, []) if p is not plugin]
        self.plugins[plugin.driver] = remaining
        if not remaining and self._wipe_delay is not None and plugin.driver not in self._wipes:
            self._wipes[plugin.driver] = asyncio.create_task(self._wipe_later(plugin.driver), name="dra-kubelet-wipe")

    async def _wipe_later(self, driver: str) -> None:
        assert self._wipe_delay is not None
        await asyncio.sleep(self._wipe_delay)
        self._wipes.pop(driver, None)
        await self.wipe_slices(driver)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Until `predicate()` holds, re-checked after each (de)registration; TimeoutError
        otherwise."""
        await self._watcher.wait_for(predicate, timeout)

    async def wait_for_plugin(
        self, driver: str, *, endpoint: str | None = None, timeout: float = 10.0
    ) -> PluginConnection:
        def found() -> PluginConnection | None:
            return next((p for p in reversed(self.plugins.get(driver, [])) if endpoint in (None, p.endpoint)), None)

        await self.wait_for(lambda: found() is not None, timeout)
        plugin = found()
        assert plugin is not None
        return plugin

    def plugin(self, driver: str | None = None) -> PluginConnection:
        """The newest plugin of `driver` (or of the only registered driver)."""
        drivers = [d for d, plugins in self.plugins.items() if plugins]
        if driver is None and len(drivers) == 1:
            driver = drivers[0]
        plugins = self.plugins.get(driver or "", [])
        if not plugins:
            raise LookupError(f"DRA driver {driver} is not registered (registered: {drivers})")
        return plugins[-1]

    # ---- calls into the plugin
    def _stub(self, plugin: PluginConnection | None, version: str | None) -> tuple[ModuleType, Any]:
        plugin = plugin or self.plugin()
        service = f"{version}.DRAPlugin" if version else plugin.service
        if service not in plugin.supported:
            raise LookupError(f"the plugin does not offer {service} (offers {list(plugin.supported)})")
        module, stub = _MODULES[service]
        return module, stub(plugin.channel)

    async def prepare(
        self,
        claims: Sequence[Claim],
        *,
        version: str | None = None,
        plugin: PluginConnection | None = None,
        timeout: float = CALL_TIMEOUT,
    ) -> dict[str, PrepareResult]:
        """NodePrepareResources through `version` ("v1", "v1beta1"; default: the negotiated
        service), with the kubelet's deadline unless `timeout` says otherwise."""
        pb, stub = self._stub(plugin, version)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = await stub.NodePrepareResources(request, timeout=timeout)
        return {
            uid: PrepareResult(
                tuple(
                    PreparedDevice(
                        tuple(d.request_names),
                        d.pool_name,
                        d.device_name,
                        tuple(d.cdi_device_ids),
                        d.share_id if "share_id" in d.DESCRIPTOR.fields_by_name and d.HasField("share_id") else None,
                    )
                    for d in result.devices
                ),
                result.error,
            )
            for uid, result in response.claims.items()
        }

    async def unprepare(
        self, claims: Sequence[Claim], *, version: str | None = None, plugin: PluginConnection | None = None
    ) -> dict[str, str]:
        """NodeUnprepareResources; the error text by claim UID ("" for success)."""
        pb, stub = self._stub(plugin, version)
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = await stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT)
        return {uid: result.error for uid, result in response.claims.items()}

    async def watch_health(
        self, plugin: PluginConnection | None = None, *, version: str | None = None
    ) -> AsyncIterator[list[DeviceHealth]]:
        """DRAResourceHealth/NodeWatchResources in `version` ("v1", "v1alpha1"; default: the one the
        kubelet picks from the plugin's registration): each message as a device list."""
        plugin = plugin or self.plugin()
        service = f"{version}.DRAResourceHealth" if version else plugin.health_service
        if service not in plugin.supported:
            raise LookupError(f"the plugin does not advertise {service} (advertises {list(plugin.supported)})")
        pb, stub = HEALTH_SERVICES[service]
        call = stub(plugin.channel).NodeWatchResources(pb.NodeWatchResourcesRequest())
        try:
            async for response in call:
                yield [
                    DeviceHealth(
                        d.device.pool_name,
                        d.device.device_name,
                        pb.HealthStatus.Name(d.health),
                        d.health_check_timeout_seconds,
                        d.message,
                    )
                    for d in response.devices
                ]
        finally:
            call.cancel()
