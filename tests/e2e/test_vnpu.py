"""(c, issue #22) Dynamic vNPUs on the real scheduler's counters: dra mode with `--vnpu dynamic` on an
Atlas 800T A2 (eight 910B3, 20 AI cores and 7 AI CPUs each; templates vir05_1c_16g and vir10_3c_32g).
The layout follows the release (1.37: counters in their own slice; 1.34 with DRAPartitionableDevices
on: in the devices' slice). A claim for a template gets a vNPU Prepare creates, and the container sees
it; a chip's spent counters keep the next claim Pending until one goes; a whole NPU and a vNPU of the
same chip exclude each other."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import DEV_ROOT, Cluster, release, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import DRIVER, cel, claim_pods, dev_nodes, visible_ids, whole_npu

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

VNPU_CLASS = "vnpu.npu.huawei.com"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("dra", ["--fake-profile", "atlas-800t-a2", "--env", "NPU_PLUGIN_VNPU=dynamic"])


def vnpu(chip: int, template: str) -> dict[str, Any]:
    expression = (
        f'device.attributes["{DRIVER}"].physicalId == {chip} && '
        f'device.attributes["{DRIVER}"].vnpuTemplate == "{template}"'
    )
    return {"name": "npu", "exactly": {"deviceClassName": VNPU_CLASS, "selectors": cel(expression)}}


def test_slices_follow_the_release_layout(cluster: Cluster) -> None:
    def layout() -> tuple[int, int] | None:
        mine = [s for s in cluster.get("resourceslices")["items"] if s["spec"]["driver"] == DRIVER]
        counters = [s for s in mine if s["spec"].get("sharedCounters")]
        with_devices = [s for s in mine if s["spec"].get("devices")]
        return (len(counters), len(with_devices)) if counters and with_devices else None

    counters, with_devices = wait(layout, 120, "slices with shared counters and devices")
    mine = [s for s in cluster.get("resourceslices")["items"] if s["spec"]["driver"] == DRIVER]
    combined = [s for s in mine if s["spec"].get("sharedCounters") and s["spec"].get("devices")]
    if release() == "1.34":
        assert combined, "1.34 keeps the counters in the devices' slice"
    else:
        assert not combined, "from 1.35 counters sit in a slice without devices"
    assert counters >= 1 and with_devices >= 1


def test_vnpu_claim_runs_with_the_vnpu_prepare_created(cluster: Cluster) -> None:
    with cluster.applied(claim_pods(("small", vnpu(2, "vir05_1c_16g")))):
        cluster.wait_running("small", timeout=180)
        ids = visible_ids(cluster, "small")
        assert len(ids) == 1
        (vnpu_id,) = ids
        assert vnpu_id >= 100, ids  # a vNPU id, not a physical one
        # The container sees the vNPU as /dev/davinci<vNPU id>, backed by the host's vdavinci node that
        # the create made (a character device, as the runtime requires).
        assert dev_nodes(cluster, "small") == ids
        assert cluster.exec("small", "echo $ASCEND_RUNTIME_OPTIONS").strip() == "VIRTUAL"
        assert stat.S_ISCHR((Path(DEV_ROOT) / f"vdavinci{vnpu_id}").stat().st_mode)
    wait(lambda: not (Path(DEV_ROOT) / f"vdavinci{vnpu_id}").exists(), 60, f"vNPU {vnpu_id} destroyed at Unprepare")


def test_spent_counters_keep_the_next_claim_pending_and_whole_and_vnpu_exclude_each_other(cluster: Cluster) -> None:
    # Two vir10_3c_32g fill chip 0's 20 AI cores.
    with cluster.applied(claim_pods(("big-a", vnpu(0, "vir10_3c_32g")), ("big-b", vnpu(0, "vir10_3c_32g")))):
        cluster.wait_running("big-a", timeout=180)
        cluster.wait_running("big-b", timeout=180)
        assert visible_ids(cluster, "big-a").isdisjoint(visible_ids(cluster, "big-b"))
        with cluster.applied(claim_pods(("one-more", vnpu(0, "vir05_1c_16g")), ("whole-0", whole_npu(0)))):
            cluster.unschedulable("one-more")
            cluster.unschedulable("whole-0")
            cluster.kubectl("delete", "pod", "big-a", "--wait=true", timeout=120)
            cluster.wait_running("one-more", timeout=180)
            assert cluster.pod("whole-0")["status"].get("phase") == "Pending"
    # A whole NPU in use keeps its chip's vNPUs off.
    with cluster.applied(claim_pods(("whole-1", whole_npu(1)))):
        cluster.wait_running("whole-1")
        assert visible_ids(cluster, "whole-1") == {1}
        with cluster.applied(claim_pods(("vnpu-1", vnpu(1, "vir05_1c_16g")))):
            cluster.unschedulable("vnpu-1")
