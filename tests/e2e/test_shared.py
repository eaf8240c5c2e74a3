"""(issue #25) Shared NPUs on the real scheduler, kubelet and containerd, on an Atlas 800T A2 (eight 910B3
of 64 GiB and 20 AI cores each).

DRA, chips 0 and 1 shared in 4 (`--share-devices 0-1 --share-count 4`): consumable capacity needs
DRAConsumableCapacity on the API server and the scheduler, on by default in 1.37 and turned on for 1.34
by scripts/cluster (its alpha gate). The shared chips are published with `allowMultipleAllocations` and
`memory`/`aiCore` request policies; two claims of `memory: 16Gi` run on chip 0 at once, each with its own
shareID; a third of 48Gi waits (32Gi left) until one goes; a whole-NPU claim never gets a shared chip,
and a claim for all of a chip's memory waits while a share of it is held. With `--claim-status`, each
share's `status.devices` entry carries its shareID.

Device plugin, every chip shared in 3 with `--share-allocation pack`: 24 `huawei.com/Ascend910`, and six
pods of `limits: 1` land three to a chip, chips 0 and 1."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.e2e.cluster import NODE, Cluster, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import (
    DRIVER,
    RESOURCE,
    allocatable,
    as_list,
    cel,
    claim_name,
    claim_pods,
    dev_nodes,
    device_named,
    published,
    visible_ids,
    whole_npu,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

PROFILE = ("--fake-profile", "atlas-800t-a2")
SHARED_CLASS = "shared.npu.huawei.com"
DRA_SHARED, DRA_SHARES = (0, 1), 4
DEVICE_PLUGIN_SHARES = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in(
        "dra",
        [
            *PROFILE,
            "--env",
            f"NPU_PLUGIN_SHARE_DEVICES={DRA_SHARED[0]}-{DRA_SHARED[-1]}",
            "--env",
            f"NPU_PLUGIN_SHARE_COUNT={DRA_SHARES}",
            "--env",
            "NPU_PLUGIN_CLAIM_STATUS=true",
        ],
    )


@pytest.fixture(scope="module")
def device_plugin_node(cluster: Cluster) -> Iterator[Cluster]:
    """The same cluster with the plugin redeployed in device-plugin mode, every chip shared, pack; the
    module's deployment restored after."""
    mode, options = cluster.mode, cluster.options
    cluster.deploy(
        "device-plugin",
        [
            *PROFILE,
            "--env",
            "NPU_PLUGIN_SHARE_DEVICES=all",
            "--env",
            f"NPU_PLUGIN_SHARE_COUNT={DEVICE_PLUGIN_SHARES}",
            "--env",
            "NPU_PLUGIN_SHARE_ALLOCATION=pack",
        ],
    )
    try:
        yield cluster
    finally:
        cluster.deploy(mode, options)


def share(chip: int, memory: str) -> dict[str, Any]:
    """A request for a share of `chip` with `memory` of its capacity."""
    return {
        "name": "npu",
        "exactly": {
            "deviceClassName": SHARED_CLASS,
            "selectors": cel(f'device.attributes["{DRIVER}"].physicalId == {chip}'),
            "capacity": {"requests": {"memory": memory}},
        },
    }


def allocation(cluster: Cluster, pod: str) -> dict[str, Any]:
    """The one allocation result of the pod's claim."""
    (result,) = cluster.get("resourceclaim", claim_name(cluster, pod))["status"]["allocation"]["devices"]["results"]
    return dict(result)


def status_devices(cluster: Cluster, pod: str) -> list[dict[str, Any]]:
    """status.devices of the pod's claim (what --claim-status writes)."""
    return list(cluster.get("resourceclaim", claim_name(cluster, pod))["status"].get("devices") or [])


def sees_only(cluster: Cluster, pod: str, chip: int) -> None:
    """The container's ASCEND_VISIBLE_DEVICES and /dev/davinciN are the chip's, and nothing else."""
    assert visible_ids(cluster, pod) == {chip}, pod
    assert dev_nodes(cluster, pod) == {chip}, pod


def test_shared_chips_are_published_with_consumable_capacity(cluster: Cluster) -> None:
    def shared() -> list[dict[str, Any]] | None:
        devices = [device_named(cluster, chip) for chip in DRA_SHARED]
        kept = [d for d in devices if d is not None and d.get("allowMultipleAllocations")]
        return kept if len(kept) == len(DRA_SHARED) else None

    # The API server kept allowMultipleAllocations: the gate is on (the daemon publishes the chips
    # exclusive until its probe says so).
    for device in wait(shared, 120, lambda: f"npu-0 and npu-1 with allowMultipleAllocations: {published(cluster)}"):
        assert device["attributes"]["shareCount"] == {"int": DRA_SHARES}
        assert "memCapacity" not in device.get("capacity", {})
        assert device["capacity"]["memory"] == {
            "value": "64Gi",
            "requestPolicy": {"default": "16Gi", "validRange": {"min": "16Gi", "max": "64Gi", "step": "16Gi"}},
        }
        assert device["capacity"]["aiCore"] == {
            "value": "20",
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "20", "step": "1"}},
        }
    others = [d for d in published(cluster) if d["attributes"]["physicalId"]["int"] not in DRA_SHARED]
    assert len(others) == 8 - len(DRA_SHARED)
    assert not [d["name"] for d in others if d.get("allowMultipleAllocations") or "shareCount" in d["attributes"]]


