"""Client of the kubelet PodResources API: which NPUs running containers hold, per API, and which
container holds given device-plugin ids."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import grpc

from npu_plugin._proto import podresources_v1_pb2 as pb
from npu_plugin._proto import podresources_v1_pb2_grpc as pb_grpc
from npu_plugin.ascend.device import parse_dp_id, parse_dra_name
from npu_plugin.ascend.shares import parse_share_id
from npu_plugin.ascend.vnpu import parse_dp_vnpu_id, parse_vnpu_name

log = logging.getLogger(__name__)
TIMEOUT = 5.0


def dp_chip(device_id: str) -> int | None:
    """The chip a device plugin id names: a whole chip's or a share's."""
    if (share := parse_share_id(device_id)) is not None:
        return share.physical_id
    parsed = parse_dp_id(device_id)
    return parsed[1] if parsed is not None else None


def held_devices(response: pb.ListPodResourcesResponse, resource_name: str, driver: str) -> tuple[set[int], set[int]]:
    """(device-plugin-held, DRA-held) physical ids in a List answer (pure). A vNPU counts as its
    chip: the chip is the unit of ownership, so a vNPU resource (`huawei.com/Ascend910-5c.1cpu.16g`,
    id `...-164-4`) or a vNPU device of a claim (`npu-4-vnpu-164`, `npu-4-vir05-1c-16g-0`) holds
    chip 4, and so does a share of it (`Ascend310P-4-share-2`)."""
    device_plugin: set[int] = set()
    dra: set[int] = set()
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name == resource_name:
                    device_plugin |= {c for i in devices.device_ids if (c := dp_chip(i)) is not None}
                elif devices.resource_name.startswith(f"{resource_name}-"):
                    device_plugin |= {
                        v.physical_id for i in devices.device_ids if (v := parse_dp_vnpu_id(i)) is not None
                    }
            for dynamic in container.dynamic_resources:
                for claimed in dynamic.claim_resources:
                    if claimed.driver_name == driver and (physical_id := dra_chip(claimed.device_name)) is not None:
                        dra.add(physical_id)
    return device_plugin, dra


def dra_chip(name: str) -> int | None:
    """The chip of a DRA device name in any of its forms: `npu-4`, `npu-4-vnpu-164`,
    `npu-4-vir05-1c-16g-0`."""
    if (physical_id := parse_dra_name(name)) is not None:
        return physical_id
    vnpu = parse_vnpu_name(name)
    return vnpu.physical_id if vnpu is not None else None


async def list_held(socket: Path, resource_name: str, driver: str) -> tuple[set[int], set[int]] | None:
    """What containers hold now, or None when the kubelet cannot be asked (missing socket,
    error)."""
    response = await list_pod_resources(socket)
    return None if response is None else held_devices(response, resource_name, driver)


@dataclass(frozen=True, slots=True)
class Holder:
    namespace: str
    pod: str
    container: str


def holders_of(response: pb.ListPodResourcesResponse, resource_name: str, device_ids: Collection[str]) -> list[Holder]:
    """The containers holding exactly these device-plugin ids of `resource_name` (pure): after an
    Allocate, the one container the kubelet gave them to. The kubelet lists a container's devices of
    one resource as one entry per device (per NUMA node), so the entries are joined first."""
    wanted = set(device_ids)
    return [
        Holder(pod.namespace, pod.name, container.name)
        for pod in response.pod_resources
        for container in pod.containers
        if {i for d in container.devices if d.resource_name == resource_name for i in d.device_ids} == wanted
    ]


async def list_pod_resources(socket: Path) -> pb.ListPodResourcesResponse | None:
    """The kubelet's List answer, or None when it cannot be asked (missing socket, error; logged)."""
    try:
        if not socket.exists():
            return None
    except OSError as error:  # a parent directory we may not search
        log.warning("cannot reach the PodResources socket %s: %s", socket, error, extra={"error": str(error)})
        return None
    try:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            response: pb.ListPodResourcesResponse = await pb_grpc.PodResourcesListerStub(channel).List(
                pb.ListPodResourcesRequest(), timeout=TIMEOUT
            )
    except grpc.aio.AioRpcError as error:
        log.warning(
            "PodResources List on %s failed: %s %s",
            socket,
            error.code().name,
            error.details(),
            extra={"error": f"{error.code().name}: {error.details()}"},
        )
        return None
    return response
