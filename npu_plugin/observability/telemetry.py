"""The one seam between the servers and observability: metrics and the gRPC health verdict.

prometheus-client and grpc-health-checking load only when their port is enabled, which keeps an
idle device-plugin daemon small.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from npu_plugin.ascend.vnpu import Vnpu, VnpuOrigin
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Snapshot

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from npu_plugin.observability.healthcheck import HealthService
    from npu_plugin.observability.metrics import Metrics, VnpuOp, VnpuResult

log = logging.getLogger(__name__)


class Telemetry:
    """Callbacks the servers invoke; each one is a no-op for what is switched off."""

    def __init__(self, metrics_port: int, healthcheck_port: int, bind_address: str) -> None:
        self._metrics_port, self._health_port, self._address = metrics_port, healthcheck_port, bind_address
        self.metrics: Metrics | None = None
        self.health: HealthService | None = None
        self._metrics_server: WSGIServer | None = None
        if metrics_port >= 0:
            from npu_plugin.observability.metrics import Metrics

            self.metrics = Metrics()

    async def start(self, apis: list[str], last_sample: Callable[[], float], interval: float) -> None:
        if self.metrics is not None:
            self.metrics.serving(apis)
            self._metrics_server = self.metrics.serve(self._metrics_port, self._address)
        if self._health_port >= 0:
            from npu_plugin.observability.healthcheck import HealthService

            self.health = HealthService(apis, last_sample, interval)
            try:
                await self.health.start(self._address, self._health_port)
            except BaseException:
                self.close()
                raise

    async def run(self, stop: asyncio.Event) -> None:
        if self.health is not None:
            await self.health.run(stop)

    def close(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    def devices(self, snapshot: Snapshot) -> None:
        if self.metrics is not None:
            self.metrics.record_devices(snapshot)

    def split_ignored(self, items: int) -> None:
        """How many items of the both-mode split name nothing on this node."""
        if self.metrics is not None:
            self.metrics.split_ignored.set(items)

    def allocated(self, seconds: float, containers: int) -> None:
        if self.metrics is not None:
            self.metrics.record_allocate(seconds, containers)

    def dra_call(self, kind: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.record_dra_call(kind, seconds)

    def count_prepared(self, count: Callable[[], int]) -> None:
        if self.metrics is not None:
            self.metrics.count_prepared(count)

    def count_shares(self, in_use: Callable[[], Mapping[int, int]], shares: Callable[[], Mapping[int, int]]) -> None:
        """Shares held and offered per shared chip, read at scrape time."""
        if self.metrics is not None:
            self.metrics.count_shares(in_use, shares)

    def published(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.slice_publish.labels(result).inc()

    def claim_status(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.claim_status_writes.labels(result).inc()

    def pod_annotations(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.pod_annotations.labels(result).inc()

    def volcano(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.volcano_allocations.labels(result).inc()

    def registered(self, api: str, registered: bool) -> None:
        if self.health is not None:
            self.health.set_registered(api, registered)
        if self.metrics is not None:
            self.metrics.record_registered(api, registered)

    def handed_over(self, to: Owner) -> None:
        if self.metrics is not None:
            self.metrics.handovers.labels(to.value).inc()

    def vnpus(self, vnpus: Iterable[tuple[Vnpu, VnpuOrigin]]) -> None:
        """Every vNPU on the node now, with who made it (call on change)."""
        if self.metrics is not None:
            self.metrics.record_vnpus(vnpus)

    def vnpu_operation(self, op: VnpuOp, result: VnpuResult, seconds: float | None = None) -> None:
        """One create or destroy call; `seconds` of a successful create feeds its latency
        histogram."""
        if self.metrics is not None:
            self.metrics.record_vnpu_operation(op, result, seconds)

    def vnpu_dynamic_available(self, available: bool) -> None:
        """Whether vNPUs are offered on demand now (mode and gate probe)."""
        if self.metrics is not None:
            self.metrics.vnpu_dynamic_available.set(1 if available else 0)

    def foreign_slices(self, names: tuple[str, ...]) -> None:
        """Another publisher's slices of our driver on our node (none: publishing again)."""
        if self.metrics is not None:
            self.metrics.foreign_slices.set(len(names))
        if self.health is not None:
            reason = f"another publisher's ResourceSlices on this node: {', '.join(names)}" if names else None
            self.health.set_problem("foreign-slices", reason)

    def extended_resource_conflicts(self, pairs: Iterable[tuple[str, str]]) -> None:
        """The DeviceClasses (class, resource) mapping a name this node's device plugin advertises."""
        if self.metrics is not None:
            self.metrics.record_conflicts(pairs)
