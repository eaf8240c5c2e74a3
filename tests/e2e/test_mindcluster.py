"""Coming from MindCluster (issue #26) on the real cluster: what Ascend Operator and Volcano read.

- A device-plugin pod and a DRA pod each carry MindCluster's three annotations (`huawei.com/kltDev`,
  `huawei.com/AscendReal`, `ascend.kubectl.kubernetes.io/ascend-910-configuration`), the last with the
  fake NPUs' device IPs; the DRA container reads its device metadata file (KEP-5304 layout).
- With `--volcano` (the volcano kustomize component), a pod annotated as Volcano's Ascend plugin annotates
  (`huawei.com/Ascend910: Ascend910-5,Ascend910-6` and a `predicate-time`) gets exactly NPUs 5 and 6
  whatever ids the kubelet passed, and is marked used; a pod without that annotation is refused by
  Allocate and fails with the plugin's message.
- docs/mindcluster.md's node swap, both ways, with the doc's own commands: a stand-in for MindCluster's
  DaemonSet (`ascend-device-plugin-daemonset` in kube-system, node selector
  `accelerator=huawei-Ascend910`, our image in device-plugin mode: it advertises `huawei.com/Ascend910`
  and names NPUs `Ascend910-<id>` as MindCluster's plugin does) hands a running pod two NPUs; the node
  moves to npu-plugin and back while that pod keeps its NPUs and no NPU is handed twice.

The MindCluster names are written out here, not imported from the product: they are MindCluster's
contract, and a product that got one wrong must fail these tests."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import FAKE_INVENTORY, NODE, REPO, Cluster, operator_env, wait
from tests.e2e.conftest import cluster_in
from tests.e2e.workloads import (
    DRIVER,
    RESOURCE,
    allocatable,
    claim_name,
    claim_workload,
    dev_nodes,
    npu_request,
    visible_ids,
    workload,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

KLT_DEV = "huawei.com/kltDev"
ASCEND_REAL = "huawei.com/AscendReal"
CONFIGURATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
# Go's json.Marshal of MindCluster's Instance struct keeps the struct's field order.
CONFIGURATION_FIELDS = [
    "pod_name",
    "server_id",
    "host_ip",
    "super_pod_id",
    "devices",
    "rack_id",
    "server_index",
    "server_ip",
]
PREDICATE_TIME = "predicate-time"
USED = str(2**64 - 1)  # MindCluster's mark of a pod whose Volcano devices were served
METADATA_ROOT = "/var/run/dra-device-attributes"  # KEP-5304
DOC = REPO / "docs" / "mindcluster.md"
KUBELET_CHECKPOINT = Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")

# The stand-in for MindCluster's DaemonSet: its name, namespace, pod label and node selector.
MINDCLUSTER = "ascend-device-plugin-daemonset"
MINDCLUSTER_LABELS = {"name": "ascend-device-plugin-ds"}
ACCELERATOR = ("accelerator", "huawei-Ascend910")
MODE_LABEL = "npu.huawei.com/plugin-mode"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Device-plugin mode, with dra's DeviceClasses already there (up in dra first, as test_migration.py):
    the DRA tests' redeploy then leaves the shared cluster as the module found it."""
    for cluster in cluster_in("dra"):
        cluster.deploy("device-plugin")
        yield cluster


@pytest.fixture(scope="module")
def device_ips() -> dict[int, str]:
    """The device IP of each fake NPU, as the fake backend's inventory file says (every NPU has one)."""
    inventory = yaml.safe_load(FAKE_INVENTORY.read_text(encoding="utf-8"))
    ips = {int(d["physicalId"]): str(d.get("deviceIP") or "") for d in inventory["devices"]}
    assert all(ips.values()), f"the fake profile must give every NPU a device IP: {ips}"
    return ips


