"""What the e2e tests create (pods, claim templates) and read back from a container or the API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from tests.e2e.cluster import FAKE_INVENTORY, NODE, Cluster

DRIVER = "npu.huawei.com"
RESOURCE = "huawei.com/Ascend910"
# What a test pod runs until it is deleted. The shell is the container's PID 1, which ignores SIGTERM unless it
# traps it: without the trap every deletion would wait out the grace period (2 s at least, the kubelet's floor).
IDLE = "trap 'exit 0' TERM; sleep 3600 & wait"


def workload(name: str, command: str = IDLE, **resources: Any) -> dict[str, Any]:
    """A pod on the busybox image scripts/cluster imports, with `resources` as its container's."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.36",
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                    "resources": resources,
                }
            ],
        },
    }


def npu_request(name: str = "npu", **exactly: Any) -> dict[str, Any]:
    """One request of the npu.huawei.com DeviceClass; `exactly` adds count, selectors, allocationMode."""
    return {"name": name, "exactly": {"deviceClassName": DRIVER, **exactly}}


def cel(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


def claim_template(name: str, requests: Sequence[dict[str, Any]], constraints: Sequence[Any] = ()) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def claim_pod(name: str, template: str) -> dict[str, Any]:
    """A pod whose container is given the whole claim made from `template`."""
    pod = workload(name)
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "npu"}]}
    pod["spec"]["resourceClaims"] = [{"name": "npu", "resourceClaimTemplateName": template}]
    return pod


def as_list(*objects: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def claim_workload(name: str, requests: Sequence[dict[str, Any]], constraints: Sequence[Any] = ()) -> str:
    """A claim template and a pod, both called `name`."""
    return as_list(claim_template(name, requests, constraints), claim_pod(name, name))


def whole_npu(chip: int) -> dict[str, Any]:
    """A request for the whole NPU with physicalId `chip`."""
    return npu_request(selectors=cel(f'device.attributes["{DRIVER}"].physicalId == {chip}'))


def claim_pods(*specs: tuple[str, dict[str, Any]]) -> str:
    """A claim template and a pod per (name, request), both called name."""
    objects: list[dict[str, Any]] = []
    for name, request in specs:
        objects += [claim_template(name, [request]), claim_pod(name, name)]
    return as_list(*objects)


def claim_name(cluster: Cluster, pod: str) -> str:
    """The name of the pod's (first) ResourceClaim, made from its template."""
    return str(next(s["resourceClaimName"] for s in cluster.pod(pod)["status"]["resourceClaimStatuses"]))


def visible_ids(cluster: Cluster, pod: str, container: str = "app") -> set[int]:
    """The NPU ids in the container's ASCEND_VISIBLE_DEVICES."""
    text = cluster.exec(pod, "echo $ASCEND_VISIBLE_DEVICES", container).strip()
    return {int(i) for i in text.split(",")} if text else set()


def dev_nodes(cluster: Cluster, pod: str, container: str = "app") -> set[int]:
    """N of every /dev/davinciN in the container."""
    names = cluster.exec(pod, "ls /dev", container).split()
    return {int(n[7:]) for n in names if n.startswith("davinci") and n[7:].isdigit()}


def published(cluster: Cluster) -> list[dict[str, Any]]:
    """The devices of the driver's ResourceSlices for the node."""
    items: list[dict[str, Any]] = cluster.get("resourceslices")["items"]
    mine = [s for s in items if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE]
    return [d for s in mine for d in s["spec"].get("devices", [])]


def allocatable(cluster: Cluster) -> str | None:
    value = cluster.get("node", NODE)["status"].get("allocatable", {}).get(RESOURCE)
    return None if value is None else str(value)


def set_health(npu: int, health: str, fault_codes: Sequence[str] = ()) -> None:
    """The fake backend's inventory rewritten (atomically, as the plugin re-reads it on change) with NPU
    `npu` at `health` and `fault_codes`; "OK" and no codes make it healthy again."""
    inventory = yaml.safe_load(FAKE_INVENTORY.read_text(encoding="utf-8"))
    (device,) = (d for d in inventory["devices"] if d["physicalId"] == npu)
    device["health"] = health
    device.pop("faultCodes", None)
    if fault_codes:
        device["faultCodes"] = list(fault_codes)
    staged = FAKE_INVENTORY.with_suffix(".staged")
    staged.write_text(yaml.safe_dump(inventory, sort_keys=False), encoding="utf-8")
    staged.replace(FAKE_INVENTORY)


def device_named(cluster: Cluster, npu: int) -> dict[str, Any] | None:
    """The published device of physical id `npu`, None while it is not in the slices."""
    return next((d for d in published(cluster) if d["attributes"]["physicalId"]["int"] == npu), None)
