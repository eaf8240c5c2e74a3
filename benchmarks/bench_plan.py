"""`npu-plugin plan` on a large cluster: 5,000 NPU nodes and 40,000 NPU pods served by the fake API
server of this process, planned by `npu-plugin plan -o json` in its own process (from bytecode, as
every benchmarked process). Wall time from start to exit and the process's peak RSS (`wait4`'s
ru_maxrss, this child alone). Targets (issue 24): <= 10 s and <= 300 MiB.

The cluster: 2,500 device-plugin nodes with 8 NPUs, 2,000 DRA nodes with one 8-device ResourceSlice
and 500 both-mode nodes (4 + 4), 8 NPU pods on every node (a Deployment each 8 nodes, a
PodDisruptionBudget each), the pods on DRA nodes holding one ResourceClaim each, the plugin's three
DaemonSets and a plugin pod per node, the shipped DeviceClasses and a quota per namespace.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import FULL, Budget
from benchmarks.report import Row, at_most
from tests.support.cleanup import process, temporary_directory
from tests.support.fakeapi import FakeKubeAPI
from tests.support.plan_cluster import (
    NPU,
    budget,
    claim,
    daemonset,
    device_class,
    node,
    npu_pod,
    plugin_pod,
    quota,
    resource_slice,
)

TARGETS = {"seconds": 10.0, "rss_mib": 300.0}
NODES = {"device-plugin": 2500, "dra": 2000, "both": 500}
PODS_PER_NODE = 8
NODES_PER_WORKLOAD = 8
NAMESPACES = 50


# Runs and waits for the plan process from a small parent of its own: Linux keeps a process's peak
# RSS across fork and exec, so a child forked from this process (holding the whole fake cluster)
# would report this process's size as its own ru_maxrss.
_MEASURE = """
import json, os, subprocess, sys, time
started = time.monotonic()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
cpu = usage.ru_utime + usage.ru_stime
print(json.dumps([time.monotonic() - started, cpu, usage.ru_maxrss, os.waitstatus_to_exitcode(status)]))
"""


@dataclass
class PlanRun:
    nodes: int
    pods: int
    objects: int
    seconds: float
    cpu_seconds: float  # the plan process's own (user + system)
    server_cpu_seconds: float  # the fake API server's (this process) while it served plan
    rss_mib: float
    requests: int
    exit_code: int


def _plant(api: FakeKubeAPI) -> tuple[int, int]:
    """The cluster; returns (NPU nodes, NPU pods)."""
    for mode in NODES:
        api.put_object("DaemonSet", daemonset(mode))
    for name in ("npu.huawei.com", "ascend910.npu.huawei.com", "ascend310p.npu.huawei.com"):
        api.put_object("DeviceClass", device_class(name))
    for index in range(NAMESPACES):
        api.put_object("ResourceQuota", quota("npus", {f"requests.{NPU}": "512"}, f"team-{index:02}"))
    names = [(mode, f"{mode}-{index:05}") for mode, count in NODES.items() for index in range(count)]
    pods = 0
    for number, (mode, name) in enumerate(names):
        capacity = {"device-plugin": {NPU: "8"}, "dra": {}, "both": {NPU: "4"}}[mode]
        api.put_object("Node", node(name, mode, capacity))
        api.put_object("Pod", plugin_pod(name, mode))
        if mode != "device-plugin":
            api.put_object("ResourceSlice", resource_slice(name, 8 if mode == "dra" else 4))
        workload, namespace = f"w{number // NODES_PER_WORKLOAD:04}", f"team-{number % NAMESPACES:02}"
        if number % NODES_PER_WORKLOAD == 0:
            api.put_object("PodDisruptionBudget", budget(workload, {"app": workload}, 1, namespace))
        for slot in range(PODS_PER_NODE):
            pod = f"{workload}-7d9f8b6c5-{name}-{slot}"
            if mode == "dra":
                api.put_object("ResourceClaim", claim(f"{pod}-npu", name, pod=pod, namespace=namespace))
                body = npu_pod(pod, name, {}, namespace=namespace, deployment=workload, claims=(f"{pod}-npu",))
            else:
                body = npu_pod(pod, name, namespace=namespace, deployment=workload)
            api.put_object("Pod", body)
            pods += 1
    return len(names), pods


def measure(work: Path) -> PlanRun:
    with FakeKubeAPI(kubernetes_minor=36) as api:
        nodes, pods = _plant(api)
        objects = api.resource_version
        kubeconfig = work / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        api.clear_requests()
        argv = [sys.executable, "-m", "npu_plugin", "plan", "--kubeconfig", str(kubeconfig), "-o", "json"]
        log = work / "measure.log"
        served_from = time.process_time()
        with process([sys.executable, "-c", _MEASURE, *argv], log) as parent:
            if parent.wait(600) != 0:
                raise RuntimeError(f"measuring plan failed:\n{log.read_text()}")
        server_cpu = time.process_time() - served_from
        seconds, cpu_seconds, rss_kib, exit_code = json.loads(log.read_text())
        requests = len(api.requests)
    return PlanRun(nodes, pods, objects, seconds, cpu_seconds, server_cpu, rss_kib / 1024, requests, exit_code)


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["result"], section["targets"]
    context = (
        f"{r['nodes']:,} nodes, {r['pods']:,} NPU pods, {r['requests']} requests, exit {r['exit_code']}, "
        f"{r['cpu_seconds']:.1f} CPU-s (fake API server {r['server_cpu_seconds']:.1f})"
    )
    return [
        Row(
            "plan, start to exit",
            f"{r['seconds']:.1f} s",
            context,
            f"<= {t['seconds']:g} s",
            at_most(r["seconds"], t["seconds"]),
        ),
        Row(
            "plan, peak RSS",
            f"{r['rss_mib']:.0f} MiB",
            "ru_maxrss of the plan process",
            f"<= {t['rss_mib']:g} MiB",
            at_most(r["rss_mib"], t["rss_mib"]),
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Plan the large cluster once (the budget does not change its size) into results["plan"]."""
    del budget
    with temporary_directory("npu-bench-plan-") as work:
        measured = measure(work)
    results["plan"] = {"result": asdict(measured), "targets": TARGETS}
