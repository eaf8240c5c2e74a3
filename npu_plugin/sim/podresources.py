"""A kubelet PodResources endpoint (v1.PodResourcesLister) whose pods tests and `simulate` set."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from npu_plugin._proto import podresources_v1_pb2 as pb
from npu_plugin._proto import podresources_v1_pb2_grpc as pb_grpc
from npu_plugin.host.sockets import start_unix_server, stop_unix_server


@dataclass(slots=True)
class _Pod:
    devices: dict[str, tuple[str | None, list[str]]] = field(default_factory=dict)  # container -> (resource, ids)
    claims: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)  # container -> (driver, pool, device)


class PodResourcesSimulator(pb_grpc.PodResourcesListerServicer):
    """Answers List with the pods registered through `hold_devices` / `hold_claim` until
    `release`."""

    def __init__(self, socket: Path, resource_name: str) -> None:
        self.socket, self.resource_name = socket, resource_name
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self._server = await start_unix_server(
            self.socket, lambda s: pb_grpc.add_PodResourcesListerServicer_to_server(self, s)
        )

    async def stop(self) -> None:
        if self._server is not None:
            await stop_unix_server(self._server, self.socket, grace=0.2)
            self._server = None

    def hold_devices(
        self, namespace: str, pod: str, container: str, device_ids: list[str], resource: str | None = None
    ) -> None:
        """A container holding device-plugin devices of `resource` (the simulator's resource name by
        default)."""
        self._pods.setdefault((namespace, pod), _Pod()).devices[container] = (resource, list(device_ids))

    def hold_claim(self, namespace: str, pod: str, container: str, *, driver: str, pool: str, device: str) -> None:
        self._pods.setdefault((namespace, pod), _Pod()).claims.setdefault(container, []).append((driver, pool, device))

    def release(self, namespace: str, pod: str) -> None:
        self._pods.pop((namespace, pod), None)

    def _response(self) -> pb.ListPodResourcesResponse:
        response = pb.ListPodResourcesResponse()
        for (namespace, name), pod in sorted(self._pods.items()):
            resources = response.pod_resources.add(name=name, namespace=namespace)
            for container in sorted(pod.devices.keys() | pod.claims.keys()):
                entry = resources.containers.add(name=container)
                if container in pod.devices:
                    resource, ids = pod.devices[container]
                    # As the kubelet lists them: one entry per device (its devices are per NUMA node).
                    for device_id in ids:
                        entry.devices.add(resource_name=resource or self.resource_name, device_ids=[device_id])
                for driver, pool, device in pod.claims.get(container, []):
                    dynamic = entry.dynamic_resources.add(claim_name=f"{name}-{container}", claim_namespace=namespace)
                    dynamic.claim_resources.add(driver_name=driver, pool_name=pool, device_name=device)
        return response

    async def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListPodResourcesResponse:
        return self._response()

    async def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AllocatableResourcesResponse:
        return pb.AllocatableResourcesResponse()

    async def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetPodResourcesResponse:
        for resources in self._response().pod_resources:
            if (resources.namespace, resources.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=resources)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")
