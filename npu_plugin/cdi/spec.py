"""CDI names and specs: the static spec of the device plugin and the per-claim specs of DRA (pure).

Kind `<driver>/npu`. The static spec names a CDI device per NPU, `npu-<physicalId>`, and per vNPU
the device plugin serves, `vnpu-<vnpuId>`; a claim's spec names one per request,
`<claimUID>-<request>`, exposing exactly that request's NPUs, and for a claim of several requests one
more, `<claimUID>-_claim`, for a container given the whole claim (see `claim_wide_ids`). Each spec
carries the lowest cdiVersion its content needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NotRequired, TypedDict

from npu_plugin.ascend.container_edits import (
    ContainerEdits,
    HostLayout,
    Mount,
    container_edits,
    split_edits,
    visible_env,
)
from npu_plugin.ascend.device import Device, dra_name

CDI_CLASS = "npu"
# The claim-wide device's key in a claim's spec, and the request name the kubelet is told it serves: never a
# request's name (those are DNS labels, without "_"), so only a container given the whole claim gets it.
CLAIM_WIDE = "_claim"


class DeviceNodeSpec(TypedDict):
    path: str
    hostPath: NotRequired[str]
    permissions: str


class MountSpec(TypedDict):
    hostPath: str
    containerPath: str
    type: str
    options: list[str]


class EditsSpec(TypedDict, total=False):
    env: list[str]
    deviceNodes: list[DeviceNodeSpec]
    mounts: list[MountSpec]


class DeviceSpec(TypedDict):
    name: str
    containerEdits: EditsSpec


class CdiSpec(TypedDict):
    cdiVersion: str
    kind: str
    devices: list[DeviceSpec]
    containerEdits: NotRequired[EditsSpec]


@dataclass(frozen=True, slots=True)
class CdiDevice:
    name: str
    edits: ContainerEdits


def cdi_kind(driver: str) -> str:
    return f"{driver}/{CDI_CLASS}"


def qualified_name(driver: str, device: str) -> str:
    """The id a runtime resolves: `npu.huawei.com/npu=npu-3`."""
    return f"{cdi_kind(driver)}={device}"


def static_cdi_id(driver: str, physical_id: int) -> str:
    """The static spec's id of one NPU, which Allocate returns: `npu.huawei.com/npu=npu-3`."""
    return qualified_name(driver, dra_name(physical_id))


def static_vnpu_cdi_id(driver: str, vnpu_id: int) -> str:
    """The static spec's id of one vNPU, which Allocate returns: `npu.huawei.com/npu=vnpu-164`."""
    return qualified_name(driver, vnpu_cdi_name(vnpu_id))


def vnpu_cdi_name(vnpu_id: int) -> str:
    return f"vnpu-{vnpu_id}"


def claim_device_name(claim_uid: str, request: str) -> str:
    return f"{claim_uid}-{request}"


def claim_cdi_id(driver: str, claim_uid: str, request: str) -> str:
    return qualified_name(driver, claim_device_name(claim_uid, request))


def render_edits(edits: ContainerEdits) -> EditsSpec:
    rendered: EditsSpec = {}
    if edits.env:
        rendered["env"] = [f"{key}={value}" for key, value in edits.env]
    if edits.device_nodes:
        rendered["deviceNodes"] = [
            {"path": n.container_path, "hostPath": n.host_path, "permissions": n.permissions}
            if n.host_path != n.container_path
            else {"path": n.container_path, "permissions": n.permissions}
            for n in edits.device_nodes
        ]
    if edits.mounts:
        rendered["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "type": "bind",
                "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "rbind"],
            }
            for m in edits.mounts
        ]
    return rendered


