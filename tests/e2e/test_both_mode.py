"""(d) both mode (--dra-devices 4-7, the ConfigMap's default): device-plugin pods and DRA claims created at
the same time never get the same NPU; each side serves only its own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import NODE, Cluster, wait, workload
from tests.e2e.conftest import cluster_in
from tests.e2e.test_dra_mode import DRIVER, as_list, claim_pod, claim_template, dev_nodes, devices, visible_ids

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

RESOURCE = "huawei.com/Ascend910"
DEVICE_PLUGIN_SIDE = {0, 1, 2, 3}
DRA_SIDE = {4, 5, 6, 7}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("both")


def test_each_side_advertises_only_its_own_npus(cluster: Cluster) -> None:
    wait(
        lambda: cluster.get("node", NODE)["status"].get("allocatable", {}).get(RESOURCE) == "4",
        60,
        f"allocatable {RESOURCE}=4",
    )
    published = wait(lambda: devices(cluster) or None, 60, "the DRA side's slice")
    assert {d["attributes"]["physicalId"]["int"] for d in published} == DRA_SIDE


def test_device_plugin_pods_and_claims_at_once_never_share_an_npu(cluster: Cluster) -> None:
    request = {"requests": [{"name": "npu", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}
    objects = [json.loads(workload(f"dp-{i}", "sleep 3600", limits={RESOURCE: "2"})) for i in range(2)]
    objects.append(claim_template("both-claim", request))
    objects += [claim_pod(f"dra-{i}", "both-claim") for i in range(2)]
    manifest = as_list(*objects)
    cluster.apply(manifest)
    try:
        seen: dict[str, set[int]] = {}
        for name in ("dp-0", "dp-1", "dra-0", "dra-1"):
            cluster.wait_running(name)
            seen[name] = visible_ids(cluster, name)
            assert dev_nodes(cluster, name) == seen[name], name
        assert seen["dp-0"] | seen["dp-1"] == DEVICE_PLUGIN_SIDE
        assert seen["dra-0"] | seen["dra-1"] == DRA_SIDE
        assert sum(len(ids) for ids in seen.values()) == 8, seen
    finally:
        cluster.delete(manifest)
