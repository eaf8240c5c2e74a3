"""Moving a node between modes on the real cluster, with both DaemonSets applied (as docs/migration.md).

(e, issue #22) Relabelling a device-plugin node with a running NPU pod to dra: the pod keeps its NPUs and
no claim gets them until it ends, then DRA hands them out; and back to device-plugin.

(issue #24) `npu-plugin plan` reads a device-plugin node with a running NPU pod and
says it needs a drain; the steps it prints, run as an operator would (kubectl on PATH, the cluster's
kubeconfig), move the node to dra; then plan says the node is on DRA with nothing left. With the optional
`extendedResourceName` DeviceClass installed (the rewrite-free path of docs/migration.md), the drained
Deployment's new pod runs on the same node through DRA, unchanged."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import KUBECONFIG, NODE, REPO, Cluster, operator_env, release, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import (
    RESOURCE,
    allocatable,
    claim_workload,
    dev_nodes,
    npu_request,
    published,
    visible_ids,
    workload,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(3600),
]

PLAN = REPO / ".venv" / "bin" / "npu-plugin"
MAPPING_CLASS = REPO / "manifests" / "deviceclasses" / "optional" / "extended-resource-ascend910.yaml"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Both DaemonSets exist (dra first, then the node relabelled to device-plugin), as on a cluster
    migrating node by node."""
    for cluster in cluster_in("dra"):
        cluster.deploy("device-plugin")
        yield cluster


def plan() -> tuple[int, dict[str, Any]]:
    run = subprocess.run(
        [str(PLAN), "plan", "--kubeconfig", str(KUBECONFIG), "--node", NODE, "--to", "dra", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode in (0, 1), run.stderr
    return run.returncode, json.loads(run.stdout)


def deployment(name: str) -> dict[str, Any]:
    pod = workload(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {**pod["spec"], "restartPolicy": "Always"},
            },
        },
    }


def running_pod(cluster: Cluster, app: str) -> str | None:
    pods = cluster.get("pods", "-l", f"app={app}")["items"]
    live = [p for p in pods if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]]
    return str(live[0]["metadata"]["name"]) if live else None


def relabel(cluster: Cluster, mode: str) -> None:
    """The operator's move: the node's mode label; the DaemonSet of that mode takes the node."""
    cluster.kubectl("label", "node", NODE, f"npu.huawei.com/plugin-mode={mode}", "--overwrite")


def plugin_pods(cluster: Cluster) -> list[str]:
    """The components (mode) of the npu-plugin pods that are up and not leaving."""
    pods = cluster.get("pods", "-n", "npu-plugin")["items"]
    return sorted(
        p["metadata"]["labels"].get("app.kubernetes.io/component", "?")
        for p in pods
        if "deletionTimestamp" not in p["metadata"]
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    )


def physical_ids(devices: list[dict[str, Any]]) -> set[int]:
    return {d["attributes"]["physicalId"]["int"] for d in devices}


def test_relabelled_node_keeps_a_running_pods_npus_out_of_dra_until_it_ends_and_back(cluster: Cluster) -> None:
    wait(lambda: allocatable(cluster) == "8", 120, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
    try:
        with cluster.applied(json.dumps(workload("holder", limits={RESOURCE: "2"}))):
            cluster.wait_running("holder")
            held = visible_ids(cluster, "holder")
            assert len(held) == 2

            relabel(cluster, "dra")
            wait(
                lambda: plugin_pods(cluster) == ["dra"], 180, lambda: f"only the dra plugin up: {plugin_pods(cluster)}"
            )
            free = set(range(8)) - held
            wait(
                lambda: physical_ids(published(cluster)) == free,
                120,
                lambda: f"the slice offers {sorted(free)}, not {sorted(physical_ids(published(cluster)))}",
            )
            # The running pod was not touched and still sees its NPUs.
            assert visible_ids(cluster, "holder") == held
            assert cluster.pod("holder")["status"]["containerStatuses"][0]["restartCount"] == 0
            with cluster.applied(claim_workload("rest", [npu_request(allocationMode="All")])):
                cluster.wait_running("rest")
                assert visible_ids(cluster, "rest") == free
        # The holder is gone: its NPUs are DRA's now.
        wait(
            lambda: physical_ids(published(cluster)) == set(range(8)), 120, "all 8 NPUs in the slice once the pod ended"
        )
        with cluster.applied(claim_workload("eight", [npu_request(count=8)])):
            cluster.wait_running("eight")
            assert visible_ids(cluster, "eight") == set(range(8))

        # And back (docs/migration.md §4: no claim held on the node, then relabel).
        relabel(cluster, "device-plugin")
        wait(
            lambda: plugin_pods(cluster) == ["device-plugin"],
            180,
            lambda: f"the device plugin up: {plugin_pods(cluster)}",
        )
        wait(lambda: allocatable(cluster) == "8", 120, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
        with cluster.applied(json.dumps(workload("classic", limits={RESOURCE: "8"}))):
            cluster.wait_running("classic")
            assert visible_ids(cluster, "classic") == set(range(8))
    finally:
        relabel(cluster, "device-plugin")  # whatever failed, the next test starts from a device-plugin node


@pytest.mark.skipif(
    release() != "1.37", reason="the unchanged pod after the move needs DRAExtendedResource, on by default from 1.36"
)
def test_busy_device_plugin_node_is_planned_drained_and_moved_to_dra(cluster: Cluster) -> None:
    # The device plugin serves the node (the mapping class would otherwise send the pod to DRA).
    wait(lambda: allocatable(cluster) == "8", 120, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
    trainer = deployment("trainer")
    trainer["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {RESOURCE: "1"}}
    with cluster.applied(MAPPING_CLASS.read_text(encoding="utf-8")), cluster.applied(json.dumps(trainer)):
        before = wait(lambda: running_pod(cluster, "trainer"), 120, "the trainer's pod Running")
        assert len(visible_ids(cluster, before)) == 1

        status, report = plan()
        (node,) = report["nodes"]
        assert status == 1, report
        assert (node["mode"], node["verdict"]) == ("device-plugin", "ready-after-drain"), node
        assert [p["name"] for p in node["pods"]] == [before], node
        assert any(step.startswith(f"kubectl drain {NODE} ") for step in node["steps"]), node["steps"]
        assert f"kubectl label node {NODE} npu.huawei.com/plugin-mode=dra --overwrite" in node["steps"]

        for step in node["steps"]:
            run = subprocess.run(
                ["sh", "-c", step], env=operator_env(), capture_output=True, text=True, timeout=400, check=False
            )
            assert run.returncode == 0, f"{step}: {run.stderr}"

        # The Deployment's new pod, unchanged, runs on the node through DRA (a claim made for it).
        after = wait(
            lambda: running_pod(cluster, "trainer"), 180, lambda: f"a new trainer pod Running: {cluster.get('pods')}"
        )
        assert after != before
        ids = visible_ids(cluster, after)
        assert len(ids) == 1
        assert dev_nodes(cluster, after) == ids
        assert cluster.pod(after)["status"].get("extendedResourceClaimStatus", {}).get("resourceClaimName")

        status, report = plan()
        (node,) = report["nodes"]
        assert (node["mode"], node["verdict"], node["steps"]) == ("dra", "ready", []), node
        assert status == 0, report
