"""An authenticated connection pool to the API server: TLS set up from an `Endpoint`, a bearer token
that follows its file as the kubelet rotates it, and urllib3 underneath (the transport the
kubernetes package uses too, without its 0.5 CPU-seconds and ~30 MiB of generated models at start).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from urllib3.connection import HTTPConnection

from npu_plugin import __version__
from npu_plugin.errors import ConfigError, describe_os_error
from npu_plugin.kubeapi.kubeconfig import Endpoint

log = logging.getLogger(__name__)
TOKEN_RELOAD_SECONDS = 60.0  # as client-go re-reads a token file
CONNECT_TIMEOUT = 10.0
USER_AGENT = f"npu-plugin/{__version__}"
# Connections kept for reuse: the informer's watch, the publisher's writes and Prepares' claim reads
# run at once, and a connection returned to a full pool is closed (next time: a new TLS handshake)
# with a urllib3 warning.
POOL_SIZE = 4
# A watch reads one connection for up to ten minutes: if the network loses it silently (the API
# server's host gone, a NAT forgetting an idle flow) nothing arrives until the read timeout.
# Keep-alive probes (idle 30 s, as Go's dialer under client-go, then 3 every 10 s) end such a
# connection within about a minute and the watch resumes.
KEEPALIVE = [
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30),
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
]
TransportError = (urllib3.exceptions.HTTPError, OSError)
Authorization = Callable[[], str | None]


class TokenFile:
    """A bearer token read from a file at most every `reload_seconds`; a failed re-read keeps the
    last token (warned once), since the kubelet rewrites a projected token atomically well before it
    expires."""

    def __init__(
        self, path: Path, reload_seconds: float = TOKEN_RELOAD_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._path, self._reload_seconds, self._clock = path, reload_seconds, clock
        self._lock = threading.Lock()
        self._token = self._read()
        self._read_at = clock()
        self._warned = False

    def _read(self) -> str:
        try:
            token = self._path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            detail = describe_os_error(error, self._path) if isinstance(error, OSError) else f"{self._path}: not text"
            raise ConfigError(f"cannot read the token: {detail}") from None
        if not token:
            raise ConfigError(f"cannot read the token: {self._path} is empty")
        return token

    def __call__(self) -> str:
        with self._lock:
            if self._clock() - self._read_at >= self._reload_seconds:
                self._read_at = self._clock()
                try:
                    self._token, self._warned = self._read(), False
                except ConfigError as error:
                    if not self._warned:
                        log.warning("%s; still sending the token read before", error, extra={"path": str(self._path)})
                        self._warned = True
            return f"Bearer {self._token}"


def authorization_of(endpoint: Endpoint) -> Authorization:
    """The Authorization header's value for each request: a token file's, a fixed token's, or
    none."""
    if endpoint.token_file is not None:
        return TokenFile(endpoint.token_file)
    header = f"Bearer {endpoint.token}" if endpoint.token else None
    return lambda: header


def tls_context(endpoint: Endpoint) -> ssl.SSLContext:
    """Verifies the server against the endpoint's CA (only that CA when one is given, as kubectl
    does) and presents its client certificate; ConfigError names a file that cannot be used."""
    try:
        ca_data = endpoint.ca_data.decode("ascii") if endpoint.ca_data is not None else None
        context = ssl.create_default_context(cafile=str(endpoint.ca_file) if endpoint.ca_file else None, cadata=ca_data)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as error:
        where = endpoint.ca_file or "certificate-authority-data"
        raise ConfigError(f"cannot use the certificate authority {where}: {_reason(error)}") from None
    if endpoint.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    _load_client_certificate(context, endpoint)
    return context


def _load_client_certificate(context: ssl.SSLContext, endpoint: Endpoint) -> None:
    cert, key = endpoint.cert_file or endpoint.cert_data, endpoint.key_file or endpoint.key_data
    if cert is None and key is None:
        return
    if cert is None or key is None:
        raise ConfigError("a client certificate needs both client-certificate and client-key")
    # ssl loads certificates only from files: inline data goes through a private directory removed
    # at once.
    with tempfile.TemporaryDirectory(prefix="npu-plugin-tls-") as private:
        paths = [_as_file(value, Path(private) / name) for value, name in ((cert, "cert.pem"), (key, "key.pem"))]
        try:
            context.load_cert_chain(paths[0], paths[1])
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"cannot use the client certificate and key: {_reason(error)}") from None


def _as_file(value: Path | bytes, private: Path) -> Path:
    if isinstance(value, Path):
        return value
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(value)
    return private


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError):
        return error.reason or str(error)
    if isinstance(error, OSError):
        return describe_os_error(error)
    return str(error)


class Transport:
    """One pool of keep-alive connections to the API server, shared by every thread of the
    daemon."""

    def __init__(self, endpoint: Endpoint, authorization: Authorization) -> None:
        self.server = endpoint.server
        self._authorization = authorization
        options: dict[str, Any] = {
            "retries": False,
            "maxsize": POOL_SIZE,
            "socket_options": [*HTTPConnection.default_socket_options, *KEEPALIVE],
        }
        if endpoint.server.startswith("https:"):
            options["ssl_context"] = tls_context(endpoint)
            if endpoint.insecure:
                options |= {"cert_reqs": "CERT_NONE", "assert_hostname": False}
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
                log.warning("insecure-skip-tls-verify: the API server's certificate is not checked")
            if endpoint.tls_server_name:
                options["server_hostname"] = endpoint.tls_server_name
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(endpoint.proxy, **options) if endpoint.proxy else urllib3.PoolManager(**options)
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """The response; its body is read unless `stream`. Raises one of `TransportError` when the
        server cannot be reached or the connection breaks."""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = content_type
        if (authorization := self._authorization()) is not None:
            headers["Authorization"] = authorization
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        return self._pool.request(
            method,
            url,
            body=body,
            headers=headers,
            timeout=urllib3.Timeout(connect=min(CONNECT_TIMEOUT, timeout), read=timeout),
            preload_content=not stream,
        )

    def close(self) -> None:
        self._pool.clear()


def path_of(template: str, params: Mapping[str, str]) -> str:
    """`template` with each `{name}` replaced by the quoted parameter."""
    return template.format_map({key: quote(value, safe="") for key, value in params.items()})
