"""(d) both mode (--dra-devices 4-7, the ConfigMap's default): device-plugin pods and DRA claims created at
the same time never get the same NPU; each side serves only its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import (
    RESOURCE,
    allocatable,
    as_list,
    claim_pod,
    claim_template,
    dev_nodes,
    npu_request,
    published,
    visible_ids,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

DEVICE_PLUGIN_SIDE = {0, 1, 2, 3}
DRA_SIDE = {4, 5, 6, 7}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("both")


def test_each_side_advertises_only_its_own_npus(cluster: Cluster) -> None:
    wait(lambda: allocatable(cluster) == "4", 60, lambda: f"allocatable {RESOURCE}=4, not {allocatable(cluster)}")
    devices = wait(lambda: published(cluster) or None, 60, "the DRA side's slice")
    assert {d["attributes"]["physicalId"]["int"] for d in devices} == DRA_SIDE


def test_device_plugin_pods_and_claims_at_once_never_share_an_npu(cluster: Cluster) -> None:
    objects = [workload(f"dp-{i}", limits={RESOURCE: "2"}) for i in range(2)]
    objects.append(claim_template("both-claim", [npu_request(count=2)]))
    objects += [claim_pod(f"dra-{i}", "both-claim") for i in range(2)]
    with cluster.applied(as_list(*objects)):
        seen: dict[str, set[int]] = {}
        for name in ("dp-0", "dp-1", "dra-0", "dra-1"):
            cluster.wait_running(name)
            seen[name] = visible_ids(cluster, name)
            assert dev_nodes(cluster, name) == seen[name], name
        assert seen["dp-0"] | seen["dp-1"] == DEVICE_PLUGIN_SIDE
        assert seen["dra-0"] | seen["dra-1"] == DRA_SIDE
        assert sum(len(ids) for ids in seen.values()) == 8, seen
