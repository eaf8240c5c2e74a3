"""DRA gRPC services: DRAPlugin v1 and v1beta1 (one implementation), resource health,
registration."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

import grpc

from npu_plugin._proto import dra_health_v1alpha1_pb2 as health_pb
from npu_plugin._proto import dra_health_v1alpha1_pb2_grpc as health_grpc
from npu_plugin._proto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from npu_plugin._proto import pluginregistration_v1_pb2 as reg_pb
from npu_plugin._proto import pluginregistration_v1_pb2_grpc as reg_grpc
from npu_plugin.aio.tasks import until_closed
from npu_plugin.dra.claim_status import ClaimStatusReporter
from npu_plugin.dra.deadline import answer_by
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.dra.preparer import Preparer
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory, Snapshot
from npu_plugin.logs import printable

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class _DraPluginLogic:
    """NodePrepareResources/NodeUnprepareResources for one API version's message module."""

    _pb: ModuleType  # the API version's messages

    def __init__(
        self,
        preparer: Preparer,
        observe: Callable[[str, float], None],
        claim_status: ClaimStatusReporter | None = None,
    ) -> None:
        """`claim_status` (with --claim-status) hears each claim prepared or unprepared."""
        self._preparer, self._observe = preparer, observe
        self._claim_status = claim_status

    async def NodePrepareResources(self, request: Any, context: Context) -> Any:
        started = time.perf_counter()
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        # Answered before the kubelet's deadline, so a hung driver call fails its claim, not the
        # whole batch.
        deadline = answer_by(context.time_remaining(), time.monotonic())
        results = await asyncio.to_thread(self._preparer.prepare, refs, deadline=deadline)
        response = self._pb.NodePrepareResourcesResponse()
        if self._claim_status is not None:
            for ref in refs:
                if (done := results.get(ref.uid)) is not None and not done.error and done.devices:
                    self._claim_status.prepared(ref, done.devices)
        for uid, result in results.items():
            entry = response.claims[uid]
            entry.error = printable(result.error)
            for device in result.devices:
                entry.devices.add(
                    request_names=list(device.request_names),
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
        self._observe("prepare", time.perf_counter() - started)
        return response

    async def NodeUnprepareResources(self, request: Any, context: Context) -> Any:
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        errors = await asyncio.to_thread(self._preparer.unprepare, refs)
        response = self._pb.NodeUnprepareResourcesResponse()
        if self._claim_status is not None:
            for ref in refs:
                if not errors.get(ref.uid, "x"):
                    self._claim_status.unprepared(ref)
        for uid, error in errors.items():
            response.claims[uid].error = printable(error)
        self._observe("unprepare", 0.0)
        return response


class DraPluginV1(_DraPluginLogic, dra_v1_pb2_grpc.DRAPluginServicer):
    _pb = dra_v1_pb2


class DraPluginV1Beta1(_DraPluginLogic, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    _pb = dra_v1beta1_pb2


def health_response(snapshot: Snapshot, pool: str, timeout_seconds: int) -> health_pb.NodeWatchResourcesResponse:
    now = int(time.time())
    return health_pb.NodeWatchResourcesResponse(
        devices=[
            health_pb.DeviceHealth(
                device=health_pb.DeviceIdentifier(pool_name=pool, device_name=view.device.dra_name),
                health=health_pb.HEALTHY if view.healthy else health_pb.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=timeout_seconds,
            )
            for view in snapshot.owned_by(Owner.DRA)
        ]
    )


class ResourceHealth(health_grpc.DRAResourceHealthServicer):
    """v1alpha1.DRAResourceHealth: the complete device list on connect and after every change."""

    def __init__(self, inventory: Inventory, pool: str, timeout_seconds: int, closing: asyncio.Event) -> None:
        self._inventory, self._pool = inventory, pool
        self._timeout, self._closing = timeout_seconds, closing

    async def NodeWatchResources(
        self, request: health_pb.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[health_pb.NodeWatchResourcesResponse]:
        async with contextlib.aclosing(until_closed(self._inventory.watch(), self._closing)) as snapshots:
            async for snapshot in snapshots:
                yield health_response(snapshot, self._pool, self._timeout)


class Registration(reg_grpc.RegistrationServicer):
    """pluginregistration.Registration on the registration socket, read by the kubelet's plugin
    watcher."""

    def __init__(self, driver: str, endpoint: str, on_status: Callable[[bool, str], None]) -> None:
        self._driver, self._endpoint, self._on_status = driver, endpoint, on_status

    async def GetInfo(self, request: reg_pb.InfoRequest, context: Context) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(
            type="DRAPlugin", name=self._driver, endpoint=self._endpoint, supported_versions=list(SUPPORTED_VERSIONS)
        )

    async def NotifyRegistrationStatus(
        self, request: reg_pb.RegistrationStatus, context: Context
    ) -> reg_pb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registered with the kubelet as DRA driver %s", self._driver)
        else:
            log.error(
                "the kubelet rejected the registration: %s; still serving so it can retry",
                request.error,
                extra={"error": request.error},
            )
        self._on_status(request.plugin_registered, request.error)
        return reg_pb.RegistrationStatusResponse()
