"""Observability end to end: /metrics scraped over HTTP and grpc.health.v1 called over gRPC while
the real daemon runs as a subprocess against the kubelet simulators and the fake API server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from npu_plugin import __version__
from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.device import Health, LinkState
from npu_plugin.logs import CONTEXT_KEYS, STARTUP_KEYS
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from npu_plugin.sim.kubelet import KubeletSimulator, remove_sockets
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.integration import test_device_plugin
from tests.integration.test_device_plugin import (
    A2,
    RESOURCE,
    SOCKET,
    Node,
    kubelet_at,
    registered,
    rpc_error,
    run,
    until,
    with_health,
)
from tests.support.daemon import DaemonProcess, Launcher, write_inventory
from tests.support.dra import DRIVER, NODE, Workspace, allocate, dra_args, node_slices, published_names
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
node = test_device_plugin.node  # the device-plugin tests' fixture: one directory layout for both files

OBSERVED = ("--metrics-port", "0", "--healthcheck-port", "0", "--bind-address", "127.0.0.1")
SERVING, NOT_SERVING = "SERVING", "NOT_SERVING"
DP, DRA = "device-plugin", "dra"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# Every product series (and the handover counter), with every label set, readable from the start.
SERIES_AT_START = [
    *[("npu_plugin_devices", {"health": h, "owner": o}) for h in ("healthy", "unhealthy") for o in (DP, DRA)],
    ("npu_plugin_allocations_total", {}),
    ("npu_plugin_allocate_seconds_count", {}),
    ("npu_plugin_allocate_seconds_sum", {}),
    ("npu_plugin_prepare_seconds_count", {}),
    ("npu_plugin_prepare_seconds_sum", {}),
    ("npu_plugin_prepared_claims", {}),
    *[("npu_plugin_slice_publish_total", {"result": r}) for r in ("success", "error")],
    *[("npu_plugin_registrations_total", {"api": a}) for a in (DP, DRA)],
    *[("npu_plugin_device_handovers_total", {"to": t}) for t in (DP, DRA)],
    *[
        ("npu_plugin_vnpu_operations_total", {"op": op, "result": result})
        for op in ("create", "destroy")
        for result in ("success", "error", "refused")
    ],
    ("npu_plugin_vnpu_dynamic_available", {}),
    ("npu_plugin_foreign_slices", {}),
    ("npu_plugin_vnpu_create_seconds_count", {}),
    ("npu_plugin_vnpu_create_seconds_sum", {}),
    *[("npu_plugin_unhealthy_devices", {"reason": r}) for r in ("health", "link-down", "gone")],
    ("npu_plugin_devices_without_ip", {}),
]


# --- the two endpoints ---


@dataclass(frozen=True)
class Endpoints:
    """The ports a daemon started with `--metrics-port 0 --healthcheck-port 0` chose, read from its
    log."""

    metrics: int
    health: int

    @classmethod
    def of(cls, daemon: DaemonProcess) -> Endpoints:
        daemon.wait_for_log("metrics listening on")
        daemon.wait_for_log("gRPC health service listening on")
        metrics = re.search(r"metrics listening on http://127\.0\.0\.1:(\d+)/metrics", daemon.log())
        health = re.search(r"gRPC health service listening on 127\.0\.0\.1:(\d+)", daemon.log())
        assert metrics and health, daemon.log()
        return cls(int(metrics.group(1)), int(health.group(1)))


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def until_samples(port: int, holds: Callable[[Samples], bool], what: str, daemon: DaemonProcess) -> Samples:
    """Scrape (off the event loop) until `holds(samples)`; the last scrape."""
    deadline = asyncio.get_running_loop().time() + 10
    while not holds(samples := await asyncio.to_thread(scrape, port)):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"no {what} within 10s; daemon log:\n{daemon.log()}")
        await asyncio.sleep(0.05)
    return samples


async def until_metric(port: int, name: str, expected: float, daemon: DaemonProcess, **labels: str) -> Samples:
    def reads(samples: Samples) -> bool:
        # A labelled sample appears only once its first value is set: until then, keep waiting.
        return samples.get((name, tuple(sorted(labels.items())))) == expected

    return await until_samples(port, reads, f"{name}{labels} == {expected}", daemon)


async def endpoints_of(daemon: DaemonProcess) -> Endpoints:
    """Endpoints.of without blocking the loop the simulators answer on."""
    return await asyncio.to_thread(Endpoints.of, daemon)


@dataclass
class HealthWatch:
    """One grpc.health.v1 Watch stream; each status is recorded with what `context()` said on
    arrival."""

    channel: grpc.aio.Channel
    context: Callable[[], int]
    seen: list[tuple[str, int]] = field(default_factory=list)

    @property
    def statuses(self) -> list[str]:
        return [status for status, _ in self.seen]

    async def read(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for response in health_pb2_grpc.HealthStub(self.channel).Watch(health_pb2.HealthCheckRequest()):
                self.seen.append((health_pb2.HealthCheckResponse.ServingStatus.Name(response.status), self.context()))

    async def check(self) -> str:
        response = await health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    async def until(self, status: str, daemon: DaemonProcess) -> None:
        await until(lambda: bool(self.seen) and self.seen[-1][0] == status, 10, f"health {status}", daemon)
        assert await self.check() == status


@contextlib.asynccontextmanager
async def watching(port: int, context: Callable[[], int] = lambda: 0) -> AsyncIterator[HealthWatch]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        watch = HealthWatch(channel, context)
        reader = asyncio.create_task(watch.read())
        try:
            await until(lambda: bool(watch.seen), 10, "the first health status")
            yield watch
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


# --- device-plugin mode ---


def test_every_series_reads_zero_until_something_happens(node: Node, launch_daemon: Launcher) -> None:
    daemon = launch_daemon(*node.args(*OBSERVED))
    endpoints = Endpoints.of(daemon)

    async def scenario() -> Samples:
        return await until_metric(endpoints.metrics, "npu_plugin_devices", 8, daemon, health="healthy", owner=DP)

    samples = run(scenario())
    for name, labels in SERIES_AT_START:
        expected = 8 if (name, labels) == ("npu_plugin_devices", {"health": "healthy", "owner": DP}) else 0
        assert value(samples, name, **labels) == expected, (name, labels)


def test_latency_buckets_span_sub_millisecond_to_seconds(node: Node, launch_daemon: Launcher) -> None:
    samples = scrape(Endpoints.of(launch_daemon(*node.args(*OBSERVED))).metrics)
    for histogram in ("npu_plugin_allocate_seconds", "npu_plugin_prepare_seconds"):
        bounds = sorted(float(dict(labels)["le"]) for name, labels in samples if name == f"{histogram}_bucket")
        assert bounds[0] <= 0.0001 and bounds[-2] >= 5.0 and bounds[-1] == float("inf"), bounds
        assert len(bounds) >= 12, "enough buckets between the two ends for quantiles"


def test_health_turns_serving_only_once_the_kubelet_accepted_registration(node: Node, launch_daemon: Launcher) -> None:
    daemon = launch_daemon(*node.args(*OBSERVED, "--log-level", "debug"))  # repeated registration failures
    endpoints = Endpoints.of(daemon)

    async def scenario() -> None:
        kubelet = KubeletSimulator(node.plugin_dir)
        async with watching(endpoints.health, lambda: len(kubelet.registrations)) as watch:
            assert await watch.check() == NOT_SERVING
            await asyncio.to_thread(daemon.wait_for_log, "registration with the kubelet failed (attempt 3)")
            assert watch.statuses == [NOT_SERVING], "no kubelet, no SERVING"
            await kubelet.start()
            try:
                await watch.until(SERVING, daemon)
                assert watch.seen == [(NOT_SERVING, 0), (SERVING, 1)]
                samples = await until_metric(endpoints.metrics, "npu_plugin_registrations_total", 1, daemon, api=DP)
                assert value(samples, "npu_plugin_registrations_total", api=DRA) == 0
            finally:
                await kubelet.stop()

    run(scenario())


def test_kubelet_down_is_not_serving_and_each_registration_counts(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args(*OBSERVED))
            endpoints = await endpoints_of(daemon)
            await registered(kubelet, daemon)
            async with watching(endpoints.health) as watch:
                await watch.until(SERVING, daemon)
                # The kubelet goes down and takes the plugins' sockets with it, as it does on
                # restart.
                await kubelet.stop()
                remove_sockets(node.plugin_dir)
                await watch.until(NOT_SERVING, daemon)
                await kubelet.start()
                await watch.until(SERVING, daemon)
                assert watch.statuses == [SERVING, NOT_SERVING, SERVING]
                await until_metric(endpoints.metrics, "npu_plugin_registrations_total", 2, daemon, api=DP)
                await kubelet.restart()
                await until_metric(endpoints.metrics, "npu_plugin_registrations_total", 3, daemon, api=DP)
                await watch.until(SERVING, daemon)
            assert len(kubelet.registrations) == 3

    run(scenario())


def test_a_stopped_kubelet_is_seen_and_registration_starts_over_when_it_returns(
    node: Node, launch_daemon: Launcher
) -> None:
    """A stopped kubelet deletes kubelet.sock but leaves the plugins' sockets (only a starting one
    removes them): health must turn NOT_SERVING within 3 s and the plugin register again on
    return."""

    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args(*OBSERVED))
            endpoints = await endpoints_of(daemon)
            await registered(kubelet, daemon)
            async with watching(endpoints.health) as watch:
                await watch.until(SERVING, daemon)
                samples = await until_metric(endpoints.metrics, "npu_plugin_registered", 1, daemon, api=DP)
                assert ("npu_plugin_registered", (("api", DRA),)) not in samples, "DRA is not served here"
                await kubelet.stop()
                stopped = asyncio.get_running_loop().time()
                await until(lambda: watch.seen[-1][0] == NOT_SERVING, 3, "NOT_SERVING within 3 s", daemon)
                assert asyncio.get_running_loop().time() - stopped <= 3
                assert await watch.check() == NOT_SERVING
                await asyncio.to_thread(daemon.wait_for_log, "kubelet.sock was deleted: the kubelet stopped")
                # The daemon re-binds its own socket to register again (so its presence at one
                # instant proves nothing); what matters is that kubelet.sock's deletion, not our
                # socket's, was what it saw.
                await until((node.plugin_dir / SOCKET).exists, 5, "our socket served again", daemon)
                assert "our socket" not in daemon.log(), daemon.log()
                await until_metric(endpoints.metrics, "npu_plugin_registered", 0, daemon, api=DP)
                await kubelet.start(clean=False)
                await registered(kubelet, daemon)
                await watch.until(SERVING, daemon)
                assert watch.statuses == [SERVING, NOT_SERVING, SERVING]
                await until_metric(endpoints.metrics, "npu_plugin_registrations_total", 2, daemon, api=DP)
                await until_metric(endpoints.metrics, "npu_plugin_registered", 1, daemon, api=DP)
            assert len(kubelet.registrations) == 2

    run(scenario())


def test_allocations_and_device_faults_are_counted(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> DaemonProcess:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args(*OBSERVED))
            port = (await endpoints_of(daemon)).metrics
            connection = await registered(kubelet, daemon)
            await kubelet.allocate(RESOURCE, ["Ascend910-3", "Ascend910-1"])
            await connection.stub.Allocate(
                pb.AllocateRequest(
                    container_requests=[
                        pb.ContainerAllocateRequest(devices_ids=["Ascend910-0"]),
                        pb.ContainerAllocateRequest(devices_ids=["Ascend910-6", "Ascend910-7"]),
                    ]
                )
            )
            await rpc_error(kubelet.allocate(RESOURCE, ["Ascend910-42"]))
            samples = await until_metric(port, "npu_plugin_allocations_total", 3, daemon)
            assert value(samples, "npu_plugin_allocate_seconds_count") == 2, "one observation per call"
            assert value(samples, "npu_plugin_allocate_seconds_bucket", le="+Inf") == 2
            assert 0 < value(samples, "npu_plugin_allocate_seconds_sum") < 2

            write_inventory(node.inventory, with_health(A2, 3, Health.CRITICAL))
            samples = await until_metric(port, "npu_plugin_devices", 1, daemon, health="unhealthy", owner=DP)
            assert value(samples, "npu_plugin_devices", health="healthy", owner=DP) == 7
            write_inventory(node.inventory, A2)
            await until_metric(port, "npu_plugin_devices", 8, daemon, health="healthy", owner=DP)
            return daemon

    assert_one_text_line_per_event(run(scenario()).log())


def assert_one_text_line_per_event(log: str) -> None:
    """Every line is a whole event: it starts with the timestamp of the text format."""
    strays = [line for line in log.splitlines() if not re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ", line)]
    assert not strays, strays


@pytest.mark.parametrize("enabled", [False, True], ids=["off", "on"])
def test_telemetry_modules_load_only_when_their_port_is_set(node: Node, launch_daemon: Launcher, enabled: bool) -> None:
    async def scenario() -> DaemonProcess:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args(*(OBSERVED if enabled else ())), python_args=["-X", "importtime"])
            await registered(kubelet, daemon)
            await kubelet.allocate(RESOURCE, ["Ascend910-0"])
            assert (await asyncio.to_thread(daemon.signal, signal.SIGTERM, 10))[0] == 0
            return daemon

    imported = {line.rsplit("|", 1)[-1].strip() for line in run(scenario()).log().splitlines() if "|" in line}
    # grpc itself imports the empty top-level grpc_health package; the service lives in
    # grpc_health.v1.
    telemetry = {
        "prometheus_client",
        "grpc_health.v1.health",
        "npu_plugin.observability.metrics",
        "npu_plugin.observability.healthcheck",
    }
    assert "npu_plugin.observability.telemetry" in imported
    assert (telemetry & imported) == (telemetry if enabled else set())


# --- logs ---


def json_events(daemon: DaemonProcess) -> list[dict[str, Any]]:
    """Every line the daemon wrote, each parsed as one JSON event with only the documented keys."""
    allowed = {"ts", "level", "event", "logger", "traceback", *CONTEXT_KEYS, *STARTUP_KEYS}
    events = []
    for line in daemon.log().splitlines():
        event = json.loads(line)
        assert {"ts", "level", "event", "logger"} <= event.keys() <= allowed, event
        assert event["level"] in ("debug", "info", "warning", "error", "critical")
        events.append(event)
    return events


def test_json_log_is_one_event_per_line_with_stable_keys(node: Node, launch_daemon: Launcher) -> None:
    daemon = launch_daemon(*node.args("--log-format", "json"))
    daemon.wait_for_log("registration with the kubelet failed (attempt 1)")

    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            await registered(kubelet, daemon)
            await kubelet.allocate(RESOURCE, ["Ascend910-3", "Ascend910-1"])
            await rpc_error(kubelet.allocate(RESOURCE, ["Ascend910-42"]))
            write_inventory(node.inventory, with_health(A2, 5, Health.CRITICAL))
            await asyncio.to_thread(daemon.wait_for_log, "turned unhealthy")
            # Renamed into place: a reader must see this one bad content, not a half-written file
            # first.
            bad = node.inventory.with_name("bad.yaml")
            bad.write_text("devices:\n  - physicalId: zero\n")
            bad.replace(node.inventory)
            await asyncio.to_thread(daemon.wait_for_log, "rewrite rejected")
            await asyncio.sleep(0.5)  # the poller samples the last good inventory every 0.1 s meanwhile
            assert (await asyncio.to_thread(daemon.signal, signal.SIGTERM, 10))[0] == 0

    run(scenario())
    events = json_events(daemon)
    start = events[0]
    assert start["event"] == f"npu-plugin {__version__} starting: mode=device-plugin backend=fake devices=8"
    assert {k: start[k] for k in STARTUP_KEYS} == {
        "version": __version__,
        "mode": "device-plugin",
        "backend": "fake",
        "device_count": 8,
    }

    def one(text: str) -> dict[str, Any]:
        found = [e for e in events if text in e["event"]]
        assert len(found) == 1, (text, found)
        return found[0]

    assert one("allocated devices")["device"] == "npu-1,npu-3"
    assert "Ascend910-42" in one("Allocate refused")["error"]
    fault = one("turned unhealthy")
    assert (fault["level"], fault["device"]) == ("warning", "npu-5")
    assert "physicalId" in one("rewrite rejected")["error"], "logged once, though sampled many times"
    retries = [e for e in events if e["event"].startswith("registration with the kubelet failed")]
    assert retries and all("kubelet.sock does not exist yet" in e["error"] for e in retries)
    assert events[-1]["event"] == "npu-plugin stopped"


def test_a_fatal_start_error_is_a_json_event_too(node: Node, launch_daemon: Launcher) -> None:
    node.inventory.write_text("devices: 3\n")
    daemon = launch_daemon(*node.args("--log-format", "json"))
    assert daemon.process.wait(30) == 1
    [event] = json_events(daemon)
    assert event["level"] == "error" and str(node.inventory) in event["error"]


def test_a_refused_configuration_still_writes_only_json_lines(node: Node, launch_daemon: Launcher) -> None:
    blocked = node.plugin_dir / "file"
    blocked.touch()
    daemon = launch_daemon(*node.args("--log-format", "json", "--device-plugin-path", str(blocked / "dp")))
    assert daemon.process.wait(30) == 2
    last = json_events(daemon)[-1]
    assert last["level"] == "error" and "exists and is not a directory" in last["error"], last


# --- DRA mode ---


def test_dra_health_registration_publishing_and_prepare(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace, *OBSERVED, "--log-format", "json"))
    endpoints = Endpoints.of(daemon)

    async def scenario() -> None:
        kubelet = DraKubeletSimulator(workspace.reg, node_name=NODE, api_url=fake_api.url)
        async with watching(endpoints.health, lambda: len(kubelet.plugins.get(DRIVER, []))) as watch:
            assert await watch.check() == NOT_SERVING
            async with kubelet:
                await watch.until(SERVING, daemon)
                assert watch.seen == [(NOT_SERVING, 0), (SERVING, 1)]
                port = endpoints.metrics
                samples = await until_metric(port, "npu_plugin_registrations_total", 1, daemon, api=DRA)
                assert value(samples, "npu_plugin_registrations_total", api=DP) == 0
                await until_samples(
                    port,
                    lambda s: value(s, "npu_plugin_slice_publish_total", result="success") >= 1,
                    "a successful slice publish",
                    daemon,
                )
                await prepare_and_unprepare(kubelet, fake_api, port, daemon)
                write_inventory(workspace.inventory, with_health(A2, 2, Health.CRITICAL))
                samples = await until_metric(port, "npu_plugin_devices", 1, daemon, health="unhealthy", owner=DRA)
            assert value(samples, "npu_plugin_slice_publish_total", result="error") == 0

    run(scenario())
    prepared = [e for e in json_events(daemon) if e["event"].startswith("prepared claim")]
    assert [e["claim"] for e in prepared] == ["default/observed"]


async def prepare_and_unprepare(
    kubelet: DraKubeletSimulator, api: FakeKubeAPI, port: int, daemon: DaemonProcess
) -> None:
    claim = await allocate(api, "observed")
    assert (await kubelet.prepare([claim]))[claim.uid].error == ""
    samples = await until_metric(port, "npu_plugin_prepare_seconds_count", 1, daemon)
    assert value(samples, "npu_plugin_prepared_claims") == 1
    assert 0 < value(samples, "npu_plugin_prepare_seconds_sum") < 10
    assert await kubelet.unprepare([claim]) == {claim.uid: ""}
    samples = await until_metric(port, "npu_plugin_prepared_claims", 0, daemon)
    assert value(samples, "npu_plugin_prepare_seconds_count") == 1, "Unprepare is not a Prepare"


def test_a_roce_link_down_past_the_timeout_is_its_own_reason_and_taint(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(36)  # device taints kept
    args = dra_args(workspace, *OBSERVED, "--unhealthy-policy", "taint", "--link-down-timeout", "0.3")
    daemon = launch_daemon(*args)
    port = Endpoints.of(daemon).metrics
    link_down = [replace(d, link=LinkState.DOWN) if d.physical_id == 2 else d for d in A2]

    def health_taints(device: str) -> list[tuple[str, str]]:
        entries = [d for s in node_slices(fake_api) for d in s["spec"].get("devices") or [] if d["name"] == device]
        return [(t.get("value", ""), t["effect"]) for e in entries for t in e.get("taints", [])]

    async def scenario() -> None:
        await until_metric(port, "npu_plugin_slice_publish_total", 1, daemon, result="success")
        write_inventory(workspace.inventory, link_down)
        samples = await until_metric(port, "npu_plugin_unhealthy_devices", 1, daemon, reason="link-down")
        assert value(samples, "npu_plugin_unhealthy_devices", reason="health") == 0
        assert value(samples, "npu_plugin_devices", health="unhealthy", owner=DRA) == 1
        await until_samples(port, lambda _s: health_taints("npu-2") == [("LinkDown", "NoSchedule")], "taint", daemon)
        write_inventory(workspace.inventory, A2)  # the link is back: recovery as from any fault
        await until_metric(port, "npu_plugin_unhealthy_devices", 0, daemon, reason="link-down")
        await until_samples(port, lambda _s: health_taints("npu-2") == [], "the taint gone", daemon)

    run(scenario())
    log = daemon.log()
    assert "RoCE link of npu-2 is down" in log and "RoCE link of npu-2 is up again" in log
    assert "device npu-2 turned unhealthy (its RoCE link is down for 0.3 s or more)" in log


MINDCLUSTER_SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": f"{NODE}-{DRIVER}-mc7xq"},
    "spec": {
        "driver": DRIVER,
        "nodeName": NODE,
        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "npu-0"}],
    },
}


def test_another_publishers_slices_stop_publishing_loudly_until_they_are_gone(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """A slice of our driver on our node that npu-plugin did not write (Huawei's MindCluster DRA
    driver names itself npu.huawei.com too): before its first write the daemon sees it, writes
    nothing, says so in one line naming it and the way out, counts it and reports NOT_SERVING;
    once it is gone the daemon publishes and serves."""
    fake_api.put_object("ResourceSlice", MINDCLUSTER_SLICE)
    daemon = launch_daemon(*dra_args(workspace, *OBSERVED))
    endpoints = Endpoints.of(daemon)
    name = MINDCLUSTER_SLICE["metadata"]["name"]

    async def scenario() -> None:
        async with DraKubeletSimulator(workspace.reg, node_name=NODE, wipe_delay=None) as kubelet:
            await kubelet.wait_for_plugin(DRIVER)
            await until_metric(endpoints.metrics, "npu_plugin_foreign_slices", 1, daemon)
            async with watching(endpoints.health) as watch:
                await watch.until(NOT_SERVING, daemon)
                await asyncio.to_thread(daemon.wait_for_log, f"another publisher's ResourceSlices of driver {DRIVER}")
                assert [s["metadata"]["name"] for s in node_slices(fake_api)] == [name]
                fake_api.delete_object("ResourceSlice", name)
                await until_metric(endpoints.metrics, "npu_plugin_foreign_slices", 0, daemon)
                await watch.until(SERVING, daemon)
            await until(lambda: len(published_names(fake_api)) == 8, 10, "our slices", daemon)

    run(scenario())
    # The publisher's line; the health service's NOT_SERVING line may name the same reason when the
    # daemon was SERVING before it saw the slice (registered first on a loaded machine).
    refusals = [
        line for line in daemon.log().splitlines() if f"another publisher's ResourceSlices of driver {DRIVER}" in line
    ]
    assert len(refusals) == 1, refusals
    assert f"{name} (pool {NODE})" in refusals[0] and "--driver-name" in refusals[0]


def test_a_rejected_dra_registration_stays_not_serving(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace, *OBSERVED))
    endpoints = Endpoints.of(daemon)

    async def scenario() -> None:
        async with (
            watching(endpoints.health) as watch,
            DraKubeletSimulator(workspace.reg, node_name=NODE, services=("v9.DRAPlugin",)) as kubelet,
        ):
            await kubelet.wait_for(lambda: len(kubelet.attempts) >= 2)
            assert not any(a.registered for a in kubelet.attempts)
            assert watch.statuses == [NOT_SERVING] and await watch.check() == NOT_SERVING
            samples = await asyncio.to_thread(scrape, endpoints.metrics)
            assert value(samples, "npu_plugin_registrations_total", api=DRA) == 0

    run(scenario())


def test_prepared_claims_restored_from_the_checkpoint_count_at_once(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    first = launch_daemon(*dra_args(workspace, *OBSERVED))

    async def prepare_one() -> None:
        async with DraKubeletSimulator(workspace.reg, node_name=NODE, api_url=fake_api.url) as kubelet:
            await kubelet.wait_for_plugin(DRIVER)
            claim = await allocate(fake_api, "kept")
            assert (await kubelet.prepare([claim]))[claim.uid].error == ""

    run(prepare_one())
    assert first.signal(signal.SIGTERM, 10)[0] == 0
    second = launch_daemon(*dra_args(workspace, *OBSERVED))
    port = Endpoints.of(second).metrics
    samples = run(until_metric(port, "npu_plugin_prepared_claims", 1, second))
    assert value(samples, "npu_plugin_prepare_seconds_count") == 0, "no Prepare since the restart"


# --- both mode ---


@contextlib.asynccontextmanager
async def pod_resources_at(socket: Path) -> AsyncIterator[PodResourcesSimulator]:
    lister = PodResourcesSimulator(socket, RESOURCE)
    await lister.start()
    try:
        yield lister
    finally:
        await lister.stop()


def test_both_mode_serves_once_both_apis_registered_and_counts_owners_and_handovers(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    dp_dir, socket = workspace.root / "dp", workspace.root / "pod-resources.sock"
    args = dra_args(
        workspace,
        "--mode",
        "both",
        "--dra-devices",
        "4-7",
        "--device-plugin-path",
        str(dp_dir),
        "--pod-resources-socket",
        str(socket),
        *OBSERVED,
    )

    async def scenario() -> None:
        async with pod_resources_at(socket) as lister:
            # Ascend910-7 belongs to DRA by the partition, but a classic pod holds it.
            lister.hold_devices("team-a", "classic", "main", ["Ascend910-7"])
            daemon = launch_daemon(*args)
            endpoints = await endpoints_of(daemon)
            port = endpoints.metrics
            async with watching(endpoints.health) as watch, kubelet_at(dp_dir) as kubelet:
                await registered(kubelet, daemon)
                await until_metric(port, "npu_plugin_registrations_total", 1, daemon, api=DP)
                assert await watch.check() == NOT_SERVING, "DRA is not registered yet"
                async with DraKubeletSimulator(workspace.reg, node_name=NODE, api_url=fake_api.url):
                    await watch.until(SERVING, daemon)
                    assert watch.statuses == [NOT_SERVING, SERVING]
                    samples = await until_metric(port, "npu_plugin_devices", 3, daemon, health="healthy", owner=DRA)
                    assert value(samples, "npu_plugin_devices", health="healthy", owner=DP) == 5
                    lister.release("team-a", "classic")
                    samples = await until_metric(port, "npu_plugin_device_handovers_total", 1, daemon, to=DRA)
                    assert value(samples, "npu_plugin_devices", health="healthy", owner=DRA) == 4
                    assert value(samples, "npu_plugin_registrations_total", api=DRA) == 1

    run(scenario())
