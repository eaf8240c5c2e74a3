"""A minimal blocking JSON client of the Kubernetes REST API, for the simulators (plain urllib)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"


def claims_path(namespace: str, name: str = "") -> str:
    base = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}/resourceclaims"
    return f"{base}/{quote(name, safe='')}" if name else base


class RestError(Exception):
    """The server answered with an error status, or could not be reached (`status` 0)."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status or 'unreachable'}: {message}")
        self.status = status


class RestClient:
    """Plain JSON over HTTP, no credentials: meant for the fake API server on loopback."""

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url, self.timeout = base_url.rstrip("/"), timeout

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None, body: Any = None) -> Any:
        url = self.base_url + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise RestError(method, path, error.code, _message(error.read())) from None
        except (urllib.error.URLError, OSError) as error:
            raise RestError(method, path, 0, str(error)) from None


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")
