"""Issue #23 on the real cluster (dra mode, `--claim-status` on through its environment twin): an NPU the
fake backend turns unhealthy is tainted `npu.huawei.com/health` in the slice, the real scheduler keeps a
normal claim off it and gives it to a claim that tolerates the taint, and it comes back when it recovers;
`kubectl get resourceclaim -o yaml` shows the device status the plugin writes; the kubelet streams the
devices' health (dra-health v1 on 1.37, v1alpha1 on 1.34) into the pod's `allocatedResourcesStatus`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import STATE, Cluster, release, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import (
    DRIVER,
    as_list,
    cel,
    claim_workload,
    dev_nodes,
    device_named,
    npu_request,
    set_health,
    visible_ids,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

HEALTH_TAINT = "npu.huawei.com/health"
SICK = 7
KUBELET_LOG = STATE / "logs" / "kubelet.log"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from cluster_in("dra", ["--env", "NPU_PLUGIN_CLAIM_STATUS=true"])


def taints(cluster: Cluster, npu: int) -> dict[str, dict[str, Any]]:
    device = device_named(cluster, npu) or {}
    return {t["key"]: t for t in device.get("taints", [])}


def only(npu: int) -> list[dict[str, Any]]:
    return cel(f'device.attributes["{DRIVER}"].physicalId == {npu}')


def claim_health(cluster: Cluster, pod: str) -> list[tuple[str, str]]:
    """(health, message) of each device of the pod's claims as the kubelet put it in the pod's status
    (allocatedResourcesStatus, fed by the plugin's health stream; each device is named by its CDI id)."""
    return [
        (str(resource["health"]), str(resource.get("message", "")))
        for status in cluster.pod(pod)["status"].get("containerStatuses", [])
        for allocated in status.get("allocatedResourcesStatus") or []
        if allocated["name"].startswith("claim:")
        for resource in allocated.get("resources") or []
    ]


def test_unhealthy_npu_is_tainted_avoided_and_taken_only_by_a_claim_that_tolerates_it(cluster: Cluster) -> None:
    wait(lambda: device_named(cluster, SICK), 60, f"NPU {SICK} in the slice")
    tolerate = npu_request(
        selectors=only(SICK), tolerations=[{"key": HEALTH_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    )
    try:
        set_health(SICK, "Alarm", ["0x80E01801"])
        health = wait(lambda: taints(cluster, SICK).get(HEALTH_TAINT), 60, f"{HEALTH_TAINT} on NPU {SICK}")
        assert (health["value"], health["effect"]) == ("Alarm", "NoSchedule")
        fault = taints(cluster, SICK).get("npu.huawei.com/fault")
        if release() == "1.34":
            # The fault taint's effect is None, which 1.34 does not know: left out (docs/reference.md).
            assert fault is None, fault
        else:
            assert fault is not None and fault["value"] == "80E01801", taints(cluster, SICK)
        with cluster.applied(claim_workload("avoid", [npu_request(selectors=only(SICK))])):
            message = cluster.unschedulable("avoid").lower()
            assert "resourceclaim" in message or "cannot allocate" in message, message
            with cluster.applied(tolerating_workload(tolerate)):
                cluster.wait_running("tolerate")
                assert visible_ids(cluster, "tolerate") == {SICK}
                assert dev_nodes(cluster, "tolerate") == {SICK}
                # The health stream: the kubelet reports the device unhealthy in the pod's status (1.34's has
                # no message field).
                sick = ("Unhealthy", "" if release() == "1.34" else "910 health Alarm")
                wait(
                    lambda: claim_health(cluster, "tolerate") == [sick],
                    60,
                    lambda: f"NPU {SICK} Unhealthy in allocatedResourcesStatus: {claim_health(cluster, 'tolerate')}",
                )
                set_health(SICK, "OK")
                wait(lambda: HEALTH_TAINT not in taints(cluster, SICK), 60, f"{HEALTH_TAINT} gone from NPU {SICK}")
                wait(
                    lambda: [h for h, _ in claim_health(cluster, "tolerate")] == ["Healthy"],
                    60,
                    lambda: f"NPU {SICK} Healthy in allocatedResourcesStatus: {claim_health(cluster, 'tolerate')}",
                )
                assert cluster.pod("avoid")["status"].get("phase") == "Pending"
            # Recovered and free again: the waiting normal claim gets it.
            cluster.wait_running("avoid")
            assert visible_ids(cluster, "avoid") == {SICK}
    finally:
        set_health(SICK, "OK")


def tolerating_workload(request: dict[str, Any]) -> str:
    """The pod "tolerate" and its claim. The 1.34 kubelet finds a container's claim for its health by the
    pod's own name for it, so it reports none for a claim made from a template (kubernetes#134482, fixed in
    1.35 by #134875): there the claim is standalone, and the pod calls it by its name."""
    if release() == "1.34":
        return claim_and_pod("tolerate", request, local="tolerate")
    return claim_workload("tolerate", [request])


def claim_and_pod(name: str, request: dict[str, Any] | None = None, local: str = "npu") -> str:
    """A standalone ResourceClaim (it outlives the pod, so its status after Unprepare can be read) and a
    pod using it, which calls it `local`."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request or npu_request()]}},
    }
    pod = workload(name)
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": local}]}
    pod["spec"]["resourceClaims"] = [{"name": local, "resourceClaimName": name}]
    return as_list(claim, pod)


def status_devices(cluster: Cluster, claim: str) -> list[dict[str, Any]]:
    """status.devices as `kubectl get resourceclaim -o yaml` prints it."""
    claimed = yaml.safe_load(cluster.kubectl("get", "resourceclaim", claim, "-o", "yaml"))
    return list(claimed.get("status", {}).get("devices") or [])


def test_claim_status_shows_the_prepared_device_and_goes_at_unprepare(cluster: Cluster) -> None:
    with cluster.applied(claim_and_pod("with-status")):
        cluster.wait_running("with-status")
        (npu,) = visible_ids(cluster, "with-status")
        (entry,) = wait(lambda: status_devices(cluster, "with-status"), 60, "status.devices of claim with-status")
        (result,) = cluster.get("resourceclaim", "with-status")["status"]["allocation"]["devices"]["results"]
        assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, result["pool"], result["device"])
        data = dict(entry["data"])
        assert (data.pop("physicalId"), data.pop("visibleDevices")) == (npu, str(npu)), entry
        # The rest is the chip's network identity, as its slice attributes say.
        attributes = (device_named(cluster, npu) or {})["attributes"]
        assert data == {name: next(iter(attributes[name].values())) for name in data}, (data, attributes)
        (ready,) = entry["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
        cluster.kubectl("delete", "pod", "with-status", "--wait=true", timeout=120)
        wait(lambda: not status_devices(cluster, "with-status"), 60, "status.devices removed at Unprepare")


def health_streams(log: str) -> list[dict[str, str]]:
    """The kubelet's "Starting WatchResources stream" lines for our driver, as key=value maps (klog's
    text form; scripts/cluster runs the kubelet with dra_plugin.go at verbosity 4, where it names the
    health service it calls)."""
    lines = [line for line in log.splitlines() if '"Starting WatchResources stream"' in line]
    found = [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in lines]
    return [f for f in found if f.get("driverName") == DRIVER]


@pytest.mark.skipif(release() != "1.37", reason="dra-health v1 is served to kubelets from 1.37")
def test_kubelet_streams_health_from_the_plugin_over_v1(cluster: Cluster) -> None:
    """The kubelet's own log names the health service it opened the stream on: v1 (which 1.37 prefers
    when the plugin advertises it) rather than v1alpha1; the pod status of the first test shows the
    stream's content reaching the pods."""
    streams = wait(
        lambda: health_streams(KUBELET_LOG.read_text(encoding="utf-8")), 60, f"a health stream in {KUBELET_LOG}"
    )
    assert {s.get("healthService") for s in streams} == {"v1.DRAResourceHealth"}, json.dumps(streams)
    assert "Successfully started WatchResources health stream" in KUBELET_LOG.read_text(encoding="utf-8")
