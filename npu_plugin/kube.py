"""The only module that imports the kubernetes client (DRA mode only); errors are translated here.

The client's configuration loading and authenticated transport are used with plain-dict bodies on the
few REST paths below. The generated API classes are not instantiated: CoreV1Api alone costs the
daemon over 20 MiB of validators for calls it never makes. Every API call goes through `_request`
with one of the path constants, so tests derive the RBAC the code needs from this file.

Every response body is decoded and checked against the shapes of `kubeapi` here, in one place: a body
that is not JSON, or not the object we asked for, is a KubeApiError like any other API failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

from npu_plugin.errors import ConfigError, KubeApiError, clipped
from npu_plugin.kubeapi import Node, ResourceClaim, ResourceSlice, SliceEvent, SliceList, StoredSlice

REQUEST_TIMEOUT = 10.0
NODE = "/api/v1/nodes/{name}"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SLICE = "/apis/resource.k8s.io/v1/resourceslices/{name}"
CLAIM = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
_JSON = {"Accept": "application/json", "Content-Type": "application/json"}
_WATCH_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
T = TypeVar("T")


class MalformedError(ValueError):
    """A response body that is not the object asked for; `where` names the offending field."""


class KubeClient:
    """Blocking calls with plain-dict bodies; callers run them off the event loop. Implements `KubeApi`."""

    def __init__(self, kubeconfig: Path | None) -> None:
        import kubernetes
        import urllib3

        configuration = kubernetes.client.Configuration()
        config: Any = kubernetes.config
        try:
            if kubeconfig is not None:
                config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as error:
            if kubeconfig is not None:
                raise ConfigError(f"--kubeconfig {kubeconfig}: {error}") from None
            raise ConfigError(
                f"no in-cluster Kubernetes credentials ({error}); run in a pod with a service "
                "account or pass --kubeconfig"
            ) from None
        configuration.retries = False
        self._api: Any = kubernetes.client.ApiClient(configuration)
        self._transport_errors = (urllib3.exceptions.HTTPError, OSError)

    def _request(
        self,
        action: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT,
        stream: bool = False,
    ) -> Any:
        """The response of one authenticated request; KubeApiError unless it is a 2xx. The body is read
        unless `stream`."""
        method_, url, headers, data, post = self._api.param_serialize(
            method=method,
            resource_path=path,
            path_params=dict(params or {}),
            query_params=list((query or {}).items()),
            header_params=dict(_JSON),
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._api.call_api(
                method_, url, header_params=headers, body=data, post_params=post, _request_timeout=timeout
            )
            if not stream or not 200 <= response.status < 300:
                response.read()
        except self._transport_errors as error:
            raise KubeApiError(action, 0, str(error)) from None
        if not 200 <= response.status < 300:
            raise KubeApiError(
                action,
                response.status,
                _reason(response.read(), response.reason),
                retry_after=_retry_after(response.headers.get("Retry-After")),
            )
        return response

    def _json(self, action: str, method: str, path: str, **options: Any) -> tuple[int, dict[str, Any]]:
        """The status and decoded JSON object of a successful response."""
        response = self._request(action, method, path, **options)
        try:
            return response.status, decode_object(response.read())
        except MalformedError as error:
            raise KubeApiError(action, response.status, f"malformed response: {error}") from None

    def get_node(self, name: str) -> Node:
        action = f"get node {name}"
        status, data = self._json(action, "GET", NODE, params={"name": name})
        return checked(action, status, lambda: parse_node(data))

    def list_slices(self, node: str, driver: str) -> SliceList:
        action = "list resourceslices"
        status, data = self._json(action, "GET", SLICES, query=_selector(node, driver))
        return checked(action, status, lambda: parse_slice_list(data))

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        action = "create resourceslice" + (" (dry run)" if dry_run else "")
        query = {"dryRun": "All"} if dry_run else None
        status, data = self._json(action, "POST", SLICES, body=body, query=query)
        return checked(action, status, lambda: parse_slice(data, "the response", stored=not dry_run))

    def server_version(self) -> tuple[int, int]:
        action = "get version"
        status, data = self._json(action, "GET", "/version")
        return checked(action, status, lambda: parse_version(data))

    def replace_slice(self, name: str, body: ResourceSlice) -> StoredSlice:
        action = f"update resourceslice {name}"
        status, data = self._json(action, "PUT", SLICE, params={"name": name}, body=body)
        return checked(action, status, lambda: parse_slice(data, "the response"))

    def delete_slice(self, name: str) -> None:
        try:
            self._request(f"delete resourceslice {name}", "DELETE", SLICE, params={"name": name})
        except KubeApiError as error:
            if error.status != 404:
                raise

    def watch_slices(self, node: str, driver: str, resource_version: str, timeout_seconds: int) -> Iterator[SliceEvent]:
        action = "watch resourceslices"
        query = _selector(node, driver) | {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        response = self._request(action, "GET", SLICES, query=query, timeout=timeout_seconds + 5, stream=True)
        try:
            for line in response.response:
                if not line.endswith(b"\n"):
                    # Only the last piece of a stream cut short lacks its newline: a transport failure.
                    raise KubeApiError(action, 0, "the connection ended in the middle of an event")
                if line.strip():
                    yield checked(action, response.status, partial(parse_line, line))
        except self._transport_errors as error:
            raise KubeApiError(action, 0, str(error)) from None
        finally:
            response.response.release_conn()

    def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        action = f"get resourceclaim {namespace}/{name}"
        status, data = self._json(action, "GET", CLAIM, params={"namespace": namespace, "name": name})
        return checked(action, status, lambda: parse_claim(data))

    def close(self) -> None:
        self._api.close()


def checked(action: str, status: int, parse: Callable[[], T]) -> T:
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


def parse_slice_list(data: dict[str, Any]) -> SliceList:
    meta = _mapping(data.get("metadata"), "metadata")
    items = _list(data, "items", "the list")
    slices = tuple(parse_slice(item, f"items[{index}]") for index, item in enumerate(items))
    return SliceList(slices, _string(meta, "resourceVersion", "metadata"))


def parse_slice(value: object, where: str, *, stored: bool = True) -> StoredSlice:
    """A stored ResourceSlice (a dry run's answer has no resourceVersion: `stored` False); the server omits an
    empty device list, which becomes []."""
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


def parse_event(data: dict[str, Any]) -> SliceEvent:
    """A watch event; an ERROR event raises KubeApiError with the Status it carries."""
    kind = data.get("type")
    obj = _mapping(data.get("object"), "the event's object")
    if kind == "ERROR":
        code = obj.get("code")
        raise KubeApiError("watch resourceslices", code if isinstance(code, int) else 0, str(obj.get("message")))
    if kind not in _WATCH_TYPES:
        raise MalformedError(f"unknown watch event type {clipped(repr(kind))}")
    if kind == "BOOKMARK":
        meta = _mapping(obj.get("metadata"), "the bookmark's metadata")
        return SliceEvent("BOOKMARK", _string(meta, "resourceVersion", "the bookmark's metadata"), None)
    stored = parse_slice(obj, "the event's object")
    return SliceEvent(kind, stored["metadata"]["resourceVersion"], stored)


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


def _selector(node: str, driver: str) -> dict[str, str]:
    return {"fieldSelector": f"spec.nodeName={node},spec.driver={driver}"}


def _reason(body: bytes | None, fallback: str | None) -> str:
    try:
        return str(json.loads(body or b"").get("message") or fallback)
    except (TypeError, ValueError, AttributeError):
        return str(fallback)


def _retry_after(header: str | None) -> float | None:
    """Seconds from a Retry-After header; the API server sends whole seconds (HTTP dates are not used)."""
    try:
        return max(0.0, float(header)) if header else None
    except ValueError:
        return None
