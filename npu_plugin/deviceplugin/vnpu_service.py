"""The v1beta1.DevicePlugin service of one vNPU resource (`huawei.com/Ascend910-5c.1cpu.16g`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import grpc

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.container_edits import HostLayout, container_edits
from npu_plugin.cdi.spec import static_vnpu_cdi_id
from npu_plugin.deviceplugin.listing import DeviceListing, Listing
from npu_plugin.deviceplugin.service import (
    Context,
    DevicePluginService,
    Grant,
    check_allocatable,
    container_response,
    list_entry,
)
from npu_plugin.errors import AllocationError, quoted

log = logging.getLogger(__name__)
# Ascend's runtime mounts one vNPU per container (Ascend's device plugin: MaxRequestVirtualDeviceNum
# = 1).
ONE_VNPU = "Ascend supports one vNPU per container"


def vnpu_list_response(listing: Listing, resource_name: str) -> pb.ListAndWatchResponse:
    """The resource's vNPUs on the device plugin's chips, each with its parent chip's health."""
    return pb.ListAndWatchResponse(
        devices=[list_entry(d.device_id, view) for d, view in listing.offered(resource_name)]
    )


def allocatable_vnpu(listing: Listing, resource_name: str, device_ids: Sequence[str]) -> Grant:
    """The vNPU one container request gets; AllocationError when it names more than one or one we
    must not hand out."""
    if len(device_ids) != 1:
        raise AllocationError(f"{ONE_VNPU}; the request names {len(device_ids)} ({', '.join(device_ids)})")
    device_id = device_ids[0]
    device = listing.virtual_device(device_id)
    view = listing.snapshot.get(device.vnpu.physical_id) if device is not None else None
    if device is None or view is None or device.resource_name != resource_name:
        raise AllocationError(f"unknown device id {quoted(device_id)} for {resource_name}")
    check_allocatable(device_id, view)
    return Grant((device.vnpu.vnpu_id,), (view.physical_id,))


class VnpuDevicePluginService(DevicePluginService):
    """Lists and allocates the vNPUs of one resource; the options, streams and PreStart are the
    whole-NPU service's."""

    def __init__(
        self,
        listing: DeviceListing,
        layout: HostLayout,
        device_type: str,
        cdi_driver: str | None,
        *,
        resource_name: str,
        on_allocate: Callable[[float, int], None] = lambda _seconds, _count: None,
    ) -> None:
        super().__init__(listing, layout, device_type, cdi_driver, on_allocate=on_allocate)
        self._resource_name = resource_name

    def _list(self, listing: Listing) -> pb.ListAndWatchResponse:
        return vnpu_list_response(listing, self._resource_name)

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Context
    ) -> pb.PreferredAllocationResponse:
        """vNPUs have no topology to prefer: the first `size` available ones, required ones
        first."""
        responses = []
        for container in request.container_requests:
            required = list(container.must_include_deviceIDs)
            rest = [i for i in container.available_deviceIDs if i not in required]
            if container.allocation_size < len(required):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"GetPreferredAllocation: {len(required)} required devices exceed the size "
                    f"{container.allocation_size}",
                )
            chosen = [*required, *rest][: container.allocation_size]
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def _grant(self, listing: Listing, device_ids: Sequence[str]) -> Grant:
        return allocatable_vnpu(listing, self._resource_name, device_ids)

    def _build_response(self, granted: tuple[tuple[int, ...], ...]) -> pb.AllocateResponse:
        responses = []
        for vnpu_ids in granted:
            cdi = [static_vnpu_cdi_id(self._cdi_driver, i) for i in vnpu_ids] if self._cdi_driver else []
            responses.append(container_response(container_edits(self._layout, vnpu_ids, virtual=True), cdi))
        return pb.AllocateResponse(container_responses=responses)
