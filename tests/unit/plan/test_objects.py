"""API objects to plan's records: what is read, what is left out, and one line naming the object and
field for a shape that cannot be read."""

from __future__ import annotations

from typing import Any

import pytest

from npu_plugin.plan import objects
from npu_plugin.plan.objects import ShapeError
from npu_plugin.plan.snapshot import Owner, Requirement
from tests.support.plan_cluster import (
    DRIVER,
    NPU,
    budget,
    daemonset,
    device_class,
    node,
    npu_pod,
    quota,
    resource_slice,
)


def test_a_node_keeps_its_mode_kubelet_readiness_and_npu_capacity() -> None:
    read = objects.node_of(node("n1", "both", {NPU: "8", "huawei.com/Ascend310P": "0"}, kubelet="v1.35.2-eks"))
    assert (read.name, read.mode, read.kubelet, read.ready, read.unschedulable) == ("n1", "both", (1, 35), True, False)
    assert read.capacity == ((NPU, 8),)


@pytest.mark.parametrize(
    ("args", "mode", "vnpu", "policy"),
    [
        (["serve", "--mode=dra", "--vnpu", "dynamic"], "dra", "dynamic", "remove"),
        (["--mode", "both", "--unhealthy-policy=taint"], "both", "off", "taint"),
        ([], "device-plugin", "off", "remove"),
    ],
)
def test_a_daemonset_is_read_from_its_serve_flags(args: list[str], mode: str, vnpu: str, policy: str) -> None:
    body = daemonset("x")
    body["spec"]["template"]["spec"]["containers"][0]["args"] = args
    read = objects.daemonset_of(body)
    assert read is not None and (read.mode, read.vnpu, read.unhealthy_policy, read.selected_mode) == (
        mode,
        vnpu,
        policy,
        "x",
    )


def test_other_daemonsets_are_left_out() -> None:
    body = daemonset("dra")
    body["metadata"]["labels"] = {}
    assert objects.daemonset_of(body) is None


def test_a_pod_sums_its_containers_and_names_its_deployment() -> None:
    body = npu_pod("train-7d9f8b6c5-a", "n1", {NPU: "2"})
    body["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {NPU: "1"}}}]
    read = objects.pod_of(body)
    assert read is not None
    assert (read.resources, read.owner, read.scheduler, read.placed_by_name) == (
        ((NPU, 3),),
        Owner("Deployment", "train", "apps"),
        "default-scheduler",
        False,
    )


@pytest.mark.parametrize(
    "body",
    [
        npu_pod("cpu", "n1", {}),
        npu_pod("done", "n1", phase="Succeeded"),
        npu_pod("failed", "n1", phase="Failed"),
    ],
    ids=["no NPU", "succeeded", "failed"],
)
def test_pods_without_npus_or_finished_are_left_out(body: dict[str, Any]) -> None:
    assert objects.pod_of(body) is None


def test_a_pod_placed_by_node_name_and_its_claims() -> None:
    body = npu_pod("p", "n1", {}, claims=("c1",), scheduled=False)
    body["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "p-extended-resources-x"}
    read = objects.pod_of(body)
    assert read is not None and read.placed_by_name and read.claims == ("c1", "p-extended-resources-x")


def test_slices_count_vnpus_taints_counters_and_foreign_attributes() -> None:
    ours = resource_slice("n1", 2, vnpu=True)
    ours["spec"]["devices"][0]["taints"] = [{"key": "npu.huawei.com/unhealthy", "effect": "NoSchedule"}]
    ours["spec"]["devices"][1]["consumesCounters"] = [{"counterSet": "npu-0", "counters": {}}]
    read = objects.slice_of(ours, DRIVER)
    assert (read.devices, read.vnpus, read.taints, read.counters, read.foreign_attributes) == (2, 2, 1, True, False)
    other = objects.slice_of(resource_slice("n1", driver="gpu.example.com", attributes_domain=DRIVER), DRIVER)
    assert other.foreign_attributes and other.vnpus == 0


@pytest.mark.parametrize(
    ("expression", "ours"),
    [
        (f'device.driver == "{DRIVER}"', True),
        (f'device.attributes["{DRIVER}"].vnpuTemplate == "vir05_1c_16g"', True),
        ('device.driver == "gpu.example.com"', False),
    ],
)
def test_device_classes(expression: str, ours: bool) -> None:
    read = objects.device_class_of(device_class("c", NPU, expression), DRIVER)
    assert (read.ours, read.extended_resource) == (ours, NPU)


def test_budgets_and_quotas() -> None:
    body = budget("b", {"app": "x"}, 2)
    body["spec"]["selector"]["matchExpressions"] = [{"key": "tier", "operator": "Exists"}]
    read = objects.budget_of(body)
    assert read.selector == (Requirement("app", "In", ("x",)), Requirement("tier", "Exists", ()))
    assert read.disruptions_allowed == 2
    assert objects.budget_of({"metadata": {"name": "none", "namespace": "ml"}, "spec": {}}).selector is None
    assert objects.quota_of(quota("q", {"pods": "10"})) is None
    found = objects.quota_of(quota("q", {"pods": "10", f"requests.{NPU}": "4"}))
    assert found is not None and found.hard == ((f"requests.{NPU}", "4"),)


def _with(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    current = body
    for part in parents:
        current = current[int(part)] if isinstance(current, list) else current.setdefault(part, {})
    current[last] = value
    return body


@pytest.mark.parametrize(
    ("read", "body", "message"),
    [
        (objects.node_of, "node", "a Node that is not an object"),
        (objects.node_of, {"metadata": {}}, "a Node without metadata.name"),
        (objects.node_of, _with(node("n1"), "status.capacity", []), "Node n1: status.capacity is not an object"),
        (
            objects.node_of,
            _with(node("n1"), "status.conditions", [1]),
            "Node n1: status.conditions[0] is not an object",
        ),
        (
            objects.pod_of,
            _with(npu_pod("p", "n1"), "spec.containers", {}),
            "Pod ml/p: spec.containers is not a list",
        ),
        (
            objects.pod_of,
            _with(npu_pod("p", "n1"), "spec.nodeName", 7),
            "Pod ml/p: spec.nodeName is not a string",
        ),
        (
            objects.budget_of,
            _with(budget("b", {}, 0), "status.disruptionsAllowed", "1"),
            "PodDisruptionBudget ml/b: status.disruptionsAllowed is not an integer",
        ),
        (
            objects.budget_of,
            _with(budget("b", {}, 0), "spec.selector.matchExpressions", [{"key": "k", "operator": "Near"}]),
            "PodDisruptionBudget ml/b: spec.selector.matchExpressions[0].operator is not In, NotIn, Exists or "
            "DoesNotExist",
        ),
    ],
)
def test_a_shape_that_cannot_be_read_is_one_line(read: Any, body: Any, message: str) -> None:
    with pytest.raises(ShapeError) as error:
        read(body)
    assert str(error.value) == message
