"""DRA gRPC services: DRAPlugin v1 and v1beta1 (one implementation), DRAResourceHealth v1 and
v1alpha1 (one implementation), registration advertising exactly the services served."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from functools import partial
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
from npu_plugin._proto import pluginregistration_v1_pb2_grpc as reg_grpc
from npu_plugin.aio.tasks import repeating, until_closed
from npu_plugin.dra.claim_status import ClaimStatusReporter
from npu_plugin.dra.deadline import answer_by
from npu_plugin.dra.prepare_results import ClaimRef, PrepareResult, kubelet_devices
from npu_plugin.dra.preparer import Preparer
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import DeviceView, Inventory, Reason, Snapshot
from npu_plugin.logs import printable

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
# The kubelet stops trusting a device's health this many refresh periods after the last report.
REFRESHES_PER_TIMEOUT = 3


class _DraPluginLogic:
    """NodePrepareResources/NodeUnprepareResources for one API version's message module."""

    _pb: ModuleType  # the API version's messages
    _share_ids = False  # whether its Device has share_id (v1, from Kubernetes 1.35)

    def __init__(
        self,
        preparer: Preparer,
        observe: Callable[[str, float], None],
        claim_status: ClaimStatusReporter | None = None,
        on_prepared: Callable[[Sequence[tuple[ClaimRef, PrepareResult]]], None] = lambda _prepared: None,
    ) -> None:
        """`claim_status` (with --claim-status) hears each claim prepared or unprepared;
        `on_prepared` the claims each call prepared (the pod annotations start from there)."""
        self._preparer, self._observe = preparer, observe
        self._claim_status = claim_status
        self._on_prepared = on_prepared

    async def NodePrepareResources(self, request: Any, context: Context) -> Any:
        started = time.perf_counter()
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        # Answered before the kubelet's deadline, so a hung driver call fails its claim, not the
        # whole batch.
        deadline = answer_by(context.time_remaining(), time.monotonic())
        results = await asyncio.to_thread(self._preparer.prepare, refs, deadline=deadline)
        response = self._pb.NodePrepareResourcesResponse()
        prepared = [(ref, done) for ref in refs if (done := results.get(ref.uid)) and not done.error and done.devices]
        if self._claim_status is not None:
            for ref, done in prepared:
                self._claim_status.prepared(ref, done.devices)
        self._on_prepared(prepared)
        for uid, result in results.items():
            entry = response.claims[uid]
            entry.error = printable(result.error)
            for device in kubelet_devices(self._preparer.driver, uid, result.devices):
                added = entry.devices.add(
                    request_names=list(device.request_names),
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
                if device.share_id is not None and self._share_ids:
                    added.share_id = device.share_id
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
    _share_ids = True


class DraPluginV1Beta1(_DraPluginLogic, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    _pb = dra_v1beta1_pb2


def health_message(view: DeviceView) -> str:
    """Pure: what the kubelet shows beside a device's health in the pod status."""
    level = view.device.health
    if view.healthy == level.healthy:
        return f"{view.device.chip_name} health {level.value}"
    if view.healthy:
        return f"{view.device.chip_name} health {level.value}, not yet past the failure threshold"
    if view.reason is Reason.LINK_DOWN:
        return f"{view.device.chip_name} health {level.value}, RoCE link down past --link-down-timeout"
    return f"{view.device.chip_name} health {level.value}, unhealthy until it recovers or its device node is back"


def health_response(pb: ModuleType, snapshot: Snapshot, pool: str, timeout_seconds: int, now: int) -> Any:
    """A complete NodeWatchResourcesResponse of `pb` (dra-health v1 or v1alpha1: same fields)."""
    return pb.NodeWatchResourcesResponse(
        devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=pool, device_name=view.device.dra_name),
                health=pb.HEALTHY if view.healthy else pb.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=timeout_seconds,
                message=health_message(view),
            )
            for view in snapshot.owned_by(Owner.DRA)
        ]
    )


@dataclass(frozen=True, slots=True)
class HealthFeed:
    """What both versions of DRAResourceHealth stream: the inventory, our pool, the per-device
    timeout the kubelet is told, and whether the inventory was sampled recently (a health poller
    stuck in a hung driver call stops the refreshes, so the kubelet turns the devices Unknown)."""

    inventory: Inventory
    pool: str
    timeout_seconds: int
    fresh: Callable[[], bool]
    closing: asyncio.Event


class _ResourceHealthLogic:
    """NodeWatchResources for one API version's message module: the complete device list on
    connect, after every change, and again every timeout / REFRESHES_PER_TIMEOUT while samples
    stay fresh."""

    def __init__(self, pb: ModuleType, feed: HealthFeed) -> None:
        self._pb, self._feed = pb, feed

    async def NodeWatchResources(self, request: Any, context: Context) -> AsyncIterator[Any]:
        feed = self._feed
        refresh = feed.timeout_seconds / REFRESHES_PER_TIMEOUT
        changes = until_closed(feed.inventory.watch(), feed.closing)
        async with contextlib.aclosing(repeating(changes, refresh)) as snapshots:
            async for snapshot, repeated in snapshots:
                if not repeated or feed.fresh():
                    yield health_response(self._pb, snapshot, feed.pool, feed.timeout_seconds, int(time.time()))


class ResourceHealthV1(_ResourceHealthLogic, dra_health_v1_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, feed: HealthFeed) -> None:
        super().__init__(dra_health_v1_pb2, feed)


class ResourceHealthV1Alpha1(_ResourceHealthLogic, dra_health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, feed: HealthFeed) -> None:
        super().__init__(dra_health_v1alpha1_pb2, feed)


def dra_services(
    preparer: Preparer,
    observe: Callable[[str, float], None],
    health: HealthFeed,
    claim_status: ClaimStatusReporter | None = None,
    on_prepared: Callable[[Sequence[tuple[ClaimRef, PrepareResult]]], None] = lambda _prepared: None,
) -> list[tuple[str, Callable[[grpc.aio.Server], None]]]:
    """Every service of the DRA socket under the name the kubelet knows it by (k8s.io/kubelet's
    `DRAPluginService` and `DRAResourceHealthService` constants), DRAPlugin v1 first, each with what
    adds it to a server; registration advertises exactly these names, so it never names a service
    that is not served."""
    return [
        (
            "v1.DRAPlugin",
            partial(
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server,
                DraPluginV1(preparer, observe, claim_status, on_prepared),
            ),
        ),
        (
            "v1beta1.DRAPlugin",
            partial(
                dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server,
                DraPluginV1Beta1(preparer, observe, claim_status, on_prepared),
            ),
        ),
        (
            "v1.DRAResourceHealth",
            partial(dra_health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server, ResourceHealthV1(health)),
        ),
        (
            "v1alpha1.DRAResourceHealth",
            partial(
                dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server, ResourceHealthV1Alpha1(health)
            ),
        ),
    ]


class Registration(reg_grpc.RegistrationServicer):
    """pluginregistration.Registration on the registration socket, read by the kubelet's plugin
    watcher."""

    def __init__(
        self, driver: str, endpoint: str, services: Sequence[str], on_status: Callable[[bool, str], None]
    ) -> None:
        """`services`: the full names of the services the DRA socket serves (`dra_services`)."""
        self._driver, self._endpoint, self._on_status = driver, endpoint, on_status
        self._services = list(services)

    async def GetInfo(self, request: reg_pb.InfoRequest, context: Context) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(
            type="DRAPlugin", name=self._driver, endpoint=self._endpoint, supported_versions=self._services
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