def deployed(cluster: Cluster, mode: str, options: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """The plugin redeployed in `mode` with `options` for a class of tests, then back as the module had it."""
    before = (cluster.mode, cluster.options)
    cluster.deploy(mode, options)
    try:
        yield cluster
    finally:
        cluster.deploy(*before)


def node_address(cluster: Cluster) -> str:
    addresses = cluster.get("node", NODE)["status"]["addresses"]
    return str(next(a["address"] for a in addresses if a["type"] == "InternalIP"))


def pod_annotations(cluster: Cluster, pod: str) -> Mapping[str, str]:
    found: Mapping[str, str] = cluster.pod(pod)["metadata"].get("annotations", {})
    return found


def mindcluster_annotations(cluster: Cluster, pod: str) -> Mapping[str, str]:
    """The pod's annotations once all three of MindCluster's are there (the plugin writes them just after
    Allocate or Prepare)."""

    def complete() -> Mapping[str, str] | None:
        found = pod_annotations(cluster, pod)
        return found if all(k in found for k in (KLT_DEV, ASCEND_REAL, CONFIGURATION)) else None

    return wait(complete, 60, lambda: f"MindCluster's annotations on pod {pod}: {dict(pod_annotations(cluster, pod))}")


def dp_ids(ids: set[int]) -> str:
    return ",".join(f"Ascend910-{i}" for i in sorted(ids))


def assert_configuration(
    cluster: Cluster, pod: str, found: Mapping[str, str], ids: set[int], device_ips: Mapping[int, str]
) -> None:
    """`ascend-910-configuration` as MindCluster writes it: compact JSON in its field order, `device_id` a
    string, the node's address as server id and host IP, -1 for the super-pod ids this hardware lacks."""
    text = found[CONFIGURATION]
    config = json.loads(text)
    assert text == json.dumps(config, separators=(",", ":")), text
    assert list(config) == CONFIGURATION_FIELDS, text
    address = node_address(cluster)
    assert (config["pod_name"], config["server_id"], config["host_ip"]) == (pod, address, address), text
    assert (config["super_pod_id"], config["rack_id"], config["server_index"], config["server_ip"]) == (-1, -1, "", "")
    assert config["devices"] == [{"device_id": str(i), "device_ip": device_ips[i]} for i in sorted(ids)], text


def test_device_plugin_pod_carries_mindclusters_annotations(cluster: Cluster, device_ips: dict[int, str]) -> None:
    wait(lambda: allocatable(cluster) == "8", 120, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
    with cluster.applied(json.dumps(workload("annotated", limits={RESOURCE: "2"}))):
        cluster.wait_running("annotated")
        ids = visible_ids(cluster, "annotated")
        assert len(ids) == 2
        found = mindcluster_annotations(cluster, "annotated")
        # Without Volcano the kubelet's ids (in the kubelet's order) are the devices served.
        assert (sorted(found[KLT_DEV].split(",")), found[ASCEND_REAL]) == (dp_ids(ids).split(","), dp_ids(ids))
        assert_configuration(cluster, "annotated", found, ids, device_ips)
        assert PREDICATE_TIME not in found


# ---- docs/mindcluster.md's node swap ----------------------------------------------------------------------


def operator(command: str) -> str:
    """One of the runbook's commands, as docs/mindcluster.md spells it (NODE for the node), run in an
    operator's shell; its output."""
    assert " ".join(command.split()) in " ".join(DOC.read_text(encoding="utf-8").split()), (
        f"docs/mindcluster.md no longer has the command {command!r}"
    )
    run = subprocess.run(
        ["sh", "-c", command.replace("NODE", NODE)],
        env=operator_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, f"{command}: {run.stderr}"
    return run.stdout


def until(command: str, done: Any, what: str, timeout: float = 180) -> None:
    """A runbook command run again until its output satisfies `done` (the doc's "until …")."""
    wait(lambda: bool(done(operator(command))), timeout, lambda: f"{what}: {operator(command)}")


def ready_pods(output: str, prefix: str) -> list[str]:
    """The pods of `kubectl get pods -o wide` output named `prefix-…` that are Running and all ready."""
    rows = [line.split() for line in output.splitlines()[1:]]
    return [
        row[0] for row in rows if row[0].startswith(prefix) and row[2] == "Running" and len(set(row[1].split("/"))) == 1
    ]


def stand_in(cluster: Cluster) -> dict[str, Any]:
    """MindCluster's DaemonSet as it sits on a MindCluster node (name, namespace, labels, node selector),
    running our image in device-plugin mode without API access (its pod template is npu-plugin's)."""
    template = cluster.get("daemonset", "-n", "npu-plugin", "npu-plugin-device-plugin")["spec"]["template"]
    spec = template["spec"]
    spec["nodeSelector"] = dict([ACCELERATOR])
    spec["serviceAccountName"] = "default"
    spec.pop("serviceAccount", None)
    spec["automountServiceAccountToken"] = False
    spec["containers"][0]["args"].append("--pod-annotations=false")
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": MINDCLUSTER, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": MINDCLUSTER_LABELS},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": MINDCLUSTER_LABELS}, "spec": spec},
        },
    }


