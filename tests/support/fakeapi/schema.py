"""Decoding of request bodies the way the API server's typed decoder does it.

Fields the Go types do not have are dropped (with a warning, or a 400 under
`fieldValidation=Strict`), JSON nulls mean "unset", and a value of the wrong JSON type is a 400, as
`encoding/json` would make it.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeAlias

from npu_plugin.sim._fakeapi.kinds import ALL_KINDS, DEVICE_CLASSES, JSON, RESOURCE_SLICES, Kind
from npu_plugin.sim._fakeapi.status import bad_request


class Leaf(Enum):
    """A scalar with the Go type it decodes into."""

    STR = "string"
    INT = "int64"
    BOOL = "bool"
    QUANTITY = "resource.Quantity"
    ANY = "any"


@dataclass(frozen=True)
class Obj:
    fields: dict[str, Node]


@dataclass(frozen=True)
class ListOf:
    item: Node


@dataclass(frozen=True)
class MapOf:
    value: Node


Node: TypeAlias = "Obj | ListOf | MapOf | Leaf"

_STR, _INT, _BOOL, _ANY = Leaf.STR, Leaf.INT, Leaf.BOOL, Leaf.ANY
_OWNER_REFERENCE = Obj(
    {
        "apiVersion": _STR,
        "kind": _STR,
        "name": _STR,
        "uid": _STR,
        "controller": _BOOL,
        "blockOwnerDeletion": _BOOL,
    }
)
_OBJECT_META = Obj(
    {
        "name": _STR,
        "generateName": _STR,
        "namespace": _STR,
        "selfLink": _STR,
        "uid": _STR,
        "resourceVersion": _STR,
        "generation": _INT,
        "creationTimestamp": _ANY,
        "deletionTimestamp": _ANY,
        "deletionGracePeriodSeconds": _INT,
        "labels": MapOf(_STR),
        "annotations": MapOf(_STR),
        "ownerReferences": ListOf(_OWNER_REFERENCE),
        "finalizers": ListOf(_STR),
        "managedFields": _ANY,
    }
)
_ATTRIBUTE = Obj({"int": _INT, "bool": _BOOL, "string": _STR, "version": _STR})
_Q = Leaf.QUANTITY
_REQUEST_POLICY = Obj({"default": _Q, "validValues": ListOf(_Q), "validRange": Obj({"min": _Q, "max": _Q, "step": _Q})})
_CAPACITY = Obj({"value": _Q, "requestPolicy": _REQUEST_POLICY})
_TAINT = Obj({"key": _STR, "value": _STR, "effect": _STR, "timeAdded": _ANY})
_DEVICE = Obj(
    {
        "name": _STR,
        "attributes": MapOf(_ATTRIBUTE),
        "capacity": MapOf(_CAPACITY),
        "consumesCounters": _ANY,
        "nodeName": _STR,
        "nodeSelector": _ANY,
        "allNodes": _BOOL,
        "taints": ListOf(_TAINT),
        "bindsToNode": _BOOL,
        "bindingConditions": ListOf(_STR),
        "bindingFailureConditions": ListOf(_STR),
        "allowMultipleAllocations": _BOOL,
    }
)
_SLICE_SPEC = Obj(
    {
        "driver": _STR,
        "pool": Obj({"name": _STR, "generation": _INT, "resourceSliceCount": _INT}),
        "nodeName": _STR,
        "nodeSelector": _ANY,
        "allNodes": _BOOL,
        "devices": ListOf(_DEVICE),
        "perDeviceNodeSelection": _BOOL,
        "sharedCounters": _ANY,
    }
)
_TYPE_META: dict[str, Node] = {"apiVersion": _STR, "kind": _STR, "metadata": _OBJECT_META}
# The kinds only `plan` reads are decoded loosely: metadata typed, spec and status as they come.
SCHEMAS: dict[Kind, Obj] = {
    **{kind: Obj({**_TYPE_META, "spec": _ANY, "status": _ANY}) for kind in ALL_KINDS},
    RESOURCE_SLICES: Obj({**_TYPE_META, "spec": _SLICE_SPEC}),
    DEVICE_CLASSES: Obj({**_TYPE_META, "spec": Obj({"selectors": _ANY, "config": _ANY, "extendedResourceName": _STR})}),
}

_QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(_QUANTITY_PATTERN)
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


@dataclass
class _Walk:
    unknown: list[str] = field(default_factory=list)
    type_errors: list[str] = field(default_factory=list)


def decode(kind: Kind, body: Any, field_validation: str) -> tuple[JSON, list[str]]:
    """Return the typed view of `body` and the `Warning` header texts; raise 400 where the server
    would."""
    prefix = f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
    if not isinstance(body, dict):
        raise bad_request(prefix + "json: cannot unmarshal non-object into Go value of type " + kind.kind)
    _check_type_meta(kind, body, prefix)
    walk = _Walk()
    obj = _prune(SCHEMAS[kind], copy.deepcopy(body), "", walk)
    if walk.type_errors:
        raise bad_request(prefix + walk.type_errors[0])
    unknown = [f'unknown field "{path}"' for path in walk.unknown]
    if unknown and field_validation == "Strict":
        raise bad_request(prefix + "strict decoding error: " + ", ".join(unknown))
    obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
    return obj, unknown if field_validation != "Ignore" else []


def _check_type_meta(kind: Kind, body: JSON, prefix: str) -> None:
    if body.get("apiVersion") not in (None, "", kind.api_version):
        raise bad_request(
            f"the API version in the data ({body['apiVersion']}) does not match the expected API version "
            f"({kind.api_version})"
        )
    if body.get("kind") not in (None, "", kind.kind):
        raise bad_request(f"{prefix}the kind in the data ({body['kind']}) does not match the expected kind")


def _prune(node: Node, value: Any, path: str, walk: _Walk) -> Any:
    if isinstance(node, Leaf):
        _check_leaf(node, value, path, walk)
        return value
    if isinstance(node, ListOf):
        if not _expect(value, list, path, "[]", walk):
            return value
        return [_prune(node.item, item, f"{path}[{i}]", walk) for i, item in enumerate(value)]
    if not _expect(value, dict, path, "map" if isinstance(node, MapOf) else "struct", walk):
        return value
    if isinstance(node, MapOf):
        return {k: _prune(node.value, v, f"{path}[{k}]", walk) for k, v in value.items()}
    return _prune_struct(node, value, path, walk)


def _prune_struct(node: Obj, value: JSON, path: str, walk: _Walk) -> JSON:
    kept: JSON = {}
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key not in node.fields:
            walk.unknown.append(child)
        elif item is not None:
            kept[key] = _prune(node.fields[key], item, child, walk)
    return kept


def _expect(value: Any, wanted: type, path: str, go_type: str, walk: _Walk) -> bool:
    if isinstance(value, wanted):
        return True
    walk.type_errors.append(_type_error(value, path, go_type))
    return False


def _check_leaf(leaf: Leaf, value: Any, path: str, walk: _Walk) -> None:
    if leaf is Leaf.ANY:
        return
    if leaf is Leaf.QUANTITY:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            walk.type_errors.append(_type_error(value, path, leaf.value))
        elif not _QUANTITY.match(str(value)):
            walk.type_errors.append(f"quantities must match the regular expression '{_QUANTITY_PATTERN}'")
        return
    wanted: type = {Leaf.STR: str, Leaf.INT: int, Leaf.BOOL: bool}[leaf]
    ok = isinstance(value, wanted) and not (leaf is Leaf.INT and isinstance(value, bool))
    if not ok:
        walk.type_errors.append(_type_error(value, path, leaf.value))


def _type_error(value: Any, path: str, go_type: str) -> str:
    json_type = _JSON_TYPES.get(type(value), "value")
    return f"json: cannot unmarshal {json_type} into Go struct field .{path} of type {go_type}"
