"""Where the API server is and which credentials to present: kubeconfig parsing (pure), the
in-cluster endpoint, and the bearer token that follows its file."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.errors import ConfigError
from npu_plugin.kubeapi.connection import TokenFile, authorization_of, tls_context
from npu_plugin.kubeapi.kubeconfig import Delegated, Endpoint, KubeconfigError, endpoint_of, in_cluster_endpoint

BASE = Path("/etc/kube")
PEM = b"-----BEGIN CERTIFICATE-----\n"


def kubeconfig(
    cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None, **root: Any
) -> dict[str, Any]:
    return {
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://10.0.0.1:6443", **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        **root,
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (kubeconfig(), Endpoint("https://10.0.0.1:6443")),
        (kubeconfig({"server": "http://127.0.0.1:8080/"}), Endpoint("http://127.0.0.1:8080")),
        (
            kubeconfig({"certificate-authority": "pki/ca.crt", "tls-server-name": "api"}, {"token": "t"}),
            Endpoint("https://10.0.0.1:6443", ca_file=BASE / "pki/ca.crt", tls_server_name="api", token="t"),
        ),
        (
            kubeconfig({"certificate-authority-data": b64(PEM)}, {"tokenFile": "/run/token"}),
            Endpoint("https://10.0.0.1:6443", ca_data=PEM, token_file=Path("/run/token")),
        ),
        (
            kubeconfig({"insecure-skip-tls-verify": True, "proxy-url": "http://proxy:3128"}),
            Endpoint("https://10.0.0.1:6443", insecure=True, proxy="http://proxy:3128"),
        ),
        (
            kubeconfig(user={"client-certificate": "c.crt", "client-key-data": b64(b"key")}),
            Endpoint("https://10.0.0.1:6443", cert_file=BASE / "c.crt", key_data=b"key"),
        ),
        (
            kubeconfig(user={"client-certificate-data": b64(b"cert"), "client-key": "/abs/k.key"}),
            Endpoint("https://10.0.0.1:6443", cert_data=b"cert", key_file=Path("/abs/k.key")),
        ),
        (kubeconfig(user={"exec": {"command": "aws"}}), Delegated("users['u'].exec")),
        (kubeconfig(user={"auth-provider": {"name": "oidc"}}), Delegated("users['u'].auth-provider")),
        (kubeconfig(user={"username": "admin", "password": "x"}), Delegated("users['u'].username")),
        (
            {**kubeconfig(), "contexts": [{"name": "c", "context": {"cluster": "k"}}], "users": []},
            Endpoint("https://10.0.0.1:6443"),
        ),
    ],
    ids=[
        "plain",
        "http",
        "ca-file",
        "ca-data",
        "insecure-proxy",
        "cert-file",
        "cert-data",
        "exec",
        "provider",
        "basic",
        "anonymous",
    ],
)
def test_the_current_context_gives_the_endpoint(config: dict[str, Any], expected: Endpoint | Delegated) -> None:
    assert endpoint_of(config, BASE) == expected


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("just text", "the kubeconfig is not a mapping"),
        (kubeconfig(**{"current-context": ""}), "current-context is not set"),
        (kubeconfig(**{"current-context": "other"}), "contexts has no entry named 'other'"),
        ({**kubeconfig(), "clusters": "k"}, "clusters is missing or not a list"),
        ({**kubeconfig(), "clusters": []}, "clusters has no entry named 'k'"),
        ({**kubeconfig(), "contexts": [{"name": "c", "context": {"user": "u"}}]}, "context 'c'.cluster is not set"),
        ({**kubeconfig(), "users": []}, "users has no entry named 'u'"),
        (kubeconfig({"server": ""}), "clusters['k'].server is not set"),
        (kubeconfig({"server": "10.0.0.1:6443"}), "clusters['k'].server: expected an http(s) URL"),
        (kubeconfig({"server": "ftp://h"}), "expected an http(s) URL like https://10.0.0.1:6443, got 'ftp://h'"),
        (
            kubeconfig({"proxy-url": "socks5://proxy:1080"}),
            "clusters['k'].proxy-url: expected an http(s) URL like http://proxy:3128, got 'socks5://proxy:1080'",
        ),
        (kubeconfig({"proxy-url": "proxy:3128"}), "clusters['k'].proxy-url: expected an http(s) URL"),
        (kubeconfig({"certificate-authority-data": "%%%"}), "clusters['k'].certificate-authority-data is not base64"),
        (
            kubeconfig({"insecure-skip-tls-verify": "yes"}),
            "clusters['k'].insecure-skip-tls-verify is not true or false",
        ),
        (kubeconfig(user={"token": 42}), "users['u'].token is not a string"),
        (
            kubeconfig({"insecure-skip-tls-verify": True, "certificate-authority": "ca.crt"}),
            "clusters['k']: insecure-skip-tls-verify and a certificate authority exclude each other",
        ),
        (kubeconfig(user={"client-key": ["k"]}), "users['u'].client-key is not a string"),
        ({**kubeconfig(), "clusters": [{"name": "k", "cluster": "x"}]}, "clusters['k'].cluster is not a mapping"),
    ],
)
def test_a_kubeconfig_we_cannot_use_names_the_field(config: object, message: str) -> None:
    with pytest.raises(KubeconfigError) as raised:
        endpoint_of(config, BASE)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("host", "server"),
    [
        ("10.96.0.1", "https://10.96.0.1:443"),
        ("fd00::1", "https://[fd00::1]:443"),
        ("api.local", "https://api.local:443"),
    ],
)
def test_in_cluster_the_service_environment_and_the_account_directory(host: str, server: str) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    endpoint = in_cluster_endpoint(environ, Path("/sa"))
    assert endpoint == Endpoint(server, ca_file=Path("/sa/ca.crt"), token_file=Path("/sa/token"))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_token_file_is_read_again_once_a_minute_and_a_failed_read_keeps_the_last_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock = tmp_path / "token", Clock()
    path.write_text("one\n")
    token = TokenFile(path, clock=clock)
    path.write_text("two")
    clock.now = 59.0
    assert token() == "Bearer one"
    clock.now = 60.0
    assert token() == "Bearer two"
    path.unlink()
    caplog.set_level(logging.WARNING)
    for minute in (2, 3):
        clock.now = 60.0 * minute
        assert token() == "Bearer two"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "cannot read the token" in warnings[0] and "No such file" in warnings[0]
    path.write_text("three")
    clock.now = 240.0
    assert token() == "Bearer three"


@pytest.mark.parametrize(("content", "message"), [(None, "No such file"), ("", "is empty"), (b"\xff", "not text")])
def test_a_token_file_that_cannot_be_used_at_start_is_a_config_error(
    tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    path = tmp_path / "token"
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        TokenFile(path)


def test_authorization_is_a_fixed_token_or_none() -> None:
    assert authorization_of(Endpoint("https://h", token="t"))() == "Bearer t"
    assert authorization_of(Endpoint("https://h"))() is None


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        (Endpoint("https://h", ca_file=Path("/nonexistent/ca.crt")), "certificate authority /nonexistent/ca.crt"),
        (Endpoint("https://h", ca_data=b"not a certificate"), "certificate authority certificate-authority-data"),
        (Endpoint("https://h", cert_data=b"c"), "needs both client-certificate and client-key"),
        (Endpoint("https://h", cert_data=b"c", key_data=b"k"), "cannot use the client certificate and key"),
    ],
)
def test_tls_material_that_cannot_be_used_is_a_config_error(endpoint: Endpoint, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        tls_context(endpoint)
    assert message in str(raised.value)


@pytest.mark.parametrize("port", ["https", "0", "65536", "-1"])
def test_in_cluster_a_port_that_is_not_a_port_number_is_refused_at_start(port: str) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": port}
    with pytest.raises(KubeconfigError, match=f"KUBERNETES_SERVICE_PORT is not a port number: '{port}'"):
        in_cluster_endpoint(environ, Path("/sa"))
