"""The only module that imports the kubernetes client (DRA mode only); errors are translated here."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from npu_plugin.errors import KubeApiError

T = TypeVar("T")
REQUEST_TIMEOUT = 10.0


class KubeClient:
    """Blocking calls with plain-dict bodies and results; callers run them off the event loop."""

    def __init__(self, kubeconfig: Path | None) -> None:
        import kubernetes

        configuration = kubernetes.client.Configuration()
        config: Any = kubernetes.config
        try:
            if kubeconfig is not None:
                config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as error:
            source = str(kubeconfig) if kubeconfig else "in-cluster service account"
            raise KubeApiError(f"loading Kubernetes credentials from {source}", 0, str(error)) from None
        configuration.retries = False
        # Typed as Any on purpose: bodies and results are plain dicts, never the client's models.
        self._api_client: Any = kubernetes.client.ApiClient(configuration)
        self._core: Any = kubernetes.client.CoreV1Api(self._api_client)
        self._resource: Any = kubernetes.client.ResourceV1Api(self._api_client)
        self._exception: type[Exception] = kubernetes.client.ApiException

    def _call(self, action: str, call: Callable[[], Any]) -> dict[str, Any]:
        import urllib3

        try:
            response = call()
        except self._exception as error:
            raise KubeApiError(action, int(getattr(error, "status", 0) or 0), _reason(error)) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubeApiError(action, 0, str(error)) from None
        data = response.data
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def get_node(self, name: str) -> dict[str, Any]:
        return self._call(
            f"get node {name}",
            lambda: self._core.read_node(name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT),
        )

    def list_slices(self, node: str, driver: str) -> dict[str, Any]:
        selector = f"spec.nodeName={node},spec.driver={driver}"
        return self._call(
            "list resourceslices",
            lambda: self._resource.list_resource_slice(
                field_selector=selector, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "create resourceslice",
            lambda: self._resource.create_resource_slice(
                body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def replace_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            f"update resourceslice {name}",
            lambda: self._resource.replace_resource_slice(
                name, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def delete_slice(self, name: str) -> None:
        try:
            self._call(
                f"delete resourceslice {name}",
                lambda: self._resource.delete_resource_slice(
                    name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                ),
            )
        except KubeApiError as error:
            if error.status != 404:
                raise

    def watch_slices(
        self, node: str, driver: str, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) pairs until the server ends the watch after `timeout` seconds."""
        import urllib3

        selector = f"spec.nodeName={node},spec.driver={driver}"
        try:
            response = self._resource.list_resource_slice(
                field_selector=selector,
                watch=True,
                resource_version=resource_version,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=timeout + 5,
            )
            for line in response:
                if line.strip():
                    event = json.loads(line)
                    yield str(event.get("type")), event.get("object") or {}
        except self._exception as error:
            raise KubeApiError("watch resourceslices", int(getattr(error, "status", 0) or 0), _reason(error)) from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            raise KubeApiError("watch resourceslices", 0, str(error)) from None

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(
            f"get resourceclaim {namespace}/{name}",
            lambda: self._resource.read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    def close(self) -> None:
        self._api_client.close()


def _reason(error: Any) -> str:
    try:
        body = json.loads(error.body)
        return str(body.get("message") or error.reason)
    except (TypeError, ValueError):
        return str(error.reason)
