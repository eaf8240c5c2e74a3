"""API objects of a cluster that `npu-plugin plan` reads, as the API server stores them: builders
for the tests' cluster states and the benchmark's 5,000 nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.support.fakeapi import FakeKubeAPI

JSON = dict[str, Any]
MODE_LABEL = "npu.huawei.com/plugin-mode"
PART_OF = {"app.kubernetes.io/part-of": "npu-plugin"}
DRIVER = "npu.huawei.com"
NPU = "huawei.com/Ascend910"
IMAGE = "npu-plugin:0.1.0"


def node(
    name: str,
    mode: str | None = "device-plugin",
    capacity: Mapping[str, str] | None = None,
    *,
    kubelet: str = "v1.36.0",
    ready: bool = True,
    unschedulable: bool = False,
) -> JSON:
    labels = {"kubernetes.io/hostname": name} | ({MODE_LABEL: mode} if mode else {})
    resources = {"cpu": "192", "memory": "1536Gi", "pods": "110", **(capacity or {})}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": "containerd://2.0.0"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
        },
    }


def daemonset(mode: str, *extra_args: str) -> JSON:
    """The plugin's DaemonSet as the overlay of `mode` deploys it."""
    return {
        "metadata": {"name": f"npu-plugin-{mode}", "namespace": "npu-plugin", "labels": dict(PART_OF)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/component": mode}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/component": mode, **PART_OF}},
                "spec": {
                    "nodeSelector": {MODE_LABEL: mode},
                    "containers": [
                        {
                            "name": "npu-plugin",
                            "image": "npu-plugin:0.1.0",
                            "args": ["serve", f"--mode={mode}", *extra_args],
                        }
                    ],
                },
            },
        },
    }


def plugin_pod(node_name: str, mode: str, *, ready: bool = True) -> JSON:
    return {
        "metadata": {"name": f"npu-plugin-{mode}-{node_name}", "namespace": "npu-plugin", "labels": dict(PART_OF)},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "npu-plugin", "image": IMAGE, "args": ["serve", f"--mode={mode}"]}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def npu_pod(
    name: str,
    node_name: str,
    resources: Mapping[str, str] | None = None,
    *,
    namespace: str = "ml",
    deployment: str | None = "train",
    owner: tuple[str, str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: str | None = None,
    scheduled: bool = True,
    claims: Sequence[str] = (),
    phase: str = "Running",
) -> JSON:
    """A pod asking `resources` (default one whole NPU) in its container's limits; made by Deployment
    `deployment` through a ReplicaSet, or by `owner` (apiVersion, kind, name), or by nothing."""
    metadata: JSON = {"name": name, "namespace": namespace, "labels": {"app": deployment or name, **(labels or {})}}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "uid": "u-" + owner[2], "controller": True}
        ]
    elif deployment is not None:
        metadata["labels"]["pod-template-hash"] = "7d9f8b6c5"
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{deployment}-7d9f8b6c5",
                "uid": "u-" + deployment,
                "controller": True,
            }
        ]
    limits = dict(resources if resources is not None else {NPU: "1"})
    spec: JSON = {
        "nodeName": node_name,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "command": ["python", "train.py"],
                "env": [{"name": "EPOCHS", "value": "10"}],
                "resources": {"limits": {"cpu": "8", **limits}, "requests": {"cpu": "8", **limits}},
                "claims": [{"name": c} for c in claims],
            }
        ],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    status: JSON = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
    if scheduled:
        status["conditions"].append({"type": "PodScheduled", "status": "True"})
    if claims:
        status["resourceClaimStatuses"] = [{"name": c, "resourceClaimName": c} for c in claims]
    return {"metadata": metadata, "spec": spec, "status": status}


def budget(name: str, match: Mapping[str, str], allowed: int, namespace: str = "ml") -> JSON:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(match)}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
    }


def device_class(name: str, extended_resource: str | None = None, expression: str | None = None) -> JSON:
    cel = expression or f'device.driver == "{DRIVER}"'
    spec: JSON = {"selectors": [{"cel": {"expression": cel}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"metadata": {"name": name}, "spec": spec}


def resource_slice(
    node_name: str,
    devices: int = 8,
    *,
    driver: str = DRIVER,
    pool: str | None = None,
    vnpu: bool = False,
    attributes_domain: str | None = None,
    slices: int = 1,
) -> JSON:
    """One slice of a pool of `slices` (only the first is built, so a larger count is a pool still
    being published)."""
    domain = attributes_domain or driver
    listed = []
    for index in range(devices):
        attributes: JSON = {f"{domain}/deviceType" if domain != driver else "deviceType": {"string": "Ascend910B"}}
        if vnpu:
            attributes["vnpuTemplate"] = {"string": "vir05_1c_16g"}
        listed.append({"name": f"npu-{index}", "attributes": attributes})
    return {
        "metadata": {"name": f"{node_name}-{driver}-{pool or 'x'}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": 1, "resourceSliceCount": slices},
            "devices": listed,
        },
    }


def claim(name: str, node_name: str, device_class_name: str = DRIVER, *, pod: str, namespace: str = "ml") -> JSON:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": device_class_name}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "npu", "driver": DRIVER, "pool": node_name, "device": "npu-0"}]}
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": "u-" + pod}],
        },
    }


def quota(name: str, hard: Mapping[str, str], namespace: str = "ml") -> JSON:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": dict(hard)}}


KINDS = {
    "nodes": "Node",
    "daemonsets": "DaemonSet",
    "pods": "Pod",
    "budgets": "PodDisruptionBudget",
    "classes": "DeviceClass",
    "slices": "ResourceSlice",
    "claims": "ResourceClaim",
    "quotas": "ResourceQuota",
}


def plant(api: FakeKubeAPI, state: Mapping[str, Sequence[JSON]]) -> None:
    """Store every object of `state` (keys of KINDS) as it is, status included."""
    for key, objects in state.items():
        for obj in objects:
            api.put_object(KINDS[key], obj)
