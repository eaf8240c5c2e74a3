"""CDI spec checks for the tests: the published JSON Schema plus what it is too loose to catch."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

SCHEMA_DIR = Path(__file__).parents[1] / "fixtures" / "cdi"
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_VENDOR = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$")  # no '.' before 0.6.0
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_FIELDS = {
    "spec": {"cdiVersion", "kind", "annotations", "devices", "containerEdits"},
    "device": {"name", "annotations", "containerEdits"},
    "containerEdits": {"env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids"},
    "deviceNode": {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"},
    "mount": {"hostPath", "containerPath", "options", "type"},
}


@cache
def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = Resource.from_contents(json.loads((SCHEMA_DIR / "defs.json").read_text()), default_specification=DRAFT7)
    return jsonschema.Draft7Validator(schema, registry=Registry().with_resource("defs.json", defs))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _unknown(kind: str, obj: dict[str, Any]) -> list[str]:
    return [f"unknown {kind} field {key!r}" for key in sorted(set(obj) - _FIELDS[kind])]


def _edit_problems(edits: dict[str, Any]) -> list[str]:
    problems = _unknown("containerEdits", edits)
    problems += [f"env entry {e!r} is not KEY=VALUE" for e in edits.get("env", []) if "=" not in e[1:]]
    for node in edits.get("deviceNodes", []):
        problems += _unknown("deviceNode", node)
        if not node["path"].startswith("/") or not node.get("hostPath", "/").startswith("/"):
            problems.append(f"device node paths must be absolute: {node}")
        if set(node.get("permissions", "")) - set("rwm"):
            problems.append(f"device node permissions {node['permissions']!r} are not made of r, w, m")
    for mount in edits.get("mounts", []):
        problems += _unknown("mount", mount)
    return problems


def _needed_version(spec: dict[str, Any]) -> str:
    """The CDI library's own rule for the features we use (independent of npu_plugin.cdi)."""
    edits = [spec.get("containerEdits", {})] + [d["containerEdits"] for d in spec["devices"]]
    if any(not d["name"][0].isalpha() for d in spec["devices"]) or any(
        "hostPath" in n for e in edits for n in e.get("deviceNodes", [])
    ):
        return "0.5.0"
    return "0.4.0" if any("type" in m for e in edits for m in e.get("mounts", [])) else "0.3.0"


def cdi_problems(spec: dict[str, Any]) -> list[str]:
    """Everything wrong with a CDI spec; empty when a runtime will accept it."""
    problems = [f"schema: {e.message} at {list(e.absolute_path)}" for e in _validator().iter_errors(spec)]
    if problems:
        return problems
    problems = _unknown("spec", spec)
    vendor, _, device_class = spec["kind"].partition("/")
    if not _VENDOR.match(vendor) or not _CLASS.match(device_class):
        problems.append(f"kind {spec['kind']!r} is not vendor/class")
    if spec["cdiVersion"] not in KNOWN_VERSIONS:
        problems.append(f"cdiVersion {spec['cdiVersion']!r} is not a released CDI version")
    elif _version(spec["cdiVersion"]) < _version(_needed_version(spec)):
        problems.append(f"cdiVersion {spec['cdiVersion']} is lower than the {_needed_version(spec)} its content needs")
    for device in spec["devices"]:
        problems += _unknown("device", device)
        if not _DEVICE_NAME.match(device["name"]):
            problems.append(f"device name {device['name']!r} is not a valid CDI device name")
        problems += _edit_problems(device["containerEdits"])
    problems += _edit_problems(spec.get("containerEdits", {}))
    names = [d["name"] for d in spec["devices"]]
    if len(names) != len(set(names)):
        problems.append(f"duplicate device names in {names}")
    return problems


def assert_valid_cdi(spec: dict[str, Any]) -> None:
    problems = cdi_problems(spec)
    assert not problems, "invalid CDI spec:\n" + "\n".join(problems) + "\n" + json.dumps(spec, indent=2)
