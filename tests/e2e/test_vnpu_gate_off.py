"""(c, issue #22) Dynamic vNPUs on 1.34 with DRAPartitionableDevices off: the node falls back to whole
NPUs (no counters, no partitions) and writes its slices no more once they are settled. The gate is the
components', so the session's cluster is replaced by one with the gate off (`scripts/cluster up
--feature-gates`); this module runs last (conftest's `LAST`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import NODE, Cluster, release, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import DRIVER, claim_workload, dev_nodes, npu_request, visible_ids

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(release() != "1.34", reason="DRAPartitionableDevices can be turned off up to 1.35 only"),
]

GATE_OFF = "DRAPartitionableDevices=false"
# Long enough for every periodic cause that runs within a minute at the defaults to have had a turn at
# least once or to be known idle (health samples every 5 s; the slice resync every 30 s): 35 s.
QUIET_SECONDS = 35


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("dra", ["--fake-profile", "atlas-800t-a2", "--env", "NPU_PLUGIN_VNPU=dynamic"], GATE_OFF)


def node_slices(cluster: Cluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("resourceslices")["items"]
    return [s for s in items if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE]


def whole_npus(cluster: Cluster) -> list[dict[str, Any]] | None:
    """The slices once they publish exactly the eight whole NPUs."""
    slices = node_slices(cluster)
    names = sorted(d["name"] for s in slices for d in s["spec"].get("devices", []))
    return slices if names == sorted(f"npu-{i}" for i in range(8)) else None


def test_the_node_falls_back_to_whole_npus_and_writes_no_more(cluster: Cluster) -> None:
    slices = wait(lambda: whole_npus(cluster), 120, lambda: f"eight whole NPUs, not {node_slices(cluster)}")
    for item in slices:
        assert "sharedCounters" not in item["spec"], item
        for device in item["spec"]["devices"]:
            assert "consumesCounters" not in device and "vnpuTemplate" not in device["attributes"], device
    logs = cluster.kubectl("logs", "-n", "npu-plugin", "daemonset/npu-plugin-dra")
    assert "DRAPartitionableDevices is off" in logs, logs[-3000:]

    # No write storm: every write gives a slice a new resourceVersion, so the same versions over a while
    # mean nothing was written in between.
    before = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in node_slices(cluster)}
    time.sleep(QUIET_SECONDS)
    after = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in node_slices(cluster)}
    assert after == before, f"slices written while at rest: {before} -> {after}"


def test_a_whole_npu_claim_runs(cluster: Cluster) -> None:
    with cluster.applied(claim_workload("whole", [npu_request()])):
        cluster.wait_running("whole", timeout=180)
        ids = visible_ids(cluster, "whole")
        assert len(ids) == 1 and dev_nodes(cluster, "whole") == ids
