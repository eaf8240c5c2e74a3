"""Pod start on a real node (`scripts/bench --e2e`, issue #22 point 4): how long from created to its
container running for a pod with no devices (the floor), a device-plugin pod, a DRA claim pod and a
dynamic-vNPU pod, and how much of that is the plugin's own Allocate or Prepare.

One cluster of scripts/cluster serves every kind in one run: `--mode both` (NPUs 0-3 through the device
plugin, 4-7 through DRA, the ConfigMap's split) on an Atlas 800T A2 profile with `--vnpu dynamic`. The
pods are created one at a time in rounds of one of each kind (the order rotating each round), each on a
node at rest: the one before it deleted, its claim gone and unprepared. A first round is not counted.

The clock: the container's own first command reads /proc/uptime (CLOCK_BOOTTIME, 10 ms steps) and
prints it; the bench reads the same clock on the same kernel (`time.CLOCK_BOOTTIME`) when the API
server has answered the pod's POST. So the start is created (the object stored) to the container's
process running, with no poll interval in it and without the 1 s steps of creationTimestamp and
`containerStatuses[].state.running.startedAt`; the API's Running status, which the kubelet reports up
to a PLEG relist (1 s) later, plays no part.

The plugin's share: its /metrics (`npu_plugin_allocate_seconds`, `npu_plugin_prepare_seconds`, read
from the plugin pod on the pod network) before each pod and once it runs; the difference is that pod's
Allocate or Prepare (exactly one call, or the run fails), divided by that pod's start.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import urllib3
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import FULL, Budget, percentile
from benchmarks.report import Row, at_most
from npu_plugin.kubeapi.client import connect
from npu_plugin.kubeapi.connection import Transport
from tests.e2e.cluster import KUBECONFIG, SCRIPT, Cluster, wait
from tests.e2e.workloads import (
    RESOURCE,
    allocatable,
    as_list,
    claim_pod,
    claim_template,
    npu_request,
    published,
    workload,
)

RELEASES = ("1.37", "1.34")
KINDS = ("floor", "device-plugin", "dra", "vnpu")
# The target of each kind's p50 and p90 as a multiple of the floor's, and of the plugin's share.
TARGETS = {"device-plugin": 1.3, "dra": 1.3, "vnpu": 1.5, "plugin_share_pct": 5.0}
DEPLOYMENT = ("both", ("--fake-profile", "atlas-800t-a2", "--env", "NPU_PLUGIN_VNPU=dynamic"))
VNPU_CLASS, VNPU_TEMPLATE = "vnpu.npu.huawei.com", "vir05_1c_16g"
NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
PLUGIN_PODS = "/api/v1/namespaces/npu-plugin/pods"
METRICS_PORT = 51516
# The container prints the boot-time clock first, then idles.
STAMP = "read up _ </proc/uptime; echo $up; exec sleep 3600"
# Which of the plugin's histograms times each kind's call.
CALL = {
    "device-plugin": "npu_plugin_allocate_seconds",
    "dra": "npu_plugin_prepare_seconds",
    "vnpu": "npu_plugin_prepare_seconds",
}
SETTLE_SECONDS = 10.0  # after the plugin is ready, before the first pod: the rollout's churn ends
START_TIMEOUT = 120.0
POLL_SECONDS = 0.2


class UnavailableError(RuntimeError):
    """This machine cannot run the measurement; the message says why in one line."""


def preflight(release: str) -> None:
    """UnavailableError unless a cluster of `release` can come up here without a build, and none is up."""
    if os.geteuid() != 0:
        raise UnavailableError("--e2e needs root: it brings up a real cluster (scripts/cluster up)")
    built = subprocess.run([str(SCRIPT), "built", "--kubernetes", release], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise UnavailableError(f"--e2e needs the local cluster built: {built.stderr.strip().removeprefix('cluster: ')}")
    status = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True, check=False)
    if status.returncode != 3:
        raise UnavailableError(
            "--e2e brings up a cluster of its own, and one is up (scripts/cluster status); take it down first"
        )


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def templates() -> str:
    vnpu = {
        "name": "npu",
        "exactly": {
            "deviceClassName": VNPU_CLASS,
            "selectors": [
                {"cel": {"expression": f'device.attributes["npu.huawei.com"].vnpuTemplate == "{VNPU_TEMPLATE}"'}}
            ],
        },
    }
    return as_list(claim_template("bench-dra", [npu_request()]), claim_template("bench-vnpu", [vnpu]))


def pod_of(kind: str, name: str) -> dict[str, Any]:
    if kind == "floor":
        return workload(name, STAMP)
    if kind == "device-plugin":
        return workload(name, STAMP, limits={RESOURCE: "1"})
    pod = claim_pod(name, f"bench-{kind}")
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", STAMP]
    return pod


class Api:
    """The cluster's API server through the product's own client, as the admin of scripts/cluster."""

    def __init__(self) -> None:
        self._transport: Transport = connect(KUBECONFIG)
        self._http = urllib3.PoolManager(maxsize=1, retries=False)

    def call(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, query: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        response = self._transport.request(method, path, body=data, query=query, timeout=30)
        return response.status, response.data

    def json(self, path: str) -> Any:
        status, data = self.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {data[:300]!r}")
        return json.loads(data)

    def plugin_calls(self, address: str) -> dict[str, tuple[float, float]]:
        """(sum of seconds, count) of the plugin's Allocate and Prepare histograms."""
        text = self._http.request("GET", f"http://{address}:{METRICS_PORT}/metrics", timeout=10).data.decode()
        found: dict[str, tuple[float, float]] = {}
        for family in text_string_to_metric_families(text):
            if family.name in CALL.values():
                values = {sample.name: sample.value for sample in family.samples}
                found[family.name] = (values[f"{family.name}_sum"], values[f"{family.name}_count"])
        return found