def node_pods(cluster: Cluster, namespace: str, *, ready: bool = False) -> list[str]:
    """The pods of `namespace` on the node: all of them, or with `ready` those Ready and not leaving."""
    pods = cluster.get("pods", "-n", namespace, "--field-selector", f"spec.nodeName={NODE}")["items"]
    return [
        p["metadata"]["name"]
        for p in pods
        if not ready
        or (
            "deletionTimestamp" not in p["metadata"]
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        )
    ]


def unchanged(cluster: Cluster, pod: str, ids: set[int]) -> None:
    assert visible_ids(cluster, pod) == ids
    assert dev_nodes(cluster, pod) == ids
    assert cluster.pod(pod)["status"]["containerStatuses"][0]["restartCount"] == 0


def kubelet_entries() -> set[str]:
    """The pod UIDs the kubelet's device manager checkpoint holds devices for."""
    data = json.loads(KUBELET_CHECKPOINT.read_text(encoding="utf-8"))["Data"]
    return {str(entry["PodUID"]) for entry in data.get("PodDeviceEntries") or []}


def mindcluster_serves_the_node(cluster: Cluster, manifest: str) -> None:
    """The starting point: npu-plugin off the node, then the stand-in on it and serving all 8 NPUs."""
    cluster.kubectl("label", "node", NODE, f"{MODE_LABEL}-")
    wait(
        lambda: not node_pods(cluster, "npu-plugin"), 120, lambda: f"npu-plugin off: {node_pods(cluster, 'npu-plugin')}"
    )
    cluster.kubectl("label", "node", NODE, "=".join(ACCELERATOR), "--overwrite")
    cluster.apply(manifest)
    cluster.kubectl("-n", "kube-system", "rollout", "status", "daemonset", MINDCLUSTER, "--timeout=180s", timeout=200)
    wait(lambda: allocatable(cluster) == "8", 120, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")


def test_node_swap_runbook_both_ways_keeps_running_pods_npus(cluster: Cluster, device_ips: dict[int, str]) -> None:
    manifest = json.dumps(stand_in(cluster))
    pods = {
        name: json.dumps(workload(name, limits={RESOURCE: str(n)}))
        for name, n in (("holder", 2), ("after-swap", 6), ("one-more", 1), ("back", 6), ("all-eight", 8))
    }
    try:
        mindcluster_serves_the_node(cluster, manifest)
        cluster.apply(pods["holder"])
        cluster.wait_running("holder")
        held = visible_ids(cluster, "holder")
        assert len(held) == 2
        rest = set(range(8)) - held

        # Step 2: MindCluster's DaemonSet leaves labelled nodes (its pod rolls once).
        operator(
            """kubectl -n kube-system patch daemonset ascend-device-plugin-daemonset --type merge -p '
   {"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":
     {"nodeSelectorTerms":[{"matchExpressions":[{"key":"npu.huawei.com/plugin-mode","operator":"DoesNotExist"}]}]}}}}}}}'"""
        )
        operator("kubectl -n kube-system rollout status daemonset ascend-device-plugin-daemonset")
        unchanged(cluster, "holder", held)

        # Step 3: the node moves to npu-plugin.
        operator("kubectl cordon NODE")
        operator("kubectl label node NODE npu.huawei.com/plugin-mode=parked")
        until(
            "kubectl -n kube-system get pods -o wide --field-selector spec.nodeName=NODE",
            lambda out: "ascend-device-plugin" not in out,
            "MindCluster's pod gone from the node",
        )
        operator("kubectl label node NODE npu.huawei.com/plugin-mode=device-plugin --overwrite")
        until(
            "kubectl -n npu-plugin get pods -o wide --field-selector spec.nodeName=NODE",
            lambda out: ready_pods(out, "npu-plugin-device-plugin"),
            "npu-plugin Running and Ready on the node",
        )
        until(
            "kubectl get node NODE -o jsonpath='{.status.allocatable.huawei\\.com/Ascend910}'",
            lambda out: out.strip() == "8",
            "allocatable 8",
        )
        operator("kubectl uncordon NODE")

        # The running pod kept its NPUs; the other six go to a new pod and none is left for a seventh.
        unchanged(cluster, "holder", held)
        cluster.apply(pods["after-swap"])
        cluster.wait_running("after-swap")
        assert visible_ids(cluster, "after-swap") == rest
        assert dev_nodes(cluster, "after-swap") == rest
        cluster.apply(pods["one-more"])
        assert f"Insufficient {RESOURCE}" in cluster.unschedulable("one-more")
        cluster.delete(pods["one-more"])
        # Step 4: a new pod carries MindCluster's annotations.
        found = mindcluster_annotations(cluster, "after-swap")
        assert found[ASCEND_REAL] == dp_ids(rest)
        assert_configuration(cluster, "after-swap", found, rest, device_ips)

        # Roll back: npu-plugin → MindCluster.
        operator("kubectl cordon NODE")
        operator("kubectl label node NODE npu.huawei.com/plugin-mode=parked --overwrite")
        until(
            "kubectl -n npu-plugin get pods -o wide --field-selector spec.nodeName=NODE",
            lambda out: "npu-plugin" not in out,
            "npu-plugin's pod gone from the node",
        )
        operator("kubectl label node NODE npu.huawei.com/plugin-mode-")
        until(
            "kubectl -n kube-system get pods -o wide --field-selector spec.nodeName=NODE",
            lambda out: ready_pods(out, MINDCLUSTER),
            "MindCluster's pod Running and Ready on the node",
        )
        operator("kubectl uncordon NODE")
        unchanged(cluster, "holder", held)
        unchanged(cluster, "after-swap", rest)

        # MindCluster hands out what npu-plugin's pod held, once it is gone, and all 8 once both are.
        cluster.delete(pods["after-swap"])
        cluster.apply(pods["back"])
        cluster.wait_running("back")
        assert visible_ids(cluster, "back") == rest
        cluster.delete(pods["back"])
        cluster.delete(pods["holder"])
        cluster.apply(pods["all-eight"])
        cluster.wait_running("all-eight")
        assert visible_ids(cluster, "all-eight") == set(range(8))
        # No allocation is left in the kubelet's record but the running pod's.
        assert kubelet_entries() == {cluster.pod("all-eight")["metadata"]["uid"]}

        # When no node is left on npu-plugin, MindCluster's DaemonSet loses the affinity.
        operator(
            "kubectl -n kube-system patch daemonset ascend-device-plugin-daemonset --type json -p "
            """'[{"op":"remove","path":"/spec/template/spec/affinity"}]'"""
        )
        spec = cluster.get("daemonset", "-n", "kube-system", MINDCLUSTER)["spec"]["template"]["spec"]
        assert "affinity" not in spec
    finally:
        for manifest_of_pod in pods.values():
            cluster.delete(manifest_of_pod)
        cluster.delete(manifest)
        wait(
            lambda: not [p for p in node_pods(cluster, "kube-system") if p.startswith(MINDCLUSTER)],
            120,
            "the stand-in's pod gone",
        )
        cluster.kubectl("uncordon", NODE)
        cluster.kubectl("label", "node", NODE, f"{ACCELERATOR[0]}-", f"{MODE_LABEL}={cluster.mode}", "--overwrite")
        wait(lambda: bool(node_pods(cluster, "npu-plugin", ready=True)), 180, "npu-plugin back on the node, Ready")
        wait(lambda: allocatable(cluster) == "8", 180, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")


# ---- --volcano ------------------------------------------------------------------------------------------


@pytest.fixture(scope="class")
def volcano(cluster: Cluster) -> Iterator[Cluster]:
    """The device plugin with the volcano component: `--volcano`, and the admission policy allowing the
    used mark."""
    yield from deployed(cluster, "device-plugin", ("--component", "volcano"))


def volcano_pod(name: str, devices: str, count: int) -> dict[str, Any]:
    """A pod as Volcano's Ascend plugin leaves it on binding: its devices and the predicate time."""
    pod = workload(name, limits={RESOURCE: str(count)})
    pod["metadata"]["annotations"] = {RESOURCE: devices, PREDICATE_TIME: str(time.time_ns())}
    return pod


class TestVolcano:
    def test_pod_gets_exactly_the_npus_volcano_chose(self, volcano: Cluster, device_ips: dict[int, str]) -> None:
        cluster = volcano
        wait(lambda: allocatable(cluster) == "8", 120, lambda: f"allocatable {RESOURCE}=8, not {allocatable(cluster)}")
        with cluster.applied(json.dumps(volcano_pod("chosen", "Ascend910-5,Ascend910-6", 2))):
            cluster.wait_running("chosen")
            assert visible_ids(cluster, "chosen") == {5, 6}
            assert dev_nodes(cluster, "chosen") == {5, 6}
            found = mindcluster_annotations(cluster, "chosen")
            kubelet = set(found[KLT_DEV].split(","))
            assert len(kubelet) == 2
            assert kubelet != {"Ascend910-5", "Ascend910-6"}, "the kubelet passed 5 and 6 itself: nothing was shown"
            assert found[ASCEND_REAL] == "Ascend910-5,Ascend910-6"
            assert found[PREDICATE_TIME] == USED
            assert found[RESOURCE] == "Ascend910-5,Ascend910-6"
            assert_configuration(cluster, "chosen", found, {5, 6}, device_ips)

    def test_pod_volcano_did_not_schedule_is_refused_with_the_allocate_error(self, volcano: Cluster) -> None:
        cluster = volcano
        expected = f"--volcano: no pod on node {NODE} waits for 1 device(s)"
        with cluster.applied(json.dumps(workload("not-volcanos", limits={RESOURCE: "1"}))):

            def failed() -> Mapping[str, Any] | None:
                status: Mapping[str, Any] = cluster.pod("not-volcanos")["status"]
                assert status.get("phase") != "Running", f"the pod runs: {cluster.describe('not-volcanos')}"
                return status if status.get("phase") == "Failed" else None

            status = wait(failed, 90, lambda: f"pod not-volcanos Failed: {cluster.describe('not-volcanos')}")
            assert status.get("reason") == "UnexpectedAdmissionError", status
            assert expected in status.get("message", ""), status
            events = cluster.get("events", "--field-selector", "involvedObject.name=not-volcanos")["items"]
            assert any(expected in e.get("message", "") for e in events), [e.get("message") for e in events]
            assert not any(k in pod_annotations(cluster, "not-volcanos") for k in (KLT_DEV, ASCEND_REAL, CONFIGURATION))


# ---- DRA ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="class")
def dra(cluster: Cluster) -> Iterator[Cluster]:
    yield from deployed(cluster, "dra")


class TestDra:
    def test_claim_pod_carries_mindclusters_annotations(self, dra: Cluster, device_ips: dict[int, str]) -> None:
        cluster = dra
        with cluster.applied(claim_workload("dra-annotated", [npu_request(count=2)])):
            cluster.wait_running("dra-annotated")
            ids = visible_ids(cluster, "dra-annotated")
            assert len(ids) == 2
            found = mindcluster_annotations(cluster, "dra-annotated")
            assert (found[KLT_DEV], found[ASCEND_REAL]) == (dp_ids(ids), dp_ids(ids))
            assert_configuration(cluster, "dra-annotated", found, ids, device_ips)

    def test_container_reads_its_device_metadata_file(self, dra: Cluster, device_ips: dict[int, str]) -> None:
        cluster = dra
        with cluster.applied(claim_workload("dra-metadata", [npu_request(count=2)])):
            cluster.wait_running("dra-metadata")
            ids = visible_ids(cluster, "dra-metadata")
            assert len(ids) == 2
            claim = claim_name(cluster, "dra-metadata")
            path = f"{METADATA_ROOT}/{claim}/npu/{DRIVER}-metadata.json"
            metadata = json.loads(cluster.exec("dra-metadata", f"cat {path}"))
            assert (metadata["apiVersion"], metadata["kind"]) == ("metadata.resource.k8s.io/v1alpha1", "DeviceMetadata")
            assert (metadata["metadata"]["name"], metadata["metadata"]["namespace"]) == (claim, "default")
            (request,) = metadata["requests"]
            assert request["name"] == "npu"
            devices = {d["name"]: d for d in request["devices"]}
            assert set(devices) == {f"npu-{i}" for i in ids}, metadata
            for i in ids:
                device = devices[f"npu-{i}"]
                assert device["driver"] == DRIVER
                assert device["attributes"]["physicalId"] == {"int": i}
                assert device["attributes"]["deviceIP"] == {"string": device_ips[i]}, device
