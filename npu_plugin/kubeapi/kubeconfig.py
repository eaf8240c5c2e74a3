"""Where the API server is and how to authenticate to it: a kubeconfig's current context, or the
pod's service account (in-cluster). Pure: files named by the kubeconfig are recorded as paths, not
read.

A kubeconfig whose user runs an `exec` plugin, uses an `auth-provider` or basic auth is `Delegated`:
the kubernetes package (imported only then) loads it, as those need its plugin runners.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_DELEGATED_USER_KEYS = ("exec", "auth-provider", "username", "password")


class KubeconfigError(ValueError):
    """A kubeconfig (or in-cluster environment) we cannot use; the message names the field."""


@dataclass(frozen=True)
class Endpoint:
    """The API server's URL and the credentials to present; `*_data` are the decoded inline
    contents."""

    server: str
    ca_file: Path | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    cert_file: Path | None = None
    cert_data: bytes | None = None
    key_file: Path | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: Path | None = None


@dataclass(frozen=True)
class Delegated:
    """The user needs the kubernetes package's loaders; `reason` names the field that asks for
    them."""

    reason: str


def endpoint_of(config: object, base_dir: Path) -> Endpoint | Delegated:
    """The current context's endpoint; relative file names are relative to the kubeconfig's
    directory."""
    root = _mapping(config, "the kubeconfig")
    current = root.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError("current-context is not set")
    context = _named(root, "contexts", "context", current)
    cluster = _named(root, "clusters", "cluster", _text(context, "cluster", f"context {current!r}"))
    user_name = context.get("user")
    user = _named(root, "users", "user", user_name) if isinstance(user_name, str) and user_name else {}
    for key in _DELEGATED_USER_KEYS:
        if user.get(key):
            return Delegated(f"users[{user_name!r}].{key}")
    where, who = f"clusters[{context['cluster']!r}]", f"users[{user_name!r}]"
    if _flag(cluster, "insecure-skip-tls-verify", where) and (
        cluster.get("certificate-authority") or cluster.get("certificate-authority-data")
    ):
        # As kubectl and client-go refuse it: which of the two was meant cannot be told.
        raise KubeconfigError(f"{where}: insecure-skip-tls-verify and a certificate authority exclude each other")
    return Endpoint(
        server=_server(_text(cluster, "server", where), where),
        ca_file=_path(cluster, "certificate-authority", where, base_dir),
        ca_data=_data(cluster, "certificate-authority-data", where),
        insecure=_flag(cluster, "insecure-skip-tls-verify", where),
        tls_server_name=_optional_text(cluster, "tls-server-name", where),
        proxy=_proxy(_optional_text(cluster, "proxy-url", where), where),
        cert_file=_path(user, "client-certificate", who, base_dir),
        cert_data=_data(user, "client-certificate-data", who),
        key_file=_path(user, "client-key", who, base_dir),
        key_data=_data(user, "client-key-data", who),
        token=_optional_text(user, "token", who),
        token_file=_path(user, "tokenFile", who, base_dir),
    )


def in_cluster_endpoint(environ: Mapping[str, str], account_dir: Path = SERVICE_ACCOUNT_DIR) -> Endpoint:
    """The API server as a pod sees it: the service's host and port from the environment, and the
    service account's token and CA (the token file is re-read as the kubelet rotates it)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeconfigError("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise KubeconfigError(f"KUBERNETES_SERVICE_PORT is not a port number: {port!r}")
    return Endpoint(
        server=f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",  # an IPv6 address
        ca_file=account_dir / "ca.crt",
        token_file=account_dir / "token",
    )


def _server(url: str, where: str) -> str:
    return _http_url(url, f"{where}.server", "https://10.0.0.1:6443").rstrip("/")


def _proxy(url: str | None, where: str) -> str | None:
    # urllib3 speaks to HTTP(S) proxies only; client-go's socks5 would otherwise fail at start with
    # a traceback.
    return None if url is None else _http_url(url, f"{where}.proxy-url", "http://proxy:3128")


def _http_url(url: str, field: str, example: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeconfigError(f"{field}: expected an http(s) URL like {example}, got {url!r}")
    return url


def _named(root: Mapping[str, Any], section: str, key: str, name: object) -> dict[str, Any]:
    entries = root.get(section)
    if not isinstance(entries, list):
        raise KubeconfigError(f"{section} is missing or not a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            return _mapping(entry.get(key) or {}, f"{section}[{name!r}].{key}")
    raise KubeconfigError(f"{section} has no entry named {name!r}")


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise KubeconfigError(f"{where} is not a mapping")
    return value


def _text(data: Mapping[str, Any], key: str, where: str) -> str:
    value = _optional_text(data, key, where)
    if value is None:
        raise KubeconfigError(f"{where}.{key} is not set")
    return value


def _optional_text(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{where}.{key} is not a string")
    return value


def _flag(data: Mapping[str, Any], key: str, where: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise KubeconfigError(f"{where}.{key} is not true or false")
    return value


def _path(data: Mapping[str, Any], key: str, where: str, base_dir: Path) -> Path | None:
    value = _optional_text(data, key, where)
    return None if value is None else base_dir / Path(value).expanduser()


def _data(data: Mapping[str, Any], key: str, where: str) -> bytes | None:
    value = _optional_text(data, key, where)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"{where}.{key} is not base64") from None