def render_spec(driver: str, devices: Sequence[CdiDevice], common: ContainerEdits | None = None) -> CdiSpec:
    """A CDI spec of kind `<driver>/npu`; `common` edits apply once whenever any device is
    injected."""
    spec: CdiSpec = {
        "cdiVersion": "",
        "kind": cdi_kind(driver),
        "devices": [{"name": d.name, "containerEdits": render_edits(d.edits)} for d in devices],
    }
    if common is not None and (shared := render_edits(common)):
        spec["containerEdits"] = shared
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def minimum_version(spec: CdiSpec) -> str:
    """Lowest CDI version for these features, following the CDI library's own rules:
    0.5.0 for a device node hostPath or a device name not starting with a letter, 0.4.0 for a
    mount type; 0.3.0 otherwise. Podman 4.3 and containerd 1.7 read up to 0.5.0.
    """
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits", EditsSpec())]
    if any(not d["name"][:1].isalpha() for d in spec["devices"]) or any(
        "hostPath" in node for e in edits for node in e.get("deviceNodes", [])
    ):
        return "0.5.0"
    if any("type" in mount for e in edits for mount in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


def static_spec(driver: str, layout: HostLayout, devices: Sequence[Device], vnpu_ids: Sequence[int] = ()) -> CdiSpec:
    """The device plugin's spec: one CDI device per NPU, and one per vNPU, holding only its own
    device node; common nodes and mounts are spec-wide. Allocate sets ASCEND_VISIBLE_DEVICES (and,
    for a vNPU, ASCEND_RUNTIME_OPTIONS) in `envs`."""
    per_device, common = split_edits(layout, [d.physical_id for d in devices])
    per_vnpu, _ = split_edits(layout, vnpu_ids, virtual=True)
    entries = [CdiDevice(d.dra_name, per_device[d.physical_id]) for d in devices]
    entries += [CdiDevice(vnpu_cdi_name(i), per_vnpu[i]) for i in sorted(vnpu_ids)]
    return render_spec(driver, entries, common)


def claim_spec(
    driver: str,
    claim_uid: str,
    requests: Mapping[str, Sequence[int]],
    layout: HostLayout,
    *,
    virtual: Mapping[str, Sequence[int]] | None = None,
    mounts: Mapping[str, Mount] | None = None,
) -> CdiSpec:
    """A claim's spec with a device per request whose edits expose exactly that request's NPUs: the
    whole NPUs in `requests` (physical ids) or the vNPU in `virtual` (vNPU ids; a vNPU is alone in
    its request), plus the request's entry of `mounts` (its device metadata file); last, the
    claim-wide device when `claim_wide_ids` asks for one."""
    virtual, mounts = virtual or {}, mounts or {}
    devices = []
    for request in sorted(requests.keys() | virtual.keys()):
        edits = (
            container_edits(layout, virtual[request], virtual=True)
            if request in virtual
            else container_edits(layout, requests[request])
        )
        if request in mounts:
            edits = replace(edits, mounts=(*edits.mounts, mounts[request]))
        devices.append(CdiDevice(claim_device_name(claim_uid, request), edits))
    if ids := claim_wide_ids(requests, virtual):
        devices.append(CdiDevice(claim_device_name(claim_uid, CLAIM_WIDE), ContainerEdits(visible_env(ids), (), ())))
    return render_spec(driver, devices)


def claim_wide_ids(requests: Mapping[str, Sequence[int]], virtual: Mapping[str, Sequence[int]]) -> list[int]:
    """The NPUs a container given a whole claim of several requests must see in ASCEND_VISIBLE_DEVICES
    (pure); empty when the claim needs no claim-wide device.

    The kubelet gives such a container every request's CDI device, and each sets the variable to its
    own request's NPUs: the last applied would win. A claim-wide device setting it to all of them,
    applied last, corrects that; a container given one request never gets it. A vNPU serves one
    container alone and cannot share the variable with other devices, so a claim holding one gets none.
    """
    if virtual or len(requests) < 2:
        return []
    return sorted({i for ids in requests.values() for i in ids})


def spec_bytes(spec: CdiSpec) -> bytes:
    return (json.dumps(spec, indent=2, sort_keys=False) + "\n").encode()
