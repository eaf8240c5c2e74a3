"""(b) dra mode on the real API server, scheduler, ResourceClaim controller, kubelet and containerd's CDI
injection: the slices are accepted, the seed example runs with its NPU injected, selectors and
allocation modes get what they ask for, an unsatisfiable claim waits, and a deleted pod's claim is
unprepared. (f) on 1.37: an unchanged extended-resource pod is served through DRA."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import REPO, Cluster, release, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.simulated import cdi_spec, first_device, simulate
from tests.e2e.workloads import (
    DRIVER,
    RESOURCE,
    as_list,
    cel,
    claim_name,
    claim_pod,
    claim_template,
    claim_workload,
    dev_nodes,
    npu_request,
    published,
    visible_ids,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

CDI_ROOT = Path("/etc/cdi")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("dra")


def test_slices_are_accepted_by_the_api_server(cluster: Cluster) -> None:
    def eight() -> list[dict[str, Any]] | None:
        devices = published(cluster)
        return devices if len(devices) == 8 else None

    found = wait(eight, 60, lambda: f"8 devices in the slices, not {len(published(cluster))}")
    assert sorted(d["attributes"]["physicalId"]["int"] for d in found) == list(range(8))


def test_seed_example_runs_with_its_npu_injected_through_cdi(cluster: Cluster) -> None:
    with cluster.applied((REPO / "manifests" / "examples" / "single-npu.yaml").read_text(encoding="utf-8")):
        cluster.wait_running("single-npu")
        ids = visible_ids(cluster, "single-npu")
        assert len(ids) == 1
        assert dev_nodes(cluster, "single-npu") == ids
        log = cluster.kubectl("logs", "single-npu")
        assert f"ASCEND_VISIBLE_DEVICES={next(iter(ids))}" in log
        assert "crw" in log, log
        (result,) = cluster.get("resourceclaim", claim_name(cluster, "single-npu"))["status"]["allocation"]["devices"][
            "results"
        ]
        assert result["driver"] == DRIVER


def test_cel_selector_on_numa_node_gets_devices_of_that_node(cluster: Cluster) -> None:
    selector = cel(f'device.attributes["{DRIVER}"].numaNode == 1')
    with cluster.applied(claim_workload("numa-1", [npu_request(count=2, selectors=selector)])):
        cluster.wait_running("numa-1")
        ids = visible_ids(cluster, "numa-1")
        assert len(ids) == 2
        assert ids <= {4, 5, 6, 7}


def test_allocation_mode_all_gets_every_npu(cluster: Cluster) -> None:
    with cluster.applied(claim_workload("all", [npu_request(allocationMode="All")])):
        cluster.wait_running("all")
        assert visible_ids(cluster, "all") == set(range(8))
        assert dev_nodes(cluster, "all") == set(range(8))


def test_match_attribute_on_the_topology_group_keeps_a_pair_in_one_ring(cluster: Cluster) -> None:
    # Among NPUs 3, 4 and 5 only 4 and 5 share a ring: without the constraint the allocator takes 3 and 4.
    request = npu_request(count=2, selectors=cel(f'device.attributes["{DRIVER}"].physicalId in [3, 4, 5]'))
    constraint = {"matchAttribute": f"{DRIVER}/topologyGroup"}
    with cluster.applied(claim_workload("pair", [request], [constraint])):
        cluster.wait_running("pair")
        assert visible_ids(cluster, "pair") == {4, 5}
        assert dev_nodes(cluster, "pair") == {4, 5}


def test_a_claim_of_two_requests_gives_each_container_what_it_names(cluster: Cluster) -> None:
    """A container given the whole claim sees both requests' NPUs in its environment, a container given
    one request only that one's (found here: each request's CDI device set the variable to its own NPUs,
    and the last applied won)."""
    pod = claim_pod("two-requests", "two-requests")
    app = pod["spec"]["containers"][0]
    pod["spec"]["containers"] += [
        {**app, "name": request, "resources": {"claims": [{"name": "npu", "request": request}]}} for request in "ab"
    ]
    template = claim_template("two-requests", [npu_request("a"), npu_request("b", count=2)])
    with cluster.applied(as_list(template, pod)):
        cluster.wait_running("two-requests")
        seen = {c: (visible_ids(cluster, "two-requests", c), dev_nodes(cluster, "two-requests", c)) for c in "ab"}
        whole = visible_ids(cluster, "two-requests"), dev_nodes(cluster, "two-requests")
        assert whole[0] == whole[1], f"whole claim: ASCEND_VISIBLE_DEVICES {whole[0]}, /dev {whole[1]}"
        assert all(visible == nodes for visible, nodes in seen.values()), seen
        assert (len(seen["a"][0]), len(seen["b"][0])) == (1, 2), seen
        assert whole[0] == seen["a"][0] | seen["b"][0], (whole, seen)


def test_unsatisfiable_claim_stays_pending(cluster: Cluster) -> None:
    with cluster.applied(claim_workload("nine", [npu_request(count=9)])):
        message = cluster.unschedulable("nine").lower()
        assert "resourceclaim" in message or "cannot allocate" in message, message


def test_deleting_the_pod_unprepares_the_claim_and_removes_its_cdi_spec(cluster: Cluster) -> None:
    with cluster.applied(claim_workload("gone", [npu_request()])):
        cluster.wait_running("gone")
        claim_uid = cluster.get("resourceclaim", claim_name(cluster, "gone"))["metadata"]["uid"]
        spec = CDI_ROOT / f"{DRIVER}-claim_{claim_uid}.json"
        assert spec.is_file(), f"no CDI spec {spec} for the running pod's claim"
        cluster.kubectl("delete", "pod", "gone", "--wait=true", timeout=120)
        wait(lambda: not spec.exists(), 60, f"{spec} removed once the pod is gone")


@pytest.mark.skipif(release() != "1.37", reason="KEP-5004 (DRAExtendedResource) is GA from 1.37; 1.34 has it as alpha")
def test_unchanged_pod_with_extended_resource_limits_runs_through_dra(cluster: Cluster) -> None:
    """(f) With the optional extendedResourceName DeviceClass, the classic `limits: {huawei.com/Ascend910: 1}`
    is served by DRA on a dra-mode node: the scheduler makes a claim and the container sees its NPU via CDI."""
    device_class = REPO / "manifests" / "deviceclasses" / "optional" / "extended-resource-ascend910.yaml"
    with (
        cluster.applied(device_class.read_text(encoding="utf-8")),
        cluster.applied(json.dumps(workload("classic", limits={RESOURCE: "1"}))),
    ):
        cluster.wait_running("classic")
        ids = visible_ids(cluster, "classic")
        assert len(ids) == 1
        assert dev_nodes(cluster, "classic") == ids
        status = cluster.pod("classic")["status"]
        assert status.get("extendedResourceClaimStatus", {}).get("resourceClaimName"), status


def test_simulate_shows_the_device_and_cdi_spec_the_cluster_has(cluster: Cluster) -> None:
    """(h) `npu-plugin simulate --mode dra` on the same profile: its first device is the real slice's
    (attributes and capacity as the API server stored them), and the CDI spec of its one-NPU claim is
    the one the real Prepare wrote for the same NPU, up to the claim's uid and the dev root."""
    report = simulate("dra")
    device = first_device(report)
    real = next(d for d in published(cluster) if d["name"] == device["name"])
    assert (real["attributes"], real.get("capacity")) == (device["attributes"], device["capacity"])

    spec = cdi_spec(report)
    (simulated_device,) = spec["devices"]
    npu = device["attributes"]["physicalId"]["int"]
    request = npu_request(selectors=cel(f'device.attributes["{DRIVER}"].physicalId == {npu}'))
    with cluster.applied(claim_workload("like-simulated", [request])):
        cluster.wait_running("like-simulated")
        uid = cluster.get("resourceclaim", claim_name(cluster, "like-simulated"))["metadata"]["uid"]
        written = json.loads((CDI_ROOT / f"{DRIVER}-claim_{uid}.json").read_text(encoding="utf-8"))
        (real_device,) = written["devices"]
        assert (written["cdiVersion"], written["kind"]) == (spec["cdiVersion"], spec["kind"])

        def paths(edits: dict[str, Any]) -> tuple[list[str], list[str]]:
            return edits["env"], [node["path"] for node in edits["deviceNodes"]]

        assert paths(real_device["containerEdits"]) == paths(simulated_device["containerEdits"])
        assert visible_ids(cluster, "like-simulated") == {npu}
