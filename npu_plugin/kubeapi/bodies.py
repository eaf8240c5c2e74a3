"""Response bodies of the API server checked against the shapes of `kubeapi` (pure): a body that is
not JSON, or not the object asked for (a missing name or resourceVersion, a device list that is not
a list), is a MalformedError naming the field, which `checked` turns into the KubeApiError of the
request."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

from npu_plugin.errors import KubeApiError, clipped
from npu_plugin.kubeapi.protocol import (
    Node,
    ObjectList,
    Pod,
    ResourceClaim,
    SliceEvent,
    SliceList,
    StoredDeviceClass,
    StoredObject,
    StoredSlice,
    WatchEvent,
)

_WATCH_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
T = TypeVar("T")
ObjectT = TypeVar("ObjectT", bound=StoredObject)


class MalformedError(ValueError):
    """A response body that is not the object asked for; `where` names the offending field."""


def checked_response(action: str, status: int, parse: Callable[[], T]) -> T:
    """`parse()`, with a MalformedError body turned into the KubeApiError of `action`."""
    try:
        return parse()
    except MalformedError as error:
        raise KubeApiError(action, status, f"malformed response: {error}") from None


def parse_version(data: dict[str, Any]) -> tuple[int, int]:
    """`{"major": "1", "minor": "35"}`; managed clusters say `"35+"`."""
    try:
        return int(str(data["major"]).rstrip("+")), int(str(data["minor"]).rstrip("+"))
    except (KeyError, ValueError):
        raise MalformedError(f"/version has no numeric major and minor: {clipped(json.dumps(data))!r}") from None


def decode_object(data: bytes | None) -> dict[str, Any]:
    """A JSON object from a response body; MalformedError (naming what came instead) otherwise."""
    try:
        value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        raise MalformedError(f"not JSON: {clipped((data or b'').decode('utf-8', 'replace'))!r}") from None
    return _mapping(value, "the body")


def parse_node(data: dict[str, Any]) -> Node:
    _meta(data, "the Node")
    return cast(Node, data)


def parse_claim(data: dict[str, Any]) -> ResourceClaim:
    _meta(data, "the ResourceClaim")
    return cast(ResourceClaim, data)


def parse_pod(value: object, where: str = "the Pod") -> Pod:
    data = _mapping(value, where)
    meta = _meta(data, where, "name", "namespace", "uid", "resourceVersion")
    meta["annotations"] = _mapping(meta.get("annotations", {}), f"{where}.metadata.annotations")
    for key in ("spec", "status"):
        data[key] = _mapping(data.get(key, {}), f"{where}.{key}")
    return cast(Pod, data)


def parse_pod_list(data: dict[str, Any]) -> list[Pod]:
    return [parse_pod(item, f"items[{index}]") for index, item in enumerate(_list(data, "items", "the list"))]


def parse_slice_list(data: dict[str, Any]) -> SliceList:
    meta = _mapping(data.get("metadata"), "metadata")
    items = _list(data, "items", "the list")
    slices = tuple(parse_slice(item, f"items[{index}]") for index, item in enumerate(items))
    return SliceList(slices, _string(meta, "resourceVersion", "metadata"))


def parse_slice(value: object, where: str, *, stored: bool = True) -> StoredSlice:
    """A stored ResourceSlice (a dry run's answer has no resourceVersion: `stored` False); the
    server omits an empty device list, which becomes []."""
    data = _mapping(value, where)
    meta = _meta(data, where, "name", *(("resourceVersion",) if stored else ()))
    for index, owner in enumerate(_list(meta, "ownerReferences", f"{where}.metadata")):
        _string(_mapping(owner, f"{where}.metadata.ownerReferences[{index}]"), "uid", "ownerReferences")
    spec = _mapping(data.get("spec"), f"{where}.spec")
    for key in ("driver", "nodeName"):
        _string(spec, key, f"{where}.spec")
    pool = _mapping(spec.get("pool"), f"{where}.spec.pool")
    _string(pool, "name", f"{where}.spec.pool")
    for key in ("generation", "resourceSliceCount"):
        if not isinstance(pool.get(key), int):
            raise MalformedError(f"{where}.spec.pool.{key} is not an integer")
    spec["devices"] = _list(spec, "devices", f"{where}.spec")
    for index, device in enumerate(spec["devices"]):
        entry = _mapping(device, f"{where}.spec.devices[{index}]")
        _string(entry, "name", f"{where}.spec.devices[{index}]")
        for key in ("attributes", "capacity"):
            entry[key] = _mapping(entry.get(key, {}), f"{where}.spec.devices[{index}].{key}")
        for taint in _list(entry, "taints", f"{where}.spec.devices[{index}]"):
            _mapping(taint, f"{where}.spec.devices[{index}].taints[]")
    return cast(StoredSlice, data)


def parse_line(line: bytes) -> SliceEvent:
    return parse_event(decode_object(line))


def parse_device_class_line(line: bytes) -> WatchEvent[StoredDeviceClass]:
    return parse_event(decode_object(line), parse_device_class, "deviceclasses")


def parse_device_class_list(data: dict[str, Any]) -> ObjectList[StoredDeviceClass]:
    meta = _mapping(data.get("metadata"), "metadata")
    items = _list(data, "items", "the list")
    classes = tuple(parse_device_class(item, f"items[{index}]") for index, item in enumerate(items))
    return ObjectList(classes, _string(meta, "resourceVersion", "metadata"))


def parse_device_class(value: object, where: str) -> StoredDeviceClass:
    """A stored DeviceClass; only `extendedResourceName` is read, and it must be a string when set."""
    data = _mapping(value, where)
    _meta(data, where, "name", "resourceVersion")
    spec = _mapping(data.setdefault("spec", {}), f"{where}.spec")
    name = spec.get("extendedResourceName")
    if name is not None and not isinstance(name, str):
        raise MalformedError(f"{where}.spec.extendedResourceName is not a string")
    return cast(StoredDeviceClass, data)


def parse_event(
    data: dict[str, Any],
    parse_object: Callable[[object, str], ObjectT] = parse_slice,  # type: ignore[assignment]
    what: str = "resourceslices",
) -> WatchEvent[ObjectT]:
    """A watch event of `what`; an ERROR event raises KubeApiError with the Status it carries."""
    kind = data.get("type")
    obj = _mapping(data.get("object"), "the event's object")
    if kind == "ERROR":
        code = obj.get("code")
        raise KubeApiError(f"watch {what}", code if isinstance(code, int) else 0, str(obj.get("message")))
    if kind not in _WATCH_TYPES:
        raise MalformedError(f"unknown watch event type {clipped(repr(kind))}")
    if kind == "BOOKMARK":
        meta = _mapping(obj.get("metadata"), "the bookmark's metadata")
        return WatchEvent("BOOKMARK", _string(meta, "resourceVersion", "the bookmark's metadata"), None)
    stored = parse_object(obj, "the event's object")
    return WatchEvent(kind, stored["metadata"]["resourceVersion"], stored)


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedError(f"{where} is not an object but {clipped(repr(value))}")
    return value


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedError(f"{where}.{key} is not a list")
    return value


def _string(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedError(f"{where}.{key} is missing or not a string")
    return value


def _meta(data: dict[str, Any], where: str, *required: str) -> dict[str, Any]:
    meta = _mapping(data.get("metadata"), f"{where}.metadata")
    for key in required:
        _string(meta, key, f"{where}.metadata")
    return meta
