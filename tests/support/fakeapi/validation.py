"""Create/update validation mirroring `pkg/apis/resource/validation` (pure functions).

Limits are those of resource.k8s.io/v1 in Kubernetes 1.34
(`staging/src/k8s.io/api/resource/v1/types.go`); the counter rules, which changed in 1.35, are in
`counters.py`. Objects arrive already decoded by `schema.decode`, so known fields have the right
JSON types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from npu_plugin.kubeapi.quantity import parse_bytes
from npu_plugin.sim._fakeapi.kinds import JSON, RESOURCE_CLAIMS, RESOURCE_SLICES, Kind
from tests.support.fakeapi import names
from tests.support.fakeapi.counters import slice_counter_errors
from tests.support.fakeapi.fielderrors import (
    FieldError,
    duplicate,
    forbidden,
    invalid_value,
    not_supported,
    required,
    too_long,
    too_many,
)

RESOURCE_SLICE_MAX_DEVICES = 128
RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS = 64
RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32
DEVICE_MAX_DOMAIN_LENGTH = 63
DEVICE_MAX_ID_LENGTH = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH = 64
DEVICE_TAINTS_MAX_LENGTH = 16
DRIVER_NAME_MAX_LENGTH = 63
DEVICE_TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
NONE_EFFECT_FROM_MINOR = 35  # `None` joined the effects in 1.35 (KEP-5055)
_ATTRIBUTE_VALUE_FIELDS = ("bool", "int", "string", "version")
_NODE_SELECTION = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
_DEVICE_NODE_SELECTION = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set "
    "to true in the ResourceSlice spec"
)
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?\Z"
)
IMMUTABLE = "field is immutable"
ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS = 8
ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH = 10 * 1024
CONDITION_STATUSES = ("True", "False", "Unknown")
_CONDITION_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")


def validate(kind: Kind, obj: JSON, old: JSON | None, minor: int = 34) -> list[FieldError]:
    """All field errors of `obj` (a create when `old` is None, else an update of `old`) on
    Kubernetes 1.<minor>."""
    errs = validate_object_meta(obj["metadata"], kind.namespaced)
    if old is not None:
        errs += _meta_update(obj["metadata"], old["metadata"])
    if kind is RESOURCE_SLICES:
        errs += _slice_spec(obj.get("spec", {}), "spec", minor)
        if old is not None:
            errs += _slice_immutables(obj.get("spec", {}), old.get("spec", {}))
    elif kind is RESOURCE_CLAIMS and old is not None and obj.get("spec") != old.get("spec"):
        errs.append(invalid_value("spec", obj.get("spec"), IMMUTABLE))
    if kind is RESOURCE_CLAIMS:
        errs += _device_statuses(obj.get("status") or {})
    return errs


def _device_statuses(status: JSON) -> list[FieldError]:
    """`validateDeviceStatus`: each entry names an allocated device (a share of one by its shareID), at
    most 8 valid conditions, data of at most 10 KiB."""
    allocated = {
        (r.get("driver"), r.get("pool"), r.get("device"), r.get("shareID"))
        for r in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    }
    errs: list[FieldError] = []
    for i, entry in enumerate(status.get("devices") or []):
        path = f"status.devices[{i}]"
        device_id = (entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID"))
        if device_id not in allocated:
            shown = "/".join(str(p) for p in device_id if p is not None)
            errs.append(invalid_value(path, shown, "must be an allocated device in the claim"))
        conditions = entry.get("conditions") or []
        if len(conditions) > ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS:
            errs.append(too_many(f"{path}.conditions", len(conditions), ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS))
        for j, condition in enumerate(conditions):
            errs += _condition(condition, f"{path}.conditions[{j}]")
        if "data" in entry and len(json.dumps(entry["data"])) > ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH:
            errs.append(too_long(f"{path}.data", ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH))
    return errs


def _condition(condition: JSON, path: str) -> list[FieldError]:
    """`metav1validation.ValidateCondition`, the parts a driver can get wrong."""
    errs: list[FieldError] = []
    if not condition.get("type"):
        errs.append(required(f"{path}.type", "must be set"))
    if condition.get("status") not in CONDITION_STATUSES:
        errs.append(not_supported(f"{path}.status", str(condition.get("status", "")), CONDITION_STATUSES))
    if not condition.get("lastTransitionTime"):
        errs.append(required(f"{path}.lastTransitionTime", "must be set"))
    reason = condition.get("reason", "")
    if not reason:
        errs.append(required(f"{path}.reason", "must be set"))
    elif not _CONDITION_REASON.fullmatch(reason):
        errs.append(invalid_value(f"{path}.reason", reason, "a condition reason must start with alphabetic character"))
    return errs


def _each(msgs: list[str], path: str, value: Any) -> list[FieldError]:
    return [invalid_value(path, value, msg) for msg in msgs]


def validate_object_meta(meta: JSON, namespaced: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    generate_name = meta.get("generateName", "")
    if generate_name:
        masked = _mask_trailing_dash(generate_name)
        errs += _each(names.dns1123_subdomain(masked), "metadata.generateName", generate_name)
    name = meta.get("name", "")
    if not name:
        errs.append(required("metadata.name", "name or generateName is required"))
    else:
        errs += _each(names.dns1123_subdomain(name), "metadata.name", name)
    if namespaced:
        errs += _each(names.dns1123_label(meta.get("namespace", "")), "metadata.namespace", meta.get("namespace", ""))
    for key, value in sorted(meta.get("labels", {}).items()):
        errs += _each(names.qualified_name(key), "metadata.labels", key)
        errs += _each(names.label_value(value), "metadata.labels", value)
    for key in sorted(meta.get("annotations", {})):
        errs += _each(names.qualified_name(key.lower()), "metadata.annotations", key)
    return errs + _owner_references(meta.get("ownerReferences", []))


def _mask_trailing_dash(prefix: str) -> str:
    """apimachinery's `maskTrailingDash`, quirk included: it drops two characters, not one."""
    return prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix


