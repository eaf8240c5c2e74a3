"""The v1beta1.DevicePlugin service: ListAndWatch, GetPreferredAllocation, Allocate."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.aio.tasks import until_closed
from npu_plugin.ascend.container_edits import ContainerEdits, HostLayout, container_edits
from npu_plugin.ascend.device import Device, device_key, id_prefix, parse_dp_id
from npu_plugin.ascend.shares import ShareAllocation, Unit, parse_share_id, preferred_units, share_id
from npu_plugin.ascend.topology import preferred_allocation
from npu_plugin.cdi.spec import static_cdi_id
from npu_plugin.deviceplugin.listing import DeviceListing, Listing
from npu_plugin.errors import AllocationError, quoted
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.sharing import Sharing
from npu_plugin.inventory.state import DeviceView, Snapshot
from npu_plugin.podannotations.mindcluster import PodRef

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
# Distinct device sets a node hands out in practice: whole cards, halves, single dies, one per
# workload shape.
RESPONSE_CACHE_SIZE = 256
NO_SHARING = Sharing()


def list_response(
    snapshot: Snapshot, split: Collection[int] = (), sharing: Sharing = NO_SHARING
) -> pb.ListAndWatchResponse:
    """Devices the device plugin owns; DRA-owned devices are left out so no device is offered twice,
    and so are chips split into vNPUs (`split`), which are offered through their vNPUs only. A shared
    chip is listed as its shares, each with the chip's health."""
    return pb.ListAndWatchResponse(
        devices=[
            list_entry(device_id, v)
            for v in snapshot.owned_by(Owner.DEVICE_PLUGIN)
            if v.physical_id not in split
            for device_id in listed_ids(v.device, sharing)
        ]
    )


def listed_ids(device: Device, sharing: Sharing) -> list[str]:
    """The ids a chip is listed as: its own, or one per share."""
    if not (count := sharing.shares(device.physical_id)):
        return [device.dp_id]
    prefix = id_prefix(device.device_type)
    return [share_id(prefix, device.physical_id, index) for index in range(count)]


def parse_unit(device_id: str, prefix: str, sharing: Sharing) -> Unit | None:
    """A listed id → (physical id, share index or None for a whole chip); None for an id that this
    resource never lists (another family, a share of a chip that is not shared or beyond the
    count)."""
    if (share := parse_share_id(device_id)) is not None:
        ok = share.prefix == prefix and share.index < sharing.shares(share.physical_id)
        return (share.physical_id, share.index) if ok else None
    parsed = parse_dp_id(device_id)
    return (parsed[1], None) if parsed and parsed[0] == prefix else None


def list_entry(device_id: str, view: DeviceView) -> pb.Device:
    numa = view.device.numa_node
    topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=numa)]) if numa is not None else None
    # A device draining to DRA stays listed, Unhealthy, so the kubelet keeps it for its current pod
    # only.
    healthy = view.healthy and not view.draining
    return pb.Device(ID=device_id, health=HEALTHY if healthy else UNHEALTHY, topology=topology)


def allocatable_ids(
    snapshot: Snapshot,
    device_ids: Sequence[str],
    prefix: str,
    split: Collection[int] = (),
    sharing: Sharing = NO_SHARING,
) -> list[int]:
    """Physical ids for a request, each chip once however many of its shares are named;
    AllocationError names the first id we must not hand out."""
    ids: list[int] = []
    for device_id in device_ids:
        unit = parse_unit(device_id, prefix, sharing)
        view = snapshot.get(unit[0]) if unit is not None else None
        if view is None or unit is None:
            raise AllocationError(f"unknown device id {quoted(device_id)}")
        if view.physical_id in split:
            raise AllocationError(f"device {device_id} is split into vNPUs: request one of its vNPU resources")
        if unit[1] is None and sharing.shared(view.physical_id):
            first, last = listed_ids(view.device, sharing)[:: sharing.count - 1]
            raise AllocationError(f"device {device_id} is shared: it is listed as its shares, {first} to {last}")
        check_allocatable(device_id, view)
        if view.physical_id not in ids:
            ids.append(view.physical_id)
    return ids


def check_allocatable(device_id: str, view: DeviceView) -> None:
    """AllocationError when the chip behind `device_id` must not be handed out now."""
    if view.owner is not Owner.DEVICE_PLUGIN:
        raise AllocationError(f"device {device_id} is owned by {view.owner.value}, not the device plugin")
    if view.draining:
        raise AllocationError(f"device {device_id} is being handed over to DRA (--dra-devices)")
    if not view.healthy:
        raise AllocationError(f"device {device_id} is unhealthy")


def container_response(edits: ContainerEdits, cdi_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(edits.env),
        devices=[
            pb.DeviceSpec(container_path=n.container_path, host_path=n.host_path, permissions=n.permissions)
            for n in edits.device_nodes
        ],
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in edits.mounts
        ],
        cdi_devices=[pb.CDIDevice(name=name) for name in cdi_ids],
    )


