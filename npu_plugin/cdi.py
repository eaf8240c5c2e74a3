"""CDI spec rendering from container edits, with the lowest cdiVersion the content needs (pure)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from npu_plugin.edits import ContainerEdits

CDI_CLASS = "npu"
CDI_DIR_MODE = 0o755  # a --cdi-root we create: every container runtime, rootless ones too, reads it


@dataclass(frozen=True, slots=True)
class CdiDevice:
    name: str
    edits: ContainerEdits


def cdi_kind(driver: str) -> str:
    return f"{driver}/{CDI_CLASS}"


def qualified_name(driver: str, device: str) -> str:
    """The id a runtime resolves: `npu.huawei.com/npu=npu-3`."""
    return f"{cdi_kind(driver)}={device}"


def render_edits(edits: ContainerEdits) -> dict[str, Any]:
    rendered: dict[str, Any] = {}
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


def render_spec(driver: str, devices: Sequence[CdiDevice], common: ContainerEdits | None = None) -> dict[str, Any]:
    """A CDI spec of kind `<driver>/npu`; `common` edits apply once whenever any device is injected."""
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": cdi_kind(driver),
        "devices": [{"name": d.name, "containerEdits": render_edits(d.edits)} for d in devices],
    }
    if common is not None and (shared := render_edits(common)):
        spec["containerEdits"] = shared
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def minimum_version(spec: dict[str, Any]) -> str:
    """Lowest CDI version for these features, following the CDI library's own rules:
    0.5.0 for a device node hostPath or a device name not starting with a letter, 0.4.0 for a
    mount type; 0.3.0 otherwise. Podman 4.3 and containerd 1.7 read up to 0.5.0.
    """
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits", {})]
    if any(not d["name"][:1].isalpha() for d in spec["devices"]) or any(
        "hostPath" in node for e in edits for node in e.get("deviceNodes", [])
    ):
        return "0.5.0"
    if any("type" in mount for e in edits for mount in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


def spec_bytes(spec: dict[str, Any]) -> bytes:
    return (json.dumps(spec, indent=2, sort_keys=False) + "\n").encode()
