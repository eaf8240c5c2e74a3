"""The only module that imports the kubernetes client (DRA mode only); errors are translated here.

The client's configuration loading and authenticated transport are used with plain-dict bodies on the
few REST paths below. The generated API classes are not instantiated: CoreV1Api alone costs the
daemon over 20 MiB of validators for calls it never makes. Every API call goes through `_request`
with one of the path constants, so tests derive the RBAC the code needs from this file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from npu_plugin.errors import ConfigError, KubeApiError

REQUEST_TIMEOUT = 10.0
NODE = "/api/v1/nodes/{name}"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SLICE = "/apis/resource.k8s.io/v1/resourceslices/{name}"
CLAIM = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
_JSON = {"Accept": "application/json", "Content-Type": "application/json"}


class KubeClient:
    """Blocking calls with plain-dict bodies and results; callers run them off the event loop."""

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
    ) -> Any:
        """The raw response of one authenticated request; KubeApiError unless it is a 2xx."""
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
        except self._transport_errors as error:
            raise KubeApiError(action, 0, str(error)) from None
        if not 200 <= response.status < 300:
            raise KubeApiError(action, response.status, _reason(response.read(), response.reason))
        return response

    def _json(self, action: str, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = self._request(action, method, path, **options)
        try:
            data = response.read()
        except self._transport_errors as error:
            raise KubeApiError(action, 0, str(error)) from None
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def get_node(self, name: str) -> dict[str, Any]:
        return self._json(f"get node {name}", "GET", NODE, params={"name": name})

    def list_slices(self, node: str, driver: str) -> dict[str, Any]:
        return self._json("list resourceslices", "GET", SLICES, query=_selector(node, driver))

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("create resourceslice", "POST", SLICES, body=body)

    def replace_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(f"update resourceslice {name}", "PUT", SLICE, params={"name": name}, body=body)

    def delete_slice(self, name: str) -> None:
        try:
            self._json(f"delete resourceslice {name}", "DELETE", SLICE, params={"name": name})
        except KubeApiError as error:
            if error.status != 404:
                raise

    def watch_slices(
        self, node: str, driver: str, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) pairs until the server ends the watch after `timeout` seconds."""
        query = _selector(node, driver) | {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout),
        }
        response = self._request("watch resourceslices", "GET", SLICES, query=query, timeout=timeout + 5)
        try:
            for line in response.response:
                if line.strip():
                    event = json.loads(line)
                    yield str(event.get("type")), event.get("object") or {}
        except (*self._transport_errors, ValueError) as error:
            raise KubeApiError("watch resourceslices", 0, str(error)) from None
        finally:
            response.response.release_conn()

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            f"get resourceclaim {namespace}/{name}", "GET", CLAIM, params={"namespace": namespace, "name": name}
        )

    def close(self) -> None:
        self._api.close()


def _selector(node: str, driver: str) -> dict[str, str]:
    return {"fieldSelector": f"spec.nodeName={node},spec.driver={driver}"}


def _reason(body: bytes | None, fallback: str | None) -> str:
    try:
        return str(json.loads(body or b"").get("message") or fallback)
    except (TypeError, ValueError, AttributeError):
        return str(fallback)