def _owner_references(refs: list[JSON]) -> list[FieldError]:
    path = "metadata.ownerReferences"
    errs: list[FieldError] = []
    for ref in refs:
        if not ref.get("apiVersion", "").rpartition("/")[2]:
            errs.append(invalid_value(f"{path}.apiVersion", ref.get("apiVersion", ""), "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                errs.append(invalid_value(f"{path}.{key}", ref.get(key, ""), "must not be empty"))
    controllers = [f"{r.get('kind')}/{r.get('name')}" for r in refs if r.get("controller")]
    if len(controllers) > 1:
        detail = 'Only one reference can have Controller set to true. Found "true" in references for ' + " and ".join(
            controllers
        )
        errs.append(invalid_value(path, refs, detail))
    return errs


def _meta_update(new: JSON, old: JSON) -> list[FieldError]:
    errs = []
    for key in ("name", "namespace", "uid"):
        if new.get(key, "") != old.get(key, ""):
            errs.append(invalid_value(f"metadata.{key}", new.get(key, ""), IMMUTABLE))
    return errs


def _slice_immutables(new: JSON, old: JSON) -> list[FieldError]:
    errs = []
    pairs = (
        ("spec.pool.name", new.get("pool", {}).get("name"), old.get("pool", {}).get("name")),
        ("spec.driver", new.get("driver"), old.get("driver")),
        ("spec.nodeName", new.get("nodeName"), old.get("nodeName")),
    )
    for path, now, before in pairs:
        if now != before:
            errs.append(invalid_value(path, now, IMMUTABLE))
    return errs


def _driver_name(value: str, path: str) -> list[FieldError]:
    """`ValidateCSIDriverName`: the DRA driver name rules, also used for attribute domains."""
    errs = [required(path)] if not value else []
    if len(value) > DRIVER_NAME_MAX_LENGTH:
        errs.append(too_long(path, DRIVER_NAME_MAX_LENGTH))
    return errs + _each(names.dns1123_subdomain(value.lower()), path, value)


def _pool(pool: JSON, path: str) -> list[FieldError]:
    name = pool.get("name", "")
    errs: list[FieldError] = []
    if not name:
        errs.append(required(f"{path}.name"))
    else:
        if len(name) > names.DNS1123_SUBDOMAIN_MAX:
            errs.append(too_long(f"{path}.name", names.DNS1123_SUBDOMAIN_MAX))
        for part in name.split("/"):
            errs += _each(names.dns1123_subdomain(part), f"{path}.name", part)
    count, generation = pool.get("resourceSliceCount", 0), pool.get("generation", 0)
    if count <= 0:
        errs.append(invalid_value(f"{path}.resourceSliceCount", count, "must be greater than zero"))
    if generation < 0:
        errs.append(invalid_value(f"{path}.generation", generation, "must be greater than or equal to zero"))
    return errs


def _slice_spec(spec: JSON, path: str, minor: int) -> list[FieldError]:
    errs = _driver_name(spec.get("driver", ""), f"{path}.driver") + _pool(spec.get("pool", {}), f"{path}.pool")
    errs += _node_selection(spec, path)
    errs += slice_counter_errors(spec, path, minor)
    return errs + _devices(spec.get("devices", []), bool(spec.get("perDeviceNodeSelection")), f"{path}.devices", minor)


def _true_flag(spec: JSON, key: str, path: str, errs: list[FieldError]) -> bool:
    if key not in spec:
        return False
    if not spec[key]:
        errs.append(invalid_value(f"{path}.{key}", False, "must be either unset or set to true"))
    return bool(spec[key])


def _node_selection(spec: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    chosen = []
    if "nodeName" in spec:
        if spec["nodeName"]:
            chosen.append("`nodeName`")
            errs += _each(names.dns1123_subdomain(spec["nodeName"]), f"{path}.nodeName", spec["nodeName"])
        else:
            errs.append(invalid_value(f"{path}.nodeName", "", "must be either unset or set to a non-empty string"))
    if "nodeSelector" in spec:
        chosen.append("`nodeSelector`")
        terms = spec["nodeSelector"].get("nodeSelectorTerms", []) if isinstance(spec["nodeSelector"], dict) else []
        if len(terms) != 1:
            errs.append(
                invalid_value(
                    f"{path}.nodeSelector.nodeSelectorTerms", terms, "must have exactly one node selector term"
                )
            )
    chosen += [f"`{k}`" for k in ("allNodes", "perDeviceNodeSelection") if _true_flag(spec, k, path, errs)]
    if not chosen:
        errs.append(required(path, _NODE_SELECTION))
    elif len(chosen) > 1:
        shown = "{" + ", ".join(chosen) + "}"
        errs.append(invalid_value(path, shown, _NODE_SELECTION + ", but multiple fields are set"))
    return errs


def _devices(devices: list[JSON], per_device: bool, path: str, minor: int) -> list[FieldError]:
    advanced = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    limit = RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS if advanced else RESOURCE_SLICE_MAX_DEVICES
    if len(devices) > limit:
        return [too_many(path, len(devices), limit)]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        errs += _device(device, per_device, f"{path}[{i}]", minor)
        name = device.get("name", "")
        if name in seen:
            errs.append(duplicate(f"{path}[{i}]", name))
        seen.add(name)
    return errs


def _device(device: JSON, per_device: bool, path: str, minor: int) -> list[FieldError]:
    errs = _each(names.dns1123_label(device.get("name", "")), f"{path}.name", device.get("name", ""))
    attributes, capacity = device.get("attributes", {}), device.get("capacity", {})
    total = len(attributes) + len(capacity)
    if total > RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE:
        limit = RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE
        detail = f"the total number of attributes and capacities must not exceed {limit}"
        errs.append(invalid_value(path, total, detail))
    errs += _map(attributes, f"{path}.attributes", _attribute)
    shared = device.get("allowMultipleAllocations") is True
    errs += _map(capacity, f"{path}.capacity", lambda value, where: _capacity(value, where, shared))
    errs += _taints(device.get("taints", []), f"{path}.taints", minor)
    return errs + _device_node_selection(device, per_device, path)


def _capacity(capacity: JSON, path: str, shared: bool) -> list[FieldError]:
    """`validateDeviceCapacity` and `validateRequestPolicy`: a policy only on a device that allows
    several allocations; validValues or validRange, not both, each with a default that is valid; a
    range's min at most the value, its max too, its default between them and on a step."""
    policy = capacity.get("requestPolicy")
    if policy is None:
        return []
    if not shared:
        return [forbidden(f"{path}.requestPolicy", "allowMultipleAllocations must be true")]
    path += ".requestPolicy"
    value, default = _bytes(capacity["value"]), policy.get("default")
    if policy.get("validValues") and policy.get("validRange") is not None:
        return [
            forbidden(
                path,
                'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time',
            )
        ]
    if (policy.get("validValues") or policy.get("validRange") is not None) and default is None:
        return [required(f"{path}.default", "required when validValues or validRange is defined")]
    if policy.get("validValues"):
        options = [_bytes(v) for v in policy["validValues"]]
        errs = [
            invalid_value(f"{path}.validValues", o, "option is larger than capacity value")
            for o in options
            if o > value
        ]
        if options != sorted(options):
            errs.append(invalid_value(f"{path}.validValues", options, "values must be sorted in ascending order"))
        if _bytes(default) not in options:
            errs.append(
                invalid_value(
                    f"{path}.validValues", default, "default value is not valid according to the requestPolicy"
                )
            )
        return errs
    if (valid := policy.get("validRange")) is not None:
        return _range(valid, _bytes(default), value, f"{path}.validRange")
    return []


def _range(valid: JSON, default: int, value: int, path: str) -> list[FieldError]:
    if valid.get("min") is None:
        return [required(f"{path}.min", "required when validRange is defined")]
    low = _bytes(valid["min"])
    high = _bytes(valid["max"]) if valid.get("max") is not None else None
    errs: list[FieldError] = []
    if low > value:
        errs.append(invalid_value(f"{path}.min", low, "min is larger than capacity value"))
    if default < low:
        errs.append(invalid_value(f"{path}.min", default, "default is less than min"))
    if high is not None and (high < low or high > value or default > high):
        errs.append(invalid_value(f"{path}.max", high, "max must lie between min, the default and the capacity value"))
    if valid.get("step") is not None:
        step = _bytes(valid["step"])
        if low + step > value:
            errs.append(invalid_value(f"{path}.step", step, "one step is larger than capacity value"))
        for amount in (default, *(() if high is None else (high,))):
            if step and (amount - low) % step:
                errs.append(invalid_value(f"{path}.step", amount, "value is not a multiple of a given step"))
    return errs


def _bytes(quantity: Any) -> int:
    """A quantity the decoder already accepted, as an integer (the driver writes no fractions)."""
    return parse_bytes(str(quantity))


def _map(entries: JSON, path: str, check: Callable[[Any, str], list[FieldError]]) -> list[FieldError]:
    errs: list[FieldError] = []
    for key, value in sorted(entries.items()):
        errs += _qualified_attribute_name(key, path)
        errs += check(value, f"{path}[{_truncate(key)}]")
    return errs


def _truncate(key: str, limit: int = DEVICE_MAX_DOMAIN_LENGTH + 1 + DEVICE_MAX_ID_LENGTH) -> str:
    if len(key) <= limit:
        return key
    remaining = limit - 3
    return key[: (remaining + 1) // 2] + "..." + key[len(key) - remaining // 2 :]


def _qualified_attribute_name(name: str, path: str) -> list[FieldError]:
    """`validateQualifiedName`: an optional driver-style domain, a slash, and a C identifier."""
    parts = name.split("/")
    if len(parts) > 2:
        return [invalid_value(path, name, "must not contain more than one slash")]
    errs: list[FieldError] = []
    if len(parts) == 2:
        domain = parts[0]
        errs += _driver_name(domain, path) if domain else [invalid_value(path, "", "the domain must not be empty")]
    ident = parts[-1]
    if len(parts) == 2 and not ident:
        return [*errs, invalid_value(path, "", "the name must not be empty")]
    if len(ident) > DEVICE_MAX_ID_LENGTH:
        errs.append(too_long(path, DEVICE_MAX_ID_LENGTH))
    return errs + _each(names.c_identifier(ident), path, ident)


def _attribute(attribute: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in ("string", "version"):
        value = attribute.get(key)
        if value is not None and len(value) > DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
            errs.append(too_long(f"{path}.{key}", DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH))
    if "version" in attribute and not _SEMVER.match(attribute["version"]):
        errs.append(
            invalid_value(
                f"{path}.version", attribute["version"], "must be a string compatible with semver.org spec 2.0.0"
            )
        )
    count = sum(key in attribute for key in _ATTRIBUTE_VALUE_FIELDS)
    if count != 1:
        errs.append(invalid_value(path, attribute if count else "", "exactly one value must be specified"))
    return errs


def _taints(taints: list[JSON], path: str, minor: int) -> list[FieldError]:
    effects = tuple(e for e in DEVICE_TAINT_EFFECTS if e != "None" or minor >= NONE_EFFECT_FROM_MINOR)
    if len(taints) > DEVICE_TAINTS_MAX_LENGTH:
        return [too_many(path, len(taints), DEVICE_TAINTS_MAX_LENGTH)]
    errs: list[FieldError] = []
    for i, taint in enumerate(taints):
        where = f"{path}[{i}]"
        errs += _each(names.qualified_name(taint.get("key", "")), f"{where}.key", taint.get("key", ""))
        if taint.get("value"):
            errs += _each(names.label_value(taint["value"]), f"{where}.value", taint["value"])
        effect = taint.get("effect", "")
        if not effect:
            errs.append(required(f"{where}.effect"))
        elif effect not in effects:
            errs.append(not_supported(f"{where}.effect", effect, effects))
    return errs


def _device_node_selection(device: JSON, per_device: bool, path: str) -> list[FieldError]:
    present = [key for key in ("nodeName", "nodeSelector", "allNodes") if key in device]
    if not per_device:
        if present:
            return [
                invalid_value(
                    path,
                    None,
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                )
            ]
        return []
    errs: list[FieldError] = []
    chosen = []
    if "nodeName" in device:
        if device["nodeName"]:
            chosen.append("`nodeName`")
        else:
            errs.append(invalid_value(f"{path}.nodeName", "", "must not be empty"))
    if "nodeSelector" in device:
        chosen.append("`nodeSelector`")
    if "allNodes" in device and _true_flag(device, "allNodes", path, errs):
        chosen.append("`allNodes`")
    if len(chosen) != 1:
        errs.append(
            required(path, _DEVICE_NODE_SELECTION)
            if not chosen
            else invalid_value(path, "{" + ", ".join(chosen) + "}", _DEVICE_NODE_SELECTION)
        )
    return errs
