"""`npu-plugin plan` against cluster states served by the fake API server over real HTTP: each case
asserts the node verdicts, their reasons and steps, and the findings; every request is a GET."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.kubeapi.client import KubeClient, connect
from npu_plugin.plan.planner import Finding, NodePlan, Plan, make_plan
from npu_plugin.plan.read import PAGE_SIZE, read_snapshot
from tests.support.fakeapi import FakeKubeAPI
from tests.support.plan_cluster import (
    DRIVER,
    MODE_LABEL,
    NPU,
    budget,
    claim,
    daemonset,
    device_class,
    node,
    npu_pod,
    plant,
    plugin_pod,
    quota,
    resource_slice,
)

DAEMONSETS = [daemonset("device-plugin"), daemonset("dra"), daemonset("both")]
MAPPING = device_class("ascend910.extended.npu.huawei.com", NPU)
VNPU = "huawei.com/Ascend910-5c.1cpu.16g"


def wait(name: str, target: str = "dra") -> str:
    if target == "device-plugin":
        check = (
            f'kubectl get node {name} -o jsonpath="{{.status.allocatable}}" | grep -Eq "huawei.com/[^\\"]*\\":\\"[1-9]"'
        )
    else:
        selector = f"spec.nodeName={name},spec.driver={DRIVER}"
        check = f"kubectl get resourceslices --field-selector {selector} -o name | grep -q ."
    return f"timeout 300 sh -c 'until {check}; do sleep 2; done'"


def steps(name: str, target: str = "dra", evicts: str = "", cordon: bool = True) -> tuple[str, ...]:
    drain = [f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data  # evicts {evicts}"] if evicts else []
    label = f"kubectl label node {name} {MODE_LABEL}={target} --overwrite"
    if not cordon:
        return (*drain, label, wait(name, target))
    return (f"kubectl cordon {name}", *drain, label, wait(name, target), f"kubectl uncordon {name}")


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(kubernetes_minor=36) as server:
        yield server


def plan_of(api: FakeKubeAPI, tmp_path: Path, target: str = "dra", nodes: Sequence[str] = ()) -> Plan:
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    client = KubeClient(connect(kubeconfig, {}))
    try:
        snapshot = read_snapshot(client, DRIVER)
    finally:
        client.close()
    assert {r.method for r in api.requests} == {"GET"}, "plan wrote something"
    return make_plan(snapshot, target, nodes)


def only(plan: Plan, name: str) -> NodePlan:
    return next(n for n in plan.nodes if n.name == name)


def kinds(plan: Plan, severity: str | None = None) -> list[str]:
    return [f.kind for f in plan.findings if severity is None or f.severity == severity]


def finding(plan: Plan, kind: str) -> Finding:
    return next(f for f in plan.findings if f.kind == kind)


@dataclass(frozen=True)
class Case:
    """A cluster state, the node asked about and what plan must say of it."""

    id: str
    state: Mapping[str, list[dict[str, Any]]]
    name: str
    verdict: str
    reasons: tuple[str, ...]
    steps: tuple[str, ...]
    target: str = "dra"
    minor: int = 36
    findings: Mapping[str, str] = field(default_factory=dict)  # kind -> a part of its message


BUSY = node("busy", capacity={NPU: "8"})
TRAIN = npu_pod("train-7d9f8b6c5-abcde", "busy", {NPU: "8"})
MUST_MOVE = "1 pod(s) hold NPUs the dra mode does not see and must move: ml/train-7d9f8b6c5-abcde"

CASES = [
    Case(
        "idle device-plugin node",
        {"nodes": [node("idle", capacity={NPU: "8"})], "daemonsets": DAEMONSETS},
        "idle",
        "ready",
        ("no NPU pod has to move",),
        steps("idle"),
    ),
    Case(
        "busy node whose PodDisruptionBudget blocks the drain",
        {"nodes": [BUSY], "daemonsets": DAEMONSETS, "pods": [TRAIN], "budgets": [budget("train", {"app": "train"}, 0)]},
        "busy",
        "blocked",
        (
            "PodDisruptionBudget ml/train allows 0 disruption(s) now and this node's pods "
            "ml/train-7d9f8b6c5-abcde need 1",
            MUST_MOVE,
        ),
        steps("busy", evicts="ml/train-7d9f8b6c5-abcde"),
        findings={
            "needs-migrate": "kubectl get -n ml deployment/train -o yaml | npu-plugin migrate -f - "
            f"--resource-name {NPU} -o ml-train.dra.yaml"
        },
    ),
    Case(
        "busy node whose PodDisruptionBudget allows the drain",
        {"nodes": [BUSY], "daemonsets": DAEMONSETS, "pods": [TRAIN], "budgets": [budget("train", {"app": "train"}, 1)]},
        "busy",
        "ready-after-drain",
        (MUST_MOVE,),
        steps("busy", evicts="ml/train-7d9f8b6c5-abcde"),
    ),
    Case(
        "a node already on DRA",
        {
            "nodes": [node("on-dra", "dra")],
            "daemonsets": DAEMONSETS,
            "pods": [plugin_pod("on-dra", "dra")],
            "slices": [resource_slice("on-dra")],
        },
        "on-dra",
        "ready",
        ("already in dra mode",),
        (),
    ),
    Case(
        "a node on DRA still settling: plugin pod not ready, pool incomplete",
        {
            "nodes": [node("settling", "dra")],
            "daemonsets": DAEMONSETS,
            "pods": [plugin_pod("settling", "dra", ready=False)],
            "slices": [resource_slice("settling", slices=2)],
        },
        "settling",
        "ready",
        (
            "already in dra mode",
            "npu-plugin pod npu-plugin/npu-plugin-dra-settling is not ready",
            "its pool is incomplete: 1 of 2 ResourceSlices published",
        ),
        (),
    ),
    Case(
        "both mode to dra: the device plugin's pods must move",
        {
            "nodes": [node("split", "both", {NPU: "4"})],
            "daemonsets": DAEMONSETS,
            "slices": [resource_slice("split", 4)],
            "pods": [npu_pod("infer-7d9f8b6c5-x", "split", {NPU: "2"}, deployment="infer")],
        },
        "split",
        "ready-after-drain",
        ("1 pod(s) hold NPUs the dra mode does not see and must move: ml/infer-7d9f8b6c5-x",),
        steps("split", evicts="ml/infer-7d9f8b6c5-x"),
        findings={"both-split": f"device plugin advertises {NPU}=4, DRA publishes 4 device(s)"},
    ),
    Case(
        "device-plugin to both: nothing moves",
        {
            "nodes": [BUSY],
            "daemonsets": DAEMONSETS,
            "pods": [TRAIN],
            "budgets": [budget("train", {"app": "train"}, 0)],
        },
        "busy",
        "ready",
        (
            "its NPU pods can stay",
            "1 NPU pod(s) keep their devices: each device moves to DRA once released",
            "both mode gives DRA the devices of dra-devices in manifests/base/kustomization.yaml",
        ),
        steps("busy", "both", cordon=False),
        target="both",
    ),
    Case(
        "a mapping class on a device-plugin node (1.36: served unchanged)",
        {"nodes": [BUSY], "daemonsets": DAEMONSETS, "pods": [TRAIN], "classes": [MAPPING]},
        "busy",
        "ready-after-drain",
        (MUST_MOVE,),
        steps("busy", evicts="ml/train-7d9f8b6c5-abcde"),
        findings={
            "dual-advertisement": f"node busy advertises {NPU} through the device plugin (8) while DeviceClass "
            "ascend910.extended.npu.huawei.com maps the same name",
            "served-unchanged": "ml/deployment/train asks huawei.com/Ascend910: served unchanged on DRA nodes",
            "version-floor": "DRAExtendedResource on the API server and scheduler: on by default in 1.36 (beta), "
            "inferred: gates are not readable",
        },
    ),
    Case(
        "a mapping class on 1.35: the gate is off, the workload needs migrate",
        {
            "nodes": [node("old-gate", capacity={NPU: "8"}, kubelet="v1.35.1")],
            "daemonsets": DAEMONSETS,
            "pods": [npu_pod("train-7d9f8b6c5-q", "old-gate")],
            "classes": [MAPPING],
        },
        "old-gate",
        "ready-after-drain",
        ("1 pod(s) hold NPUs the dra mode does not see and must move: ml/train-7d9f8b6c5-q",),
        steps("old-gate", evicts="ml/train-7d9f8b6c5-q"),
        minor=35,
        findings={
            "version-floor": "off by default in 1.35 (alpha), inferred: gates are not readable; enable it with "
            "--feature-gates=DRAExtendedResource=true",
            "needs-migrate": "ml/deployment/train asks huawei.com/Ascend910 and needs migrate",
        },
    ),
    Case(
        "an old kubelet",
        {"nodes": [node("old", capacity={NPU: "8"}, kubelet="v1.33.4")], "daemonsets": DAEMONSETS},
        "old",
        "blocked",
        (
            "kubelet 1.33 is older than 1.34, the first release serving resource.k8s.io/v1 to DRA drivers: "
            "upgrade the kubelet first",
        ),
        steps("old"),
    ),
    Case(
        "a second driver publishing our devices",
        {
            "nodes": [node("shared", capacity={NPU: "8"})],
            "daemonsets": DAEMONSETS,
            "slices": [resource_slice("shared", driver="ascend.example.com", attributes_domain=DRIVER)],
        },
        "shared",
        "blocked",
        ("another publisher of npu.huawei.com devices runs here (driver ascend.example.com)",),
        steps("shared"),
        findings={"second-driver": "publishes npu.huawei.com devices from driver ascend.example.com"},
    ),
    Case(
        "Volcano pods",
        {
            "nodes": [node("vc", capacity={NPU: "8"})],
            "daemonsets": DAEMONSETS,
            "pods": [
                npu_pod(
                    "pt-worker-0",
                    "vc",
                    {NPU: "8"},
                    owner=("batch.volcano.sh/v1alpha1", "Job", "pt"),
                    scheduler="volcano",
                )
            ],
        },
        "vc",
        "ready-after-drain",
        ("1 pod(s) hold NPUs the dra mode does not see and must move: ml/pt-worker-0",),
        steps("vc", evicts="ml/pt-worker-0"),
        findings={
            "scheduler": "1 NPU pod(s) use scheduler volcano: Volcano allocates resource claims only with its DRA "
            "plugin enabled",
            "needs-migrate": "kubectl get -n ml job.batch.volcano.sh/pt -o yaml | npu-plugin migrate -f -",
        },
    ),
    Case(
        "quota on huawei.com resources",
        {
            "nodes": [node("q", capacity={NPU: "8"})],
            "daemonsets": DAEMONSETS,
            "quotas": [quota("npus", {f"requests.{NPU}": "16", "pods": "100"})],
        },
        "q",
        "ready",
        ("no NPU pod has to move",),
        steps("q"),
        findings={
            "quota": f"ResourceQuota ml/npus limits requests.{NPU}=16: pods served by DRA through a "
            "DeviceClass extendedResourceName still count against it"
        },
    ),
    Case(
        "a vNPU node (device-plugin vNPUs, dynamic vNPUs on 1.35)",
        {
            "nodes": [node("vn", capacity={VNPU: "4"}, kubelet="v1.35.0")],
            "daemonsets": [daemonset("device-plugin", "--vnpu=static"), daemonset("dra", "--vnpu=dynamic")],
            "pods": [npu_pod("small-7d9f8b6c5-a", "vn", {VNPU: "1"}, deployment="small")],
        },
        "vn",
        "ready-after-drain",
        ("1 pod(s) hold NPUs the dra mode does not see and must move: ml/small-7d9f8b6c5-a",),
        steps("vn", evicts="ml/small-7d9f8b6c5-a"),
        minor=35,
        findings={
            "version-floor": "dynamic vNPUs (partitionable devices) (a DaemonSet runs --vnpu dynamic) needs "
            "DRAPartitionableDevices on the API server and scheduler: off by default in 1.35 (alpha), inferred",
            "needs-migrate": f"{VNPU} has no shipped DeviceClass",
        },
    ),
    Case(
        "no DaemonSet serves the target mode",
        {"nodes": [node("lonely", capacity={NPU: "8"})], "daemonsets": [daemonset("device-plugin")]},
        "lonely",
        "blocked",
        (
            f"no npu-plugin DaemonSet runs --mode dra on nodes labelled {MODE_LABEL}=dra: "
            "kubectl apply -k manifests/overlays/dra",
        ),
        steps("lonely"),
    ),
    Case(
        "a pod with no controller and a DaemonSet's NPU pod",
        {
            "nodes": [BUSY],
            "daemonsets": DAEMONSETS,
            "pods": [
                npu_pod("scratch", "busy", deployment=None),
                npu_pod("agent-x", "busy", owner=("apps/v1", "DaemonSet", "agent")),
            ],
        },
        "busy",
        "blocked",
        (
            "pod ml/agent-x of DaemonSet agent holds NPUs and a drain leaves DaemonSet pods; keep that DaemonSet "
            "off this node first",
            "pod ml/scratch has no controller: a drain deletes it for good; move it first",
            "2 pod(s) hold NPUs the dra mode does not see and must move: ml/agent-x, ml/scratch",
        ),
        steps("busy", evicts="ml/scratch"),
    ),
    Case(
        "dra back to device-plugin: pods holding claims move",
        {
            "nodes": [node("back", "dra")],
            "daemonsets": DAEMONSETS,
            "slices": [resource_slice("back")],
            "pods": [npu_pod("job-7d9f8b6c5-z", "back", {}, deployment="job", claims=("job-npu",))],
            "claims": [claim("job-npu", "back", pod="job-7d9f8b6c5-z")],
        },
        "back",
        "ready-after-drain",
        ("1 pod(s) hold NPUs the device-plugin mode does not see and must move: ml/job-7d9f8b6c5-z",),
        steps("back", "device-plugin", evicts="ml/job-7d9f8b6c5-z"),
        target="device-plugin",
    ),
    Case(
        "a node that is not Ready and cordoned",
        {"nodes": [node("down", capacity={NPU: "8"}, ready=False, unschedulable=True)], "daemonsets": DAEMONSETS},
        "down",
        "blocked",
        (
            "the node is not Ready: the plugin cannot start there",
            "the node is cordoned already: the steps leave it cordoned",
        ),
        steps("down", cordon=False),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_of_a_cluster_state(case: Case, tmp_path: Path) -> None:
    with FakeKubeAPI(kubernetes_minor=case.minor) as api:
        plant(api, case.state)
        plan = plan_of(api, tmp_path, case.target)
    found = only(plan, case.name)
    assert (found.verdict, found.reasons, found.steps) == (case.verdict, case.reasons, case.steps)
    for kind, part in case.findings.items():
        messages = [f.message for f in plan.findings if f.kind == kind]
        assert any(part in m for m in messages), (kind, messages)
    assert plan.ready == (case.verdict == "ready" and "second-driver" not in case.findings)


def test_order_idle_first_then_drainable_then_blocked_vnpu_last(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(
        api,
        {
            "nodes": [
                node("a-vnpu", capacity={VNPU: "4"}),
                node("b-blocked", capacity={NPU: "8"}),
                node("c-drain", capacity={NPU: "8"}),
                node("d-idle", capacity={NPU: "8"}),
                node("e-cpu-only", None),
            ],
            "daemonsets": DAEMONSETS,
            "pods": [
                npu_pod("x-7d9f8b6c5-1", "b-blocked", deployment="x"),
                npu_pod("y-7d9f8b6c5-1", "c-drain", deployment="y"),
            ],
            "budgets": [budget("x", {"app": "x"}, 0)],
        },
    )
    plan = plan_of(api, tmp_path)
    assert [(n.name, n.verdict) for n in plan.nodes] == [
        ("d-idle", "ready"),
        ("c-drain", "ready-after-drain"),
        ("b-blocked", "blocked"),
        ("a-vnpu", "ready"),
    ]
    assert not plan.ready


def test_lists_are_paginated_one_list_per_kind_and_nothing_per_node(api: FakeKubeAPI, tmp_path: Path) -> None:
    count = 2 * PAGE_SIZE + 7
    plant(api, {"nodes": [node(f"n{i:04}", capacity={NPU: "8"}) for i in range(3)], "daemonsets": DAEMONSETS})
    for index in range(count):
        api.put_object("Pod", npu_pod(f"p-{index:05}", f"n{index % 3:04}"))
    api.clear_requests()
    plan = plan_of(api, tmp_path)
    assert sum(len(n.pods) for n in plan.nodes) == count
    counts = api.request_counts()
    assert counts.pop("list /api/v1/pods") == 3
    assert counts.pop("get /version") == 1
    assert counts.pop("get /apis") == 1
    assert set(counts.values()) == {1} and all(key.startswith("list ") for key in counts)
    pages = [r for r in api.requests if r.path == "/api/v1/pods"]
    assert [r.query.get("limit") for r in pages] == [str(PAGE_SIZE)] * 3
    assert "continue" not in pages[0].query and all(r.query["continue"] for r in pages[1:])


def test_a_forbidden_kind_is_named_and_the_rest_is_planned(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(
        api,
        {
            "nodes": [node("n1", capacity={NPU: "8"})],
            "daemonsets": DAEMONSETS,
            "quotas": [quota("q", {f"requests.{NPU}": "1"})],
        },
    )
    api.forbid("list", "pods")
    api.forbid("list", "poddisruptionbudgets")
    plan = plan_of(api, tmp_path)
    unreadable = [f for f in plan.findings if f.kind == "unreadable"]
    assert [(f.severity, f.objects) for f in unreadable] == [("error", ("pods",)), ("error", ("poddisruptionbudgets",))]
    assert unreadable[0].message.startswith(
        'cannot list pods: forbidden, the credentials lack verb list on pods in API group ""; not made: '
    )
    assert "quota" in kinds(plan)  # what could be read is still used
    assert only(plan, "n1").verdict == "blocked"
    assert "pods could not be read: the NPU pods on this node are unknown" in only(plan, "n1").reasons
    assert not plan.ready


def test_an_object_of_unexpected_shape_is_skipped_and_named(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("n1", capacity={NPU: "8"})], "daemonsets": DAEMONSETS})
    bad = npu_pod("odd", "n1")
    bad["spec"]["containers"][0]["resources"]["limits"][NPU] = "lots"
    api.put_object("Pod", bad)
    api.put_object("PodDisruptionBudget", {"metadata": {"name": "pdb", "namespace": "ml"}, "spec": {"selector": []}})
    plan = plan_of(api, tmp_path)
    assert [f.message for f in plan.findings if f.kind == "malformed"] == [
        "skipped Pod ml/odd: spec.containers[0].resources.limits[huawei.com/Ascend910] is not a whole number "
        "(got 'lots')",
        "skipped PodDisruptionBudget ml/pdb: spec.selector is not an object",
    ]
    assert only(plan, "n1").verdict == "ready"


def test_nodes_without_npus_are_left_out_unless_named(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("gpu", None), node("npu", capacity={NPU: "8"})], "daemonsets": DAEMONSETS})
    assert [n.name for n in plan_of(api, tmp_path).nodes] == ["npu"]
    named = plan_of(api, tmp_path, nodes=["gpu"])
    assert [(n.name, n.mode, n.verdict) for n in named.nodes] == [("gpu", "none", "ready")]


def test_an_api_server_without_resource_k8s_io_v1_blocks_dra(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("n1", capacity={NPU: "8"})], "daemonsets": DAEMONSETS})
    api.answer_next(1, "GET /apis", body=b'{"kind": "APIGroupList", "apiVersion": "v1", "groups": []}')
    found = only(plan_of(api, tmp_path), "n1")
    assert found.verdict == "blocked"
    assert "the API server does not serve resource.k8s.io/v1 (Kubernetes 1.34+): upgrade it first" in found.reasons