def test_two_claims_of_16gi_run_on_one_npu_and_a_third_beyond_what_is_left_waits(cluster: Cluster) -> None:
    with cluster.applied(claim_pods(("share-a", share(0, "16Gi")), ("share-b", share(0, "16Gi")))):
        for name in ("share-a", "share-b"):
            cluster.wait_running(name, timeout=180)
            sees_only(cluster, name, 0)
        a, b = allocation(cluster, "share-a"), allocation(cluster, "share-b")
        # One device of the node's pool, two shares of it, each consuming the 16Gi asked and the
        # default core.
        assert {(r["driver"], r["pool"], r["device"]) for r in (a, b)} == {(DRIVER, NODE, "npu-0")}
        assert a.get("shareID") and b.get("shareID") and a["shareID"] != b["shareID"], (a, b)
        for result in (a, b):
            assert result.get("consumedCapacity") == {"memory": "16Gi", "aiCore": "1"}, result
        # --claim-status: the API server took each share's status entry, under its shareID.
        for name, result in (("share-a", a), ("share-b", b)):
            status = wait(partial(status_devices, cluster, name), 60, f"{name}'s claim status")
            assert [(d["device"], d.get("shareID"), d["data"]["visibleDevices"]) for d in status] == [
                ("npu-0", result["shareID"], "0")
            ], status
        # 32Gi of chip 0 left: 48Gi does not fit until one share goes.
        with cluster.applied(claim_pods(("share-c", share(0, "48Gi")))):
            message = cluster.unschedulable("share-c").lower()
            assert "cannot allocate all claims" in message, message
            cluster.kubectl("delete", "pod", "share-a", "--wait=true", timeout=120)
            cluster.wait_running("share-c", timeout=180)
            sees_only(cluster, "share-c", 0)
            assert allocation(cluster, "share-c")["consumedCapacity"]["memory"] == "48Gi"
            sees_only(cluster, "share-b", 0)  # the other share untouched by share-a's Unprepare


def test_an_exclusive_claim_cannot_take_a_chip_that_holds_shares(cluster: Cluster) -> None:
    with cluster.applied(claim_pods(("holder", share(1, "16Gi")))):
        cluster.wait_running("holder", timeout=180)
        # A whole-NPU claim never gets a shared chip (npu.huawei.com leaves them out); a claim for all
        # of the chip's memory waits while a share of it is held, and runs once none is.
        with cluster.applied(claim_pods(("whole-1", whole_npu(1)), ("all-of-1", share(1, "64Gi")))):
            for name in ("whole-1", "all-of-1"):
                message = cluster.unschedulable(name).lower()
                assert "cannot allocate all claims" in message, message
            cluster.kubectl("delete", "pod", "holder", "--wait=true", timeout=120)
            cluster.wait_running("all-of-1", timeout=180)
            sees_only(cluster, "all-of-1", 1)
            assert cluster.pod("whole-1")["status"].get("phase") == "Pending"
            with cluster.applied(claim_pods(("late", share(1, "16Gi")))):
                cluster.unschedulable("late")


def test_device_plugin_pods_of_one_share_land_n_to_a_chip(device_plugin_node: Cluster) -> None:
    cluster = device_plugin_node
    total = str(8 * DEVICE_PLUGIN_SHARES)
    wait(lambda: allocatable(cluster) == total, 120, lambda: f"{RESOURCE} {total}, not {allocatable(cluster)}")
    names = [f"dp-{i}" for i in range(2 * DEVICE_PLUGIN_SHARES)]
    with cluster.applied(as_list(*(workload(name, limits={RESOURCE: "1"}) for name in names))):
        chips: dict[str, int] = {}
        for name in names:
            cluster.wait_running(name)
            (chips[name],) = visible_ids(cluster, name)
            sees_only(cluster, name, chips[name])
        print("pod -> chip:", json.dumps(chips))
        # pack: the chip with the fewest free shares first, the lowest id on a tie.
        assert Counter(chips.values()) == {0: DEVICE_PLUGIN_SHARES, 1: DEVICE_PLUGIN_SHARES}, chips