@dataclass(frozen=True, slots=True)
class Grant:
    """What one container request gets: the ids its response is built from (physical or vNPU ids)
    and the physical chips behind them (for the log); `pod` when the pod is known (--volcano)."""

    ids: tuple[int, ...]
    physical_ids: tuple[int, ...]
    pod: PodRef | None = None


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """Stateless over the inventory: every answer is computed from the current snapshot."""

    def __init__(
        self,
        listing: DeviceListing,
        layout: HostLayout,
        device_type: str,
        cdi_driver: str | None,
        *,
        on_allocate: Callable[[float, int], None] = lambda _seconds, _count: None,
        on_granted: Callable[[Grant, Sequence[str]], None] = lambda _grant, _ids: None,
        sharing: Sharing = NO_SHARING,
        share_allocation: ShareAllocation = ShareAllocation.SPREAD,
    ) -> None:
        """`on_granted` hears each container request served, with the kubelet's ids, after the
        answer is built (the pod annotations start from there)."""
        self._listing, self._layout = listing, layout
        self._sharing, self._share_allocation = sharing, share_allocation
        self._on_granted = on_granted
        self._prefix = id_prefix(device_type)
        self._cdi_driver = cdi_driver
        self._on_allocate = on_allocate
        self._response = functools.lru_cache(maxsize=RESPONSE_CACHE_SIZE)(self._build_response)
        self._closing = asyncio.Event()

    def close_streams(self) -> None:
        """End every ListAndWatch stream (kubelet restart, shutdown)."""
        self._closing.set()

    async def GetDevicePluginOptions(self, request: pb.Empty, context: Context) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    async def ListAndWatch(self, request: pb.Empty, context: Context) -> AsyncIterator[pb.ListAndWatchResponse]:
        sent = None
        async with contextlib.aclosing(until_closed(self._listing.watch(), self._closing)) as changes:
            async for listing in changes:
                response = self._list(listing)
                # A new backend level that leaves every verdict unchanged is not news to the
                # kubelet.
                if response != sent:
                    sent = response
                    yield response

    def _list(self, listing: Listing) -> pb.ListAndWatchResponse:
        return list_response(listing.snapshot, listing.vnpus.keys(), self._sharing)

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Context
    ) -> pb.PreferredAllocationResponse:
        snapshot = self._listing.current().snapshot
        responses = []
        for container in request.container_requests:
            try:
                available = self._units(snapshot, container.available_deviceIDs)
                required = self._units(snapshot, container.must_include_deviceIDs)
                chosen = self._prefer(snapshot, available, required, container.allocation_size)
            except (AllocationError, ValueError) as error:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPreferredAllocation: {error}")
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def _prefer(self, snapshot: Snapshot, available: list[Unit], required: list[Unit], size: int) -> list[str]:
        """Whole chips by topology; once shares are offered, by --share-allocation."""
        if any(index is not None for _chip, index in available + required):
            units = preferred_units(available, required, size, self._share_allocation)
        else:
            devices = [v.device for v in snapshot.devices]
            chosen = preferred_allocation(devices, [u[0] for u in available], [u[0] for u in required], size)
            units = [(physical_id, None) for physical_id in chosen]
        prefix = self._prefix
        return [
            share_id(prefix, chip, index) if index is not None else snapshot.get(chip).device.dp_id  # type: ignore[union-attr]
            for chip, index in units
        ]

    def _units(self, snapshot: Snapshot, device_ids: Sequence[str]) -> list[Unit]:
        units = []
        for device_id in device_ids:
            unit = parse_unit(device_id, self._prefix, self._sharing)
            if unit is None or snapshot.get(unit[0]) is None:
                raise AllocationError(f"unknown device id {quoted(device_id)}")
            units.append(unit)
        return units

    async def Allocate(self, request: pb.AllocateRequest, context: Context) -> pb.AllocateResponse:
        started = time.perf_counter()
        listing = self._listing.current()
        if not request.container_requests:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Allocate: the request holds no container requests")
        granted: list[Grant] = []
        for container in request.container_requests:
            try:
                if not container.devices_ids:
                    raise AllocationError("a container request names no devices")
                granted.append(await self._choose(listing, container.devices_ids))
            except AllocationError as error:
                log.warning("Allocate refused: %s", error, extra={"error": str(error)})
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: {error}")
        response = self._response(tuple(grant.ids for grant in granted))
        if log.isEnabledFor(logging.INFO):
            for container, grant in zip(request.container_requests, granted, strict=True):
                log.info(
                    "allocated devices %s",
                    ",".join(container.devices_ids),
                    extra={"device": device_key(grant.physical_ids)},
                )
        self._on_allocate(time.perf_counter() - started, len(granted))
        for container, grant in zip(request.container_requests, granted, strict=True):
            self._on_granted(grant, container.devices_ids)
        return response

    async def _choose(self, listing: Listing, device_ids: Sequence[str]) -> Grant:
        """The devices one container request gets (AllocationError: none)."""
        return self._grant(listing, device_ids)

    def _grant(self, listing: Listing, device_ids: Sequence[str]) -> Grant:
        ids = tuple(
            sorted(allocatable_ids(listing.snapshot, device_ids, self._prefix, listing.vnpus.keys(), self._sharing))
        )
        return Grant(ids, ids)

    def _build_response(self, granted: tuple[tuple[int, ...], ...]) -> pb.AllocateResponse:
        """What the kubelet gets for these devices: it depends on nothing but them and the host
        layout, so the service memoizes it (`_response`); health and ownership are checked on every
        call first."""
        responses = []
        for ids in granted:
            cdi = [static_cdi_id(self._cdi_driver, i) for i in sorted(ids)] if self._cdi_driver else []
            responses.append(container_response(container_edits(self._layout, ids), cdi))
        return pb.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Context
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
