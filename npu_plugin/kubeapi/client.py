"""The daemon's Kubernetes API client (DRA mode only): plain-dict bodies on the few REST paths
below, each response checked by `kubebodies` against the shapes of `kubeapi`.

Credentials come from `--kubeconfig` or the pod's service account (`kubeapi/kubeconfig.py`) and
requests go through `kubehttp.Transport`. Only a kubeconfig that needs an exec plugin, an
auth-provider or basic auth loads the kubernetes package, which this module alone imports (lazily):
importing it costs a DRA daemon about 0.5 CPU-seconds and 30 MiB at start, multiplied by every node
of a fleet.

Every API call goes through `_request` with one of the path constants, so tests derive the RBAC the
code needs from this file. A body that is not JSON, or not the object asked for, is a KubeApiError
like any other API failure.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from npu_plugin.errors import ConfigError, KubeApiError, clipped, describe_os_error
from npu_plugin.kubeapi.bodies import (
    MalformedError,
    checked_response,
    decode_object,
    parse_claim,
    parse_device_class_line,
    parse_device_class_list,
    parse_line,
    parse_node,
    parse_pod,
    parse_pod_list,
    parse_slice,
    parse_slice_list,
    parse_version,
)
from npu_plugin.kubeapi.connection import Authorization, Transport, TransportError, authorization_of, path_of
from npu_plugin.kubeapi.kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    Delegated,
    Endpoint,
    KubeconfigError,
    endpoint_of,
    in_cluster_endpoint,
)
from npu_plugin.kubeapi.protocol import (
    Node,
    ObjectList,
    Pod,
    ResourceClaim,
    ResourceSlice,
    SliceEvent,
    SliceList,
    StoredDeviceClass,
    StoredObject,
    StoredSlice,
    WatchEvent,
)

log = logging.getLogger(__name__)
ObjectT = TypeVar("ObjectT", bound=StoredObject)
REQUEST_TIMEOUT = 10.0
NODE = "/api/v1/nodes/{name}"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SLICE = "/apis/resource.k8s.io/v1/resourceslices/{name}"
CLAIM = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
CLAIM_STATUS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status"
PODS = "/api/v1/pods"
POD = "/api/v1/namespaces/{namespace}/pods/{name}"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # a JSON body is YAML too
DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def connect(
    kubeconfig: Path | None, environ: Mapping[str, str] = os.environ, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> Transport:
    """The transport to the API server of `kubeconfig`, or in-cluster without one; ConfigError
    otherwise."""
    try:
        if kubeconfig is None:
            endpoint = in_cluster_endpoint(environ, account_dir)
            return Transport(endpoint, authorization_of(endpoint))
        return Transport(*_kubeconfig_credentials(kubeconfig))
    except (KubeconfigError, ConfigError) as error:
        if kubeconfig is not None:
            raise ConfigError(f"--kubeconfig {kubeconfig}: {error}") from None
        raise ConfigError(
            f"no in-cluster Kubernetes credentials ({error}); run in a pod with a service account or pass --kubeconfig"
        ) from None


def _kubeconfig_credentials(path: Path) -> tuple[Endpoint, Authorization]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise KubeconfigError(describe_os_error(error)) from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(error, "problem", None) or error).split())  # PyYAML's span several lines
        raise KubeconfigError(f"not YAML{where}: {clipped(problem)}") from None
    found = endpoint_of(data, path.parent)
    if isinstance(found, Delegated):
        log.info("%s needs the kubernetes package's credential loaders", found.reason)
        return _delegated_credentials(path)
    return found, authorization_of(found)


def _delegated_credentials(path: Path) -> tuple[Endpoint, Authorization]:
    """The kubernetes package loads the kubeconfig; its configuration refreshes exec and
    auth-provider tokens as they expire."""
    import kubernetes

    configuration = kubernetes.client.Configuration()
    config: Any = kubernetes.config
    try:
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError) as error:
        raise KubeconfigError(str(error)) from None
    lock = threading.Lock()

    def authorization() -> str | None:
        with lock:  # a refresh may run an exec plugin; one at a time
            header = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        return str(header) if header else None

    def optional_path(value: object) -> Path | None:
        return Path(str(value)) if value else None

    endpoint = Endpoint(
        server=str(configuration.host).rstrip("/"),
        ca_file=optional_path(configuration.ssl_ca_cert),
        insecure=not configuration.verify_ssl,
        tls_server_name=configuration.tls_server_name or None,
        proxy=configuration.proxy or None,
        cert_file=optional_path(configuration.cert_file),
        key_file=optional_path(configuration.key_file),
    )
    return endpoint, authorization


class KubeClient:
    """Blocking calls with plain-dict bodies; callers run them off the event loop. Implements
    `KubeApi`."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    def _request(
        self,
        action: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT,
        stream: bool = False,
    ) -> Any:
        """The response of one authenticated request; KubeApiError unless it is a 2xx. The body is
        read unless `stream`."""
        data = None if body is None else json.dumps(body).encode()
        try:
            response = self._transport.request(
                method,
                path_of(path, params or {}),
                query=query,
                body=data,
                content_type=content_type,
                timeout=timeout,
                stream=stream,
            )
            if not 200 <= response.status < 300:
                detail = response.read() if stream else response.data
                response.release_conn()
                raise KubeApiError(
                    action,
                    response.status,
                    _reason(detail, response.reason),
                    retry_after=_retry_after(response.headers.get("Retry-After")),
                )
        except TransportError as error:
            raise KubeApiError(action, 0, str(error)) from None
        return response

    def _json(self, action: str, method: str, path: str, **options: Any) -> tuple[int, dict[str, Any]]:
        """The status and decoded JSON object of a successful response."""
        response = self._request(action, method, path, **options)
        try:
            return response.status, decode_object(response.data)
        except MalformedError as error:
            raise KubeApiError(action, response.status, f"malformed response: {error}") from None

    def get_node(self, name: str) -> Node:
        action = f"get node {name}"
        status, data = self._json(action, "GET", NODE, params={"name": name})
        return checked_response(action, status, lambda: parse_node(data))

    def list_slices(self, node: str, driver: str) -> SliceList:
        action = "list resourceslices"
        status, data = self._json(action, "GET", SLICES, query=_selector(node, driver))
        return checked_response(action, status, lambda: parse_slice_list(data))

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        action = "create resourceslice" + (" (dry run)" if dry_run else "")
        query = {"dryRun": "All"} if dry_run else None
        status, data = self._json(action, "POST", SLICES, body=body, query=query)
        return checked_response(action, status, lambda: parse_slice(data, "the response", stored=not dry_run))

    def server_version(self) -> tuple[int, int]:
        action = "get version"
        status, data = self._json(action, "GET", "/version")
        return checked_response(action, status, lambda: parse_version(data))

    def replace_slice(self, name: str, body: ResourceSlice) -> StoredSlice:
        action = f"update resourceslice {name}"
        status, data = self._json(action, "PUT", SLICE, params={"name": name}, body=body)
        return checked_response(action, status, lambda: parse_slice(data, "the response"))

    def delete_slice(self, name: str) -> None:
        try:
            self._request(f"delete resourceslice {name}", "DELETE", SLICE, params={"name": name})
        except KubeApiError as error:
            if error.status != 404:
                raise

    def watch_slices(self, node: str, driver: str, resource_version: str, timeout_seconds: int) -> Iterator[SliceEvent]:
        query = _selector(node, driver)
        return self._watch("watch resourceslices", SLICES, query, parse_line, resource_version, timeout_seconds)

    def list_device_classes(self) -> ObjectList[StoredDeviceClass]:
        action = "list deviceclasses"
        status, data = self._json(action, "GET", DEVICE_CLASSES)
        return checked_response(action, status, lambda: parse_device_class_list(data))

    def watch_device_classes(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[WatchEvent[StoredDeviceClass]]:
        action = "watch deviceclasses"
        return self._watch(action, DEVICE_CLASSES, {}, parse_device_class_line, resource_version, timeout_seconds)

    def _watch(  # noqa: PLR0917 - the two watches differ in exactly these
        self,
        action: str,
        path: str,
        selector: Mapping[str, str],
        parse: Callable[[bytes], WatchEvent[ObjectT]],
        resource_version: str,
        timeout_seconds: int,
    ) -> Iterator[WatchEvent[ObjectT]]:
        query = dict(selector) | {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        response = self._request(action, "GET", path, query=query, timeout=timeout_seconds + 5, stream=True)
        ended = False
        try:
            for line in response:
                if not line.endswith(b"\n"):
                    # Only the last piece of a stream cut short lacks its newline: a transport
                    # failure.
                    raise KubeApiError(action, 0, "the connection ended in the middle of an event")
                if line.strip():
                    yield checked_response(action, response.status, partial(parse, line))
            ended = True
        except TransportError as error:
            raise KubeApiError(action, 0, str(error)) from None
        finally:
            # A stream read to its end leaves a reusable connection; one abandoned midway must be
            # closed.
            if ended:
                response.release_conn()
            else:
                response.close()

    def get_json(self, action: str, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A GET of any path, its decoded JSON object: `plan`'s paginated lists and discovery, which
        its own ClusterRole grants (read-only)."""
        return self._json(action, "GET", path, query=query)[1]

    def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        action = f"get resourceclaim {namespace}/{name}"
        status, data = self._json(action, "GET", CLAIM, params={"namespace": namespace, "name": name})
        return checked_response(action, status, lambda: parse_claim(data))

    def apply_claim_status(self, namespace: str, name: str, body: Mapping[str, Any], *, field_manager: str) -> None:
        self._request(
            f"apply resourceclaim {namespace}/{name} status",
            "PATCH",
            CLAIM_STATUS,
            params={"namespace": namespace, "name": name},
            query={"fieldManager": field_manager, "force": "true"},
            body=body,
            content_type=APPLY_PATCH,
        )

    def list_pods(self, node: str) -> list[Pod]:
        action = f"list pods on node {node}"
        status, data = self._json(action, "GET", PODS, query={"fieldSelector": f"spec.nodeName={node}"})
        return checked_response(action, status, lambda: parse_pod_list(data))

    def get_pod(self, namespace: str, name: str) -> Pod:
        action = f"get pod {namespace}/{name}"
        status, data = self._json(action, "GET", POD, params={"namespace": namespace, "name": name})
        return checked_response(action, status, lambda: parse_pod(data))

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str], *, uid: str, resource_version: str = ""
    ) -> None:
        # uid and resourceVersion in a merge patch are preconditions: the server answers 409
        # Conflict when the stored pod differs.
        metadata: dict[str, Any] = {"uid": uid, "annotations": dict(annotations)}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        self._request(
            f"annotate pod {namespace}/{name}",
            "PATCH",
            POD,
            params={"namespace": namespace, "name": name},
            body={"metadata": metadata},
            content_type=MERGE_PATCH,
        )

    def close(self) -> None:
        self._transport.close()


def _selector(node: str, driver: str) -> dict[str, str]:
    return {"fieldSelector": f"spec.nodeName={node},spec.driver={driver}"}


def _reason(body: bytes | None, fallback: str | None) -> str:
    try:
        return str(json.loads(body or b"").get("message") or fallback)
    except (TypeError, ValueError, AttributeError):
        return str(fallback)


def _retry_after(header: str | None) -> float | None:
    """Seconds from a Retry-After header; the API server sends whole seconds (HTTP dates are not
    used)."""
    try:
        return max(0.0, float(header)) if header else None
    except ValueError:
        return None
