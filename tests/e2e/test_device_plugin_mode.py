"""(a) device-plugin mode on a real kubelet: the node's capacity, a pod with two NPUs that sees exactly
those two, both from one HCCS ring, and a pod asking for more than the node has. (g) An NPU the fake
backend turns unhealthy leaves the node's allocatable, a new pod gets the other seven, and once it
recovers it is allocatable again."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import NODE, RINGS, Cluster, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.simulated import allocate, simulate
from tests.e2e.workloads import RESOURCE, allocatable, dev_nodes, set_health, visible_ids, workload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

SICK = 5


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("device-plugin")


def test_node_advertises_eight_npus(cluster: Cluster) -> None:
    wait(lambda: allocatable(cluster) == "8", 60, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
    assert cluster.get("node", NODE)["status"]["capacity"][RESOURCE] == "8"


def test_pod_with_two_npus_sees_exactly_them(cluster: Cluster) -> None:
    with cluster.applied(json.dumps(workload("two-npus", limits={RESOURCE: "2"}))):
        cluster.wait_running("two-npus")
        ids = visible_ids(cluster, "two-npus")
        assert len(ids) == 2
        assert dev_nodes(cluster, "two-npus") == ids
        # Real character devices, not files: the runtime made them from the host's nodes.
        modes = cluster.exec("two-npus", "ls -l /dev/davinci*").splitlines()
        assert all(line.startswith("c") for line in modes), modes
        assert any(ids <= ring for ring in RINGS), f"{ids} span two HCCS rings"


def test_unhealthy_npu_leaves_allocatable_new_pods_avoid_it_and_recovery_restores_it(cluster: Cluster) -> None:
    wait(lambda: allocatable(cluster) == "8", 60, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
    try:
        set_health(SICK, "Alarm", ["0x80E01801"])
        wait(lambda: allocatable(cluster) == "7", 60, lambda: f"allocatable {RESOURCE}=7, not {allocatable(cluster)}")
        assert cluster.get("node", NODE)["status"]["capacity"][RESOURCE] == "8"
        with cluster.applied(json.dumps(workload("all-healthy", limits={RESOURCE: "7"}))):
            cluster.wait_running("all-healthy")
            ids = visible_ids(cluster, "all-healthy")
            assert ids == set(range(8)) - {SICK}
            assert dev_nodes(cluster, "all-healthy") == ids
            set_health(SICK, "OK")
            wait(lambda: allocatable(cluster) == "8", 60, lambda: f"allocatable back to 8, not {allocatable(cluster)}")
            # The only free NPU is the recovered one: a new pod runs on it.
            with cluster.applied(json.dumps(workload("recovered", limits={RESOURCE: "1"}))):
                cluster.wait_running("recovered")
                assert visible_ids(cluster, "recovered") == {SICK}
                assert dev_nodes(cluster, "recovered") == {SICK}
    finally:
        set_health(SICK, "OK")


def test_pod_asking_for_nine_stays_pending_with_the_schedulers_reason(cluster: Cluster) -> None:
    with cluster.applied(json.dumps(workload("nine-npus", limits={RESOURCE: "9"}))):
        assert f"Insufficient {RESOURCE}" in cluster.unschedulable("nine-npus")
        assert cluster.pod("nine-npus")["status"]["phase"] == "Pending"


def test_simulate_shows_what_the_container_gets(cluster: Cluster) -> None:
    """(h) `npu-plugin simulate --mode device-plugin` on the same profile: Allocate's environment and
    device nodes for two NPUs are what the real kubelet's pod sees (the same preferred pair too)."""
    env, devices = allocate(simulate("device-plugin"))
    with cluster.applied(json.dumps(workload("like-simulated", limits={RESOURCE: "2"}))):
        cluster.wait_running("like-simulated")
        assert cluster.exec("like-simulated", "echo $ASCEND_VISIBLE_DEVICES").strip() == env["ASCEND_VISIBLE_DEVICES"]
        seen = {f"/dev/{name}" for name in cluster.exec("like-simulated", "ls /dev").split()}
        assert devices <= seen, f"simulate gives {sorted(devices)}, the container has {sorted(seen)}"
        assert {d for d in seen if d.startswith("/dev/davinci")} == {d for d in devices if d.startswith("/dev/davinci")}