@dataclass(frozen=True)
class Sample:
    kind: str
    start: float  # seconds, created to the container's first command
    plugin: float  # seconds of the plugin's Allocate or Prepare for this pod (0 for the floor)


def plugin_address(api: Api) -> str:
    running = [p for p in api.json(PLUGIN_PODS)["items"] if p["status"].get("phase") == "Running"]
    if len(running) != 1:
        raise RuntimeError(f"{len(running)} running plugin pods, not 1")
    return str(running[0]["status"]["podIP"])


def started_at(api: Api, name: str) -> float | None:
    """The boot-time clock the container printed first, None until it has."""
    pod = api.json(f"{PODS}/{name}")
    if pod["status"].get("phase") == "Failed":
        raise RuntimeError(f"pod {name} failed: {json.dumps(pod['status'])[:600]}")
    statuses = pod["status"].get("containerStatuses") or []
    if not statuses or "running" not in statuses[0].get("state", {}):
        return None
    status, log = api.call("GET", f"{PODS}/{name}/log")
    first = log.decode().split()
    return float(first[0]) if status == 200 and first else None


def until(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while (value := probe()) is None or value is False:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:.0f} s")
        time.sleep(POLL_SECONDS)
    return value


def at_rest(api: Api) -> bool:
    """No pod and no claim left in the namespace (deleted, unprepared, the claim's finalizer gone)."""
    return not api.json(PODS)["items"] and not api.json(CLAIMS)["items"]


def one_pod(api: Api, plugin: str, kind: str, name: str) -> Sample:
    before = api.plugin_calls(plugin)
    status, data = api.call("POST", PODS, pod_of(kind, name))
    created = boottime()
    if status != 201:
        raise RuntimeError(f"creating pod {name}: {status} {data[:300]!r}")
    running = until(lambda: started_at(api, name), START_TIMEOUT, f"container of pod {name} running")
    after = api.plugin_calls(plugin)
    seconds = 0.0
    if kind in CALL:
        (sum_before, count_before), (sum_after, count_after) = before[CALL[kind]], after[CALL[kind]]
        if count_after - count_before != 1:
            raise RuntimeError(f"pod {name}: {count_after - count_before:g} calls in {CALL[kind]}, not 1")
        seconds = sum_after - sum_before
    status, data = api.call("DELETE", f"{PODS}/{name}")
    if status not in (200, 202):
        raise RuntimeError(f"deleting pod {name}: {status} {data[:300]!r}")
    until(lambda: at_rest(api), START_TIMEOUT, f"pod {name} and its claim gone")
    return Sample(kind, running - created, seconds)


def rounds(api: Api, plugin: str, count: int) -> Iterator[Sample]:
    """`count` rounds after an uncounted first one; round r starts with kind r mod 4."""
    for r in range(count + 1):
        for i in range(len(KINDS)):
            kind = KINDS[(r + i) % len(KINDS)]
            sample = one_pod(api, plugin, kind, f"bench-{kind}-{r}")
            if r:
                yield sample


