"""The metrics port over real HTTP on loopback: /metrics only, and a port in use named with its flag."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from npu_plugin.errors import NpuPluginError
from npu_plugin.observability.metrics import Metrics


@pytest.fixture
def port() -> Iterator[int]:
    server = Metrics().serve(0, "127.0.0.1")
    yield server.server_port
    server.shutdown()
    server.server_close()


def status(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize("path", ["/metrics", "/metrics?name[]=npu_plugin_devices"])
def test_metrics_are_served_at_metrics(port: int, path: str) -> None:
    code, body = status(port, path)
    assert code == 200 and "npu_plugin_devices" in body


@pytest.mark.parametrize("path", ["/", "/healthz", "/metrics/", "/metricsx", "/favicon.ico", "/debug/pprof"])
def test_every_other_path_is_not_found(port: int, path: str) -> None:
    code, body = status(port, path)
    assert code == 404 and "npu_plugin" not in body, body


def test_a_port_in_use_names_the_flag_and_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(NpuPluginError) as raised:
            Metrics().serve(port, "127.0.0.1")
    assert str(raised.value) == f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}: " + (
        "Address already in use (EADDRINUSE)"
    )
