"""(a) device-plugin mode on a real kubelet: the node's capacity, a pod with two NPUs that sees exactly
those two, both from one HCCS ring, and a pod asking for more than the node has."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import NODE, RINGS, Cluster, wait, workload
from tests.e2e.conftest import cluster_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

RESOURCE = "huawei.com/Ascend910"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("device-plugin")


def test_node_advertises_eight_npus(cluster: Cluster) -> None:
    def advertised() -> dict[str, str] | None:
        status = cluster.get("node", NODE)["status"]
        return status if status.get("allocatable", {}).get(RESOURCE) == "8" else None

    status = wait(advertised, 60, lambda: f"allocatable {RESOURCE}=8 on {cluster.get('node', NODE)['status']}")
    assert status["capacity"][RESOURCE] == "8"


def test_pod_with_two_npus_sees_exactly_them(cluster: Cluster) -> None:
    manifest = workload("two-npus", "sleep 3600", limits={RESOURCE: "2"})
    cluster.apply(manifest)
    try:
        cluster.wait_running("two-npus")
        visible = cluster.exec("two-npus", "echo $ASCEND_VISIBLE_DEVICES").strip()
        ids = {int(i) for i in visible.split(",")}
        assert len(ids) == 2, visible
        nodes = cluster.exec("two-npus", "ls /dev").split()
        assert sorted(n for n in nodes if n.startswith("davinci") and n[7:].isdigit()) == sorted(
            f"davinci{i}" for i in ids
        )
        # Real character devices, not files: the runtime made them from the host's nodes.
        modes = cluster.exec("two-npus", "ls -l /dev/davinci*").splitlines()
        assert all(line.startswith("c") for line in modes), modes
        assert any(ids <= ring for ring in RINGS), f"{ids} span two HCCS rings"
    finally:
        cluster.delete(manifest)


def test_pod_asking_for_nine_stays_pending_with_the_schedulers_reason(cluster: Cluster) -> None:
    manifest = workload("nine-npus", "sleep 3600", limits={RESOURCE: "9"})
    cluster.apply(manifest)
    try:
        message = cluster.unschedulable("nine-npus")
        assert f"Insufficient {RESOURCE}" in message
        assert cluster.pod("nine-npus")["status"]["phase"] == "Pending"
    finally:
        cluster.delete(manifest)
