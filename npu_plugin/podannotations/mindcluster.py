"""What MindCluster's ascend-device-plugin writes on a pod after an Allocate, byte for byte (pure).

Three annotations: `huawei.com/kltDev` (the ids the kubelet passed), `huawei.com/AscendReal` (the
devices the container really got) and `ascend.kubectl.kubernetes.io/ascend-910-configuration`, the
JSON Ascend Operator and hccl-controller build the HCCL rank table from. The JSON is Go's
`json.Marshal` of MindCluster's `Instance` struct: its field order, compact, `device_id` a string.
Under Volcano, `predicate-time` set to the largest uint64 marks a pod whose devices were served.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from npu_plugin.ascend.device import Device

KLT_DEV = "huawei.com/kltDev"
ASCEND_REAL = "huawei.com/AscendReal"
CONFIGURATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
PREDICATE_TIME = "predicate-time"
USED_PREDICATE_TIME = str(2**64 - 1)  # MindCluster's math.MaxUint64: "this pod's devices are served"
ANNOTATION_KEYS = (KLT_DEV, ASCEND_REAL, CONFIGURATION)
# MindCluster's value for an id the hardware does not have (not a super pod, no rack).
NO_ID = -1


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""  # known from a claim's reservedFor or a pod list; read otherwise

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """The server fields of the configuration: `server_id` and `host_ip` are the node's address;
    the rest exist on super-pod hardware (Atlas A3) only."""

    host_ip: str
    super_pod_id: int = NO_ID
    rack_id: int = NO_ID
    server_index: str = ""
    server_ip: str = ""


@dataclass(frozen=True, slots=True)
class AnnotatedDevice:
    """One NPU of the pod: its physical id, its RoCE address (None: unknown) and, on A3, its super
    device id."""

    physical_id: int
    device_ip: str | None
    super_device_id: int | None = None


def go_json(value: Any) -> str:
    """Go's `json.Marshal` output: compact, UTF-8 kept, and `<`, `>`, `&`, U+2028, U+2029
    escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def configuration(pod_name: str, node: NodeIdentity, devices: Sequence[AnnotatedDevice]) -> str:
    """The `ascend-910-configuration` JSON, devices by physical id; every device needs its IP
    (ValueError naming the first without)."""
    entries = []
    for device in sorted(devices, key=lambda d: d.physical_id):
        if not device.device_ip:
            raise ValueError(f"npu-{device.physical_id} has no device IP")
        entry: dict[str, Any] = {"device_id": str(device.physical_id), "device_ip": device.device_ip}
        if device.super_device_id is not None:
            entry["super_device_id"] = str(device.super_device_id)
        entries.append(entry)
    return go_json(
        {
            "pod_name": pod_name,
            "server_id": node.host_ip,
            "host_ip": node.host_ip,
            "super_pod_id": node.super_pod_id,
            "devices": entries,
            "rack_id": node.rack_id,
            "server_index": node.server_index,
            "server_ip": node.server_ip,
        }
    )


def annotated(device: Device) -> AnnotatedDevice:
    return AnnotatedDevice(device.physical_id, device.device_ip)


def server_of(devices: Sequence[Device]) -> NodeIdentity:
    """The super-pod fields of the server these devices sit in, as the inventory read them (pure);
    `host_ip` is left for the writer, which reads the Node."""

    def first(values: Sequence[int | None]) -> int | None:
        return next((v for v in values if v is not None), None)

    super_pod, rack = first([d.super_pod_id for d in devices]), first([d.rack_id for d in devices])
    index = first([d.server_index for d in devices])
    return NodeIdentity(
        "",
        super_pod_id=NO_ID if super_pod is None else super_pod,
        rack_id=NO_ID if rack is None else rack,
        server_index="" if index is None else str(index),
    )


@dataclass(frozen=True, slots=True)
class PodAnnotations:
    """What one pod gets: the annotations, and why the configuration is left out (None: it is
    there)."""

    values: Mapping[str, str]
    without_configuration: str | None = None


def pod_annotations(
    pod_name: str,
    node: NodeIdentity,
    kubelet_ids: Sequence[str],
    real_ids: Sequence[str],
    devices: Sequence[AnnotatedDevice],
) -> PodAnnotations:
    """The three annotations; a device without IP leaves the configuration out (an HCCL rank table
    built from a wrong address would hang the job), the other two are written."""
    values = {KLT_DEV: ",".join(kubelet_ids), ASCEND_REAL: ",".join(real_ids)}
    try:
        values[CONFIGURATION] = configuration(pod_name, node, devices)
    except ValueError as error:
        return PodAnnotations(values, str(error))
    return PodAnnotations(values)


def device_targets(reserved_for: object, namespace: str) -> list[PodRef]:
    """The pods of a claim's `status.reservedFor` (pure); other consumers are left out."""
    if not isinstance(reserved_for, Sequence) or isinstance(reserved_for, str):
        return []
    return [
        PodRef(namespace, entry["name"], str(entry.get("uid", "")))
        for entry in reserved_for
        if isinstance(entry, Mapping)
        and entry.get("resource") == "pods"
        and not entry.get("apiGroup")
        and isinstance(entry.get("name"), str)
    ]
