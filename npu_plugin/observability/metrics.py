"""The product's Prometheus series on a private registry; every label set is pre-initialised to
0."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from npu_plugin.ascend.device import without_ip
from npu_plugin.ascend.vnpu import Vnpu, VnpuOrigin
from npu_plugin.errors import listen_error
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Reason, Snapshot

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger(__name__)
METRICS_PATH = "/metrics"
# Allocate runs in ~100 µs, Prepare in milliseconds; a slow API can push Prepare to its 10 s request
# timeout.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
HEALTH_LABELS = ("healthy", "unhealthy")
APIS = ("device-plugin", "dra")
PUBLISH_RESULTS = ("success", "error")
# refused: the API server denied the permission (RBAC, or from 1.36 resourceclaims/driver).
CLAIM_STATUS_RESULTS = ("success", "refused", "error")
# podannotations/writer.py `Result`: what became of each pod annotation job.
POD_ANNOTATION_RESULTS = ("success", "partial", "no-pod", "ambiguous", "conflict", "refused", "error")
# deviceplugin/volcano.py `Result`: how each --volcano container request was matched to a pod.
VOLCANO_RESULTS = ("success", "tie", "no-pod", "refused", "error")
VnpuOp = Literal["create", "destroy"]
# refused: the driver answered with a refusal code (no resources, id in use, wrong mode); error:
# anything else.
VnpuResult = Literal["success", "error", "refused"]
# A vNPU create takes the driver tens to hundreds of milliseconds; a busy chip can take seconds.
CREATE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.devices = Gauge("npu_plugin_devices", "NPUs by health and serving API", ["health", "owner"], registry=r)
        self.allocations = Counter(
            "npu_plugin_allocations", "Device Plugin Allocate container requests served", registry=r
        )
        self.allocate_seconds = Histogram(
            "npu_plugin_allocate_seconds", "Allocate latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.prepare_seconds = Histogram(
            "npu_plugin_prepare_seconds", "NodePrepareResources latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.prepared_claims = Gauge("npu_plugin_prepared_claims", "ResourceClaims prepared on this node", registry=r)
        self.slice_publish = Counter(
            "npu_plugin_slice_publish", "ResourceSlice publish attempts", ["result"], registry=r
        )
        self.claim_status_writes = Counter(
            "npu_plugin_claim_status_writes",
            "--claim-status writes (apply at Prepare, removal at Unprepare) by result",
            ["result"],
            registry=r,
        )
        self.pod_annotations = Counter(
            "npu_plugin_pod_annotations",
            "MindCluster pod annotation writes (--pod-annotations) by result",
            ["result"],
            registry=r,
        )
        self.volcano_allocations = Counter(
            "npu_plugin_volcano_allocations",
            "--volcano container requests by how Volcano's pod was found",
            ["result"],
            registry=r,
        )
        self.registrations = Counter(
            "npu_plugin_registrations", "Successful registrations with the kubelet", ["api"], registry=r
        )
        # Only the APIs this daemon serves get a series (see `serving`): a missing one is no alert.
        self.registered = Gauge(
            "npu_plugin_registered", "1 while the API is registered with the kubelet, else 0", ["api"], registry=r
        )
        self.handovers = Counter(
            "npu_plugin_device_handovers", "Devices moved between APIs after release", ["to"], registry=r
        )
        self.handovers_pending = Gauge(
            "npu_plugin_device_handovers_pending",
            "Devices held on their old API until released, then moved to `to`",
            ["to"],
            registry=r,
        )
        self.vnpus = Gauge(
            "npu_plugin_vnpus",
            "vNPUs on this node by chip, template and who made them",
            ["physical_id", "template", "origin"],
            registry=r,
        )
        self.vnpu_operations = Counter(
            "npu_plugin_vnpu_operations", "vNPU create and destroy calls by result", ["op", "result"], registry=r
        )
        self.vnpu_dynamic_available = Gauge(
            "npu_plugin_vnpu_dynamic_available",
            "1 while vNPUs are offered on demand (--vnpu dynamic and the partitionable-devices gate on), else 0",
            registry=r,
        )
        self.extended_resource_conflicts = Gauge(
            "npu_plugin_extended_resource_conflicts",
            "1 per DeviceClass mapping (extendedResourceName) a name this node's device plugin advertises",
            ["device_class", "resource"],
            registry=r,
        )
        self.foreign_slices = Gauge(
            "npu_plugin_foreign_slices",
            "ResourceSlices of this daemon's driver on its node that another publisher wrote; while above 0 "
            "nothing is published",
            registry=r,
        )
        self.unhealthy_devices = Gauge(
            "npu_plugin_unhealthy_devices",
            "Unhealthy NPUs by reason: health (the backend's level), link-down (RoCE link down past "
            "--link-down-timeout), gone (device node vanished or no longer discovered)",
            ["reason"],
            registry=r,
        )
        self.split_ignored = Gauge(
            "npu_plugin_dra_devices_ignored",
            "Items of the both-mode DRA split (--dra-devices or the Node's) naming ids or groups this node lacks",
            registry=r,
        )
        self.devices_without_ip = Gauge(
            "npu_plugin_devices_without_ip",
            "NPUs with a RoCE port but no device IP (no deviceIP attribute, no device_ip for rank tables)",
            registry=r,
        )
        self.vnpu_create_seconds = Histogram(
            "npu_plugin_vnpu_create_seconds", "Latency of successful vNPU creates", buckets=CREATE_BUCKETS, registry=r
        )
        for health in HEALTH_LABELS:
            for owner in Owner:
                self.devices.labels(health, owner.value)
        for reason in Reason:
            self.unhealthy_devices.labels(reason.value)
        for op in get_args(VnpuOp):
            for result in get_args(VnpuResult):
                self.vnpu_operations.labels(op, result)
        for result in PUBLISH_RESULTS:
            self.slice_publish.labels(result)
        for result in CLAIM_STATUS_RESULTS:
            self.claim_status_writes.labels(result)
        for result in POD_ANNOTATION_RESULTS:
            self.pod_annotations.labels(result)
        for result in VOLCANO_RESULTS:
            self.volcano_allocations.labels(result)
        for api in APIS:
            self.registrations.labels(api)
        for owner in Owner:
            self.handovers.labels(owner.value)
            self.handovers_pending.labels(owner.value)

    def serving(self, apis: list[str]) -> None:
        """The APIs this daemon serves, unregistered until the kubelet accepts them."""
        for api in apis:
            self.registered.labels(api).set(0)

    def record_registered(self, api: str, registered: bool) -> None:
        self.registered.labels(api).set(1 if registered else 0)
        if registered:
            self.registrations.labels(api).inc()

    def record_devices(self, snapshot: Snapshot) -> None:
        for health in HEALTH_LABELS:
            for owner in Owner:
                count = sum(v.owner is owner and v.healthy == (health == "healthy") for v in snapshot.devices)
                self.devices.labels(health, owner.value).set(count)
        for reason in Reason:
            self.unhealthy_devices.labels(reason.value).set(sum(v.reason is reason for v in snapshot.devices))
        self.devices_without_ip.set(len(without_ip(v.device for v in snapshot.devices)))
        for to in Owner:  # a draining device moves to the other of the two sides
            self.handovers_pending.labels(to.value).set(sum(v.draining and v.owner is not to for v in snapshot.devices))

    def record_vnpus(self, vnpus: Iterable[tuple[Vnpu, VnpuOrigin]]) -> None:
        """The vNPUs as they are now: a series per (chip, template, origin); vanished ones leave the
        output."""
        counts: dict[tuple[str, str, str], int] = {}
        for vnpu, origin in vnpus:
            key = (str(vnpu.physical_id), vnpu.template, origin.value)
            counts[key] = counts.get(key, 0) + 1
        self.vnpus.clear()
        for labels, count in counts.items():
            self.vnpus.labels(*labels).set(count)

    def record_conflicts(self, pairs: Iterable[tuple[str, str]]) -> None:
        """The (class, resource) conflicts now; resolved ones leave the output."""
        self.extended_resource_conflicts.clear()
        for device_class, resource in pairs:
            self.extended_resource_conflicts.labels(device_class, resource).set(1)

    def record_vnpu_operation(self, op: VnpuOp, result: VnpuResult, seconds: float | None) -> None:
        self.vnpu_operations.labels(op, result).inc()
        if op == "create" and result == "success" and seconds is not None:
            self.vnpu_create_seconds.observe(seconds)

    def record_allocate(self, seconds: float, containers: int) -> None:
        self.allocate_seconds.observe(seconds)
        self.allocations.inc(containers)

    def record_dra_call(self, kind: str, seconds: float) -> None:
        if kind == "prepare":
            self.prepare_seconds.observe(seconds)

    def count_prepared(self, count: Callable[[], int]) -> None:
        """Read at scrape time, so claims restored from the checkpoint count before the first
        Prepare."""
        self.prepared_claims.set_function(count)

    def count_shares(self, in_use: Callable[[], Mapping[int, int]], shares: Callable[[], Mapping[int, int]]) -> None:
        """`npu_plugin_shares_in_use` and `npu_plugin_shares` per shared chip, read at scrape
        time."""
        self.registry.register(_SharesCollector(in_use, shares))

    def serve(self, port: int, address: str) -> WSGIServer:
        """Serve the registry at /metrics (every other path is 404) from a thread; NpuPluginError
        naming --metrics-port when the port cannot be opened."""
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
        app = only_metrics(make_wsgi_app(self.registry))
        try:
            server: WSGIServer = make_server(address, port, app, server_class, handler_class=_QuietHandler)
        except OSError as error:
            raise listen_error("--metrics-port", address, port, error) from None
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        host = f"[{address}]" if ":" in address else address
        log.info("metrics listening on http://%s:%d%s", host, server.server_port, METRICS_PATH)
        return server


class _SharesCollector:
    """Shares per shared chip: in use (held by prepared claims) and in all (--share-count)."""

    def __init__(self, in_use: Callable[[], Mapping[int, int]], shares: Callable[[], Mapping[int, int]]) -> None:
        self._in_use, self._shares = in_use, shares

    def collect(self) -> Iterator[GaugeMetricFamily]:
        total = self._shares()
        used = self._in_use()
        in_use = GaugeMetricFamily(
            "npu_plugin_shares_in_use", "Shares of each shared NPU that prepared claims hold", labels=["physical_id"]
        )
        every = GaugeMetricFamily("npu_plugin_shares", "Shares each shared NPU offers", labels=["physical_id"])
        for physical_id, count in sorted(total.items()):
            every.add_metric([str(physical_id)], count)
            in_use.add_metric([str(physical_id)], used.get(physical_id, 0))
        yield in_use
        yield every


def only_metrics(app: WSGIApplication) -> WSGIApplication:
    """`app` at /metrics; every other path answers 404, so a probe or scanner pointed at the port by
    mistake (/healthz, /) is told so instead of reading metrics."""

    def route(environ: WSGIEnvironment, start_response: StartResponse) -> Any:
        if environ.get("PATH_INFO") == METRICS_PATH:
            return app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not found: metrics are served at {METRICS_PATH}\n".encode()]

    return route


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr (it would bypass the log format)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
