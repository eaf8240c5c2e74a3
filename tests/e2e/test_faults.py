"""(g, issue #22) Faults on the real node in dra mode: the kubelet, containerd and the API server restarted
(`scripts/cluster restart`, by their recorded pids, as a service manager would), and the plugin's pod
deleted while claims are being prepared. Each time: the slices are back, a running pod is untouched (same
container, same NPUs), new pods start, and no NPU is given twice. (An NPU turned unhealthy and recovered
is in test_health_and_status.py for DRA and in test_device_plugin_mode.py for the device plugin.)"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import SCRIPT, Cluster, KubectlError, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import (
    as_list,
    claim_pod,
    claim_template,
    claim_workload,
    dev_nodes,
    npu_request,
    published,
    visible_ids,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("dra")


@pytest.fixture(scope="module")
def steady(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """A claim pod running through every fault of the module: its container id and NPUs before them."""
    manifest = claim_workload("steady", [npu_request(count=2)])
    with cluster.applied(manifest):
        cluster.wait_running("steady")
        yield {"container": container_id(cluster, "steady"), "npus": visible_ids(cluster, "steady")}


def container_id(cluster: Cluster, pod: str) -> str:
    return str(cluster.pod(pod)["status"]["containerStatuses"][0]["containerID"])


def restart(daemon: str) -> None:
    run = subprocess.run([str(SCRIPT), "restart", daemon], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr


def assert_untouched(cluster: Cluster, steady: dict[str, Any]) -> None:
    pod = cluster.pod("steady")
    assert pod["status"]["phase"] == "Running"
    assert container_id(cluster, "steady") == steady["container"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert visible_ids_once_served(cluster, "steady") == steady["npus"]


def visible_ids_once_served(cluster: Cluster, pod: str) -> set[int]:
    """The pod's NPUs as its container reports them. A restarted kubelet refuses `exec` ("pod does not
    exist") until it has read its pods from the API server again, which takes a moment after it is up."""

    def probe() -> set[int] | None:
        try:
            return visible_ids(cluster, pod)
        except KubectlError as error:
            if "pod does not exist" in str(error):
                return None
            raise

    return wait(probe, 60, f"the kubelet to serve exec into {pod}")


def slices_complete(cluster: Cluster) -> None:
    wait(lambda: len(published(cluster)) == 8, 120, lambda: f"8 devices in the slices, not {len(published(cluster))}")


def new_pod_runs(cluster: Cluster, name: str, steady: dict[str, Any]) -> None:
    with cluster.applied(claim_workload(name, [npu_request()])):
        cluster.wait_running(name, timeout=180)
        ids = visible_ids(cluster, name)
        assert len(ids) == 1 and not ids & steady["npus"]
        assert dev_nodes(cluster, name) == ids


@pytest.mark.parametrize("daemon", ["kubelet", "containerd", "kube-apiserver"])
def test_restarted_daemon_leaves_running_pods_alone_and_new_pods_start(
    cluster: Cluster, steady: dict[str, Any], daemon: str
) -> None:
    restart(daemon)
    slices_complete(cluster)
    assert_untouched(cluster, steady)
    new_pod_runs(cluster, f"after-{daemon}", steady)


def test_plugin_pod_deleted_mid_churn_comes_back_and_gives_no_npu_twice(
    cluster: Cluster, steady: dict[str, Any]
) -> None:
    names = [f"churn-{i}" for i in range(4)]
    manifest = as_list(claim_template("churn", [npu_request()]), *(claim_pod(n, "churn") for n in names))
    (plugin,) = cluster.get("pods", "-n", "npu-plugin")["items"]
    with cluster.applied(manifest):
        cluster.kubectl("delete", "pod", "-n", "npu-plugin", plugin["metadata"]["name"], "--wait=false")
        for name in names:
            cluster.wait_running(name, timeout=240)
        seen = [visible_ids(cluster, name) for name in names]
        for name, ids in zip(names, seen, strict=True):
            assert len(ids) == 1 and dev_nodes(cluster, name) == ids, name
        given = [i for ids in [*seen, steady["npus"]] for i in ids]
        assert len(given) == len(set(given)) == 6, given
        (back,) = wait(
            lambda: (
                [
                    p
                    for p in cluster.get("pods", "-n", "npu-plugin")["items"]
                    if p["metadata"]["uid"] != plugin["metadata"]["uid"] and p["status"].get("phase") == "Running"
                ]
                or None
            ),
            120,
            "the DaemonSet's new plugin pod Running",
        )
        assert back["metadata"]["name"] != plugin["metadata"]["name"]
    assert_untouched(cluster, steady)
    slices_complete(cluster)