def summary(samples: list[Sample]) -> dict[str, Any]:
    by_kind = {kind: [s for s in samples if s.kind == kind] for kind in KINDS}
    floor = [s.start for s in by_kind["floor"]]
    result: dict[str, Any] = {"floor": quantiles(floor)}
    for kind in KINDS[1:]:
        starts = [s.start for s in by_kind[kind]]
        entry = quantiles(starts)
        entry["p50_ratio"] = round(entry["p50_s"] / result["floor"]["p50_s"], 2)
        entry["p90_ratio"] = round(entry["p90_s"] / result["floor"]["p90_s"], 2)
        plugin = [s.plugin for s in by_kind[kind]]
        shares = [s.plugin / s.start * 100 for s in by_kind[kind]]
        entry["plugin_p50_ms"] = round(percentile(plugin, 0.5) * 1e3, 2)
        entry["plugin_p90_ms"] = round(percentile(plugin, 0.9) * 1e3, 2)
        entry["plugin_share_p90_pct"] = round(percentile(shares, 0.9), 2)
        entry["plugin_share_max_pct"] = round(max(shares), 2)
        result[kind] = entry
    return result


def quantiles(starts: list[float]) -> dict[str, Any]:
    return {
        "pods": len(starts),
        "p50_s": round(percentile(starts, 0.5), 3),
        "p90_s": round(percentile(starts, 0.9), 3),
        "samples_s": [round(s, 3) for s in starts],
    }


@contextmanager
def cluster_up(release: str) -> Iterator[Cluster]:
    mode, options = DEPLOYMENT
    cluster = Cluster(release, mode, options)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


def measure(cluster: Cluster, pods: int) -> dict[str, Any]:
    wait(lambda: allocatable(cluster) == "4", 120, lambda: f"allocatable {RESOURCE}=4, not {allocatable(cluster)}")
    wait(lambda: any("vnpuTemplate" in d["attributes"] for d in published(cluster)), 120, "vNPU devices in the slices")
    cluster.apply(templates())
    api = Api()
    plugin = plugin_address(api)
    time.sleep(SETTLE_SECONDS)
    load_before = os.getloadavg()
    started = time.monotonic()
    samples = list(rounds(api, plugin, pods))
    return {
        "release": cluster.release,
        "kubernetes": json.loads(cluster.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"],
        "deployment": ["--mode", DEPLOYMENT[0], *DEPLOYMENT[1]],
        "clock": "CLOCK_BOOTTIME: POST answered -> /proc/uptime read by the container's first command",
        "load_1m_before": round(load_before[0], 2),
        "load_1m_after": round(os.getloadavg()[0], 2),
        "wall_s": round(time.monotonic() - started, 1),
        **summary(samples),
    }


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    floor = r["floor"]
    out = [
        Row(
            "machine load (1-minute average)",
            f"{r['load_1m_before']:.2f} -> {r['load_1m_after']:.2f}",
            f"Kubernetes {r['kubernetes']}, {floor['pods']} pods of each kind in {r['wall_s']:.0f} s",
        ),
        Row("floor (no devices) p50 / p90", f"{floor['p50_s']:.2f} / {floor['p90_s']:.2f} s"),
    ]
    for kind, title in (("device-plugin", "device-plugin pod"), ("dra", "DRA claim pod"), ("vnpu", "dynamic vNPU pod")):
        entry = r[kind]
        for q in ("p50", "p90"):
            out.append(
                Row(
                    f"{title} {q}",
                    f"{entry[f'{q}_s']:.2f} s",
                    f"floor {floor[f'{q}_s']:.2f} s, {entry[f'{q}_ratio']:.2f}x",
                    f"<= {t[kind]:g}x floor",
                    at_most(entry[f"{q}_ratio"], t[kind]),
                )
            )
        call = "Allocate" if kind == "device-plugin" else "Prepare"
        out.append(
            Row(
                f"{title}: plugin's share",
                f"{entry['plugin_share_p90_pct']:.2f} %",
                f"p90 over pods (max {entry['plugin_share_max_pct']:.2f} %); {call} p50 / p90 "
                f"{entry['plugin_p50_ms']:.1f} / {entry['plugin_p90_ms']:.1f} ms",
                f"<= {t['plugin_share_pct']:g} % of the pod's start",
                at_most(entry["plugin_share_p90_pct"], t["plugin_share_pct"]),
            )
        )
    return out


def run(results: dict[str, Any], budget: Budget = FULL, release: str = RELEASES[0]) -> None:
    """Bring up a cluster (`preflight` says whether it can), measure, take it down; the numbers and
    targets under results["e2e"]."""
    with cluster_up(release) as cluster:
        measured = measure(cluster, budget.e2e_pods)
    results["e2e"] = {"results": measured, "targets": TARGETS}
