"""The API client against the fake API server over real TLS: a cluster CA, client certificates,
bearer tokens (fixed, from a file that rotates, from an exec plugin), the pod's service account, and
a daemon that publishes through all of it without loading the kubernetes package."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.errors import ConfigError, KubeApiError
from npu_plugin.kubeapi.client import KubeClient, connect
from npu_plugin.kubeapi.connection import TokenFile, Transport
from npu_plugin.kubeapi.kubeconfig import in_cluster_endpoint
from tests.support.daemon import REPO, Launcher, wait_until
from tests.support.dra import NODE, dra_args, pool_settled, temporary_workspace
from tests.support.fakeapi import FakeKubeAPI
from tests.support.pki import Authority, Pair

SERVER_NAME = "kubernetes.default.svc"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server_pair(authority: Authority) -> Pair:
    return authority.issue("apiserver", dns=(SERVER_NAME,), ips=("127.0.0.1",))


@pytest.fixture(scope="module")
def client_pair(authority: Authority) -> Pair:
    return authority.issue("npu-plugin")


@pytest.fixture
def tls_api(authority: Authority, server_pair: Pair) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(tls=authority.server_context(server_pair, client_ca=authority.ca.cert)) as api:
        api.add_node(NODE)
        yield api


def inline(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path.write_text(json.dumps(config))
    return path


def last_request(api: FakeKubeAPI) -> Any:
    return api.requests[-1]


def test_a_client_certificate_inline_in_the_kubeconfig_is_presented_over_verified_tls(
    tls_api: FakeKubeAPI, authority: Authority, client_pair: Pair, tmp_path: Path
) -> None:
    cluster = {"certificate-authority-data": inline(authority.ca.cert)}
    user = {"client-certificate-data": inline(client_pair.cert), "client-key-data": inline(client_pair.key)}
    client = KubeClient(connect(write_kubeconfig(tmp_path / "kc", tls_api.url, cluster, user)))
    try:
        assert client.get_node(NODE)["metadata"]["name"] == NODE
    finally:
        client.close()
    request = last_request(tls_api)
    assert (request.client, request.authorization) == ("npu-plugin", None)


def test_a_token_and_a_ca_file_named_relative_to_the_kubeconfig(
    tls_api: FakeKubeAPI, authority: Authority, tmp_path: Path
) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(authority.ca.cert.read_bytes())
    path = write_kubeconfig(tmp_path / "kc", tls_api.url, {"certificate-authority": "certs/ca.crt"}, {"token": "t0k"})
    client = KubeClient(connect(path))
    try:
        assert client.list_slices(NODE, "npu.huawei.com").items == ()
    finally:
        client.close()
    assert (last_request(tls_api).authorization, last_request(tls_api).client) == ("Bearer t0k", None)


def test_a_server_signed_by_another_authority_is_refused_naming_the_verification(
    tls_api: FakeKubeAPI, tmp_path: Path
) -> None:
    stranger = Authority.create(tmp_path / "other", "other-ca")
    path = write_kubeconfig(tmp_path / "kc", tls_api.url, {"certificate-authority": str(stranger.ca.cert)}, {})
    client = KubeClient(connect(path))
    with pytest.raises(KubeApiError) as raised:
        client.get_node(NODE)
    client.close()
    assert raised.value.status == 0
    assert "certificate verify failed" in str(raised.value)
    assert tls_api.requests == []


def test_insecure_skip_tls_verify_connects_without_a_ca_and_says_so(
    tls_api: FakeKubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    client = KubeClient(connect(write_kubeconfig(tmp_path / "kc", tls_api.url, {"insecure-skip-tls-verify": True}, {})))
    try:
        assert client.server_version() == (1, 34)
    finally:
        client.close()
    assert any("the API server's certificate is not checked" in r.getMessage() for r in caplog.records)


def test_tls_server_name_verifies_a_certificate_made_for_another_name(authority: Authority, tmp_path: Path) -> None:
    named_only = authority.issue("named-only", dns=(SERVER_NAME,))
    with FakeKubeAPI(tls=authority.server_context(named_only)) as api:
        api.add_node(NODE)
        cluster = {"certificate-authority": str(authority.ca.cert)}
        mismatched = KubeClient(connect(write_kubeconfig(tmp_path / "kc1", api.url, cluster, {})))
        with pytest.raises(KubeApiError, match=r"127\.0\.0\.1"):
            mismatched.get_node(NODE)
        mismatched.close()
        renamed = cluster | {"tls-server-name": SERVER_NAME}
        named = KubeClient(connect(write_kubeconfig(tmp_path / "kc2", api.url, renamed, {})))
        try:
            assert named.get_node(NODE)["metadata"]["name"] == NODE
        finally:
            named.close()


def service_account(directory: Path, authority: Authority, token: str) -> Path:
    directory.mkdir()
    (directory / "ca.crt").write_bytes(authority.ca.cert.read_bytes())
    (directory / "token").write_text(token + "\n")
    return directory


def test_in_cluster_the_service_account_token_is_sent_and_followed_when_the_kubelet_rotates_it(
    tls_api: FakeKubeAPI, authority: Authority, tmp_path: Path
) -> None:
    account = service_account(tmp_path / "sa", authority, "first")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(tls_api.port)}
    client = KubeClient(connect(None, environ, account))
    try:
        client.get_node(NODE)
    finally:
        client.close()
    assert last_request(tls_api).authorization == "Bearer first"
    # The default re-read period is a minute (client-go's); zero shows the rotation without waiting
    # for it.
    endpoint = in_cluster_endpoint(environ, account)
    rotating = KubeClient(Transport(endpoint, TokenFile(account / "token", reload_seconds=0.0)))
    try:
        rotating.get_node(NODE)
        (account / "token.new").write_text("second")
        (account / "token.new").rename(account / "token")  # as the kubelet swaps a projected token
        rotating.get_node(NODE)
    finally:
        rotating.close()
    assert [r.authorization for r in tls_api.requests[-2:]] == ["Bearer first", "Bearer second"]


@pytest.mark.parametrize(
    ("environ", "missing", "expected"),
    [
        ({}, None, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "token", "token: No such file"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "ca.crt", "ca.crt"),
    ],
)
def test_in_cluster_without_credentials_is_one_line_saying_what_is_missing(
    authority: Authority, tmp_path: Path, environ: dict[str, str], missing: str | None, expected: str
) -> None:
    account = service_account(tmp_path / "sa", authority, "t")
    if missing:
        (account / missing).unlink()
    with pytest.raises(ConfigError) as raised:
        connect(None, environ, account)
    message = str(raised.value)
    assert message.startswith("no in-cluster Kubernetes credentials (") and expected in message
    assert message.endswith("run in a pod with a service account or pass --kubeconfig")


def test_an_exec_plugin_kubeconfig_is_loaded_by_the_kubernetes_package(tmp_path: Path) -> None:
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "x"}}
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
        "interactiveMode": "Never",
    }
    with FakeKubeAPI() as api:
        api.add_node(NODE)
        client = KubeClient(connect(write_kubeconfig(tmp_path / "kc", api.url, {}, {"exec": plugin})))
        try:
            client.get_node(NODE)
        finally:
            client.close()
        assert last_request(api).authorization == "Bearer x"


@pytest.mark.parametrize(("user", "loaded"), [({"token": "t"}, False), ({"username": "a", "password": "b"}, True)])
def test_the_kubernetes_package_is_imported_only_for_credentials_it_must_load(
    tmp_path: Path, user: dict[str, str], loaded: bool
) -> None:
    path = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", {"insecure-skip-tls-verify": True}, user)
    script = "import sys; from pathlib import Path; from npu_plugin.kubeapi.client import connect"
    script += f"; connect(Path({str(path)!r}))"
    script += "; print('kubernetes' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == str(loaded)


def test_a_watch_abandoned_midway_closes_its_connection_and_the_next_request_succeeds(
    tls_api: FakeKubeAPI, authority: Authority, tmp_path: Path
) -> None:
    cluster = {"certificate-authority": str(authority.ca.cert)}
    path = write_kubeconfig(tmp_path / "kc", tls_api.url, cluster, {"token": "w"})
    client = KubeClient(connect(path))
    try:
        listed = client.list_slices(NODE, "npu.huawei.com")
        created = client.create_slice(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"generateName": f"{NODE}-npu.huawei.com-"},
                "spec": {
                    "driver": "npu.huawei.com",
                    "nodeName": NODE,
                    "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                    "devices": [],
                },
            }
        )
        events = client.watch_slices(NODE, "npu.huawei.com", listed.resource_version, 60)
        first = next(events)
        events.close()  # the server still holds the watch open: the client hangs up
        assert (first.type, first.resource_version) == ("ADDED", created["metadata"]["resourceVersion"])
        assert client.get_node(NODE)["metadata"]["name"] == NODE
    finally:
        client.close()


def test_a_dra_daemon_publishes_over_mutual_tls_loading_neither_kubernetes_nor_the_device_plugin(
    tls_api: FakeKubeAPI, authority: Authority, client_pair: Pair, launch_daemon: Launcher
) -> None:
    with temporary_workspace(tls_api) as workspace:
        token = workspace.root / "token"
        token.write_text("daemon-token")
        cluster = {"certificate-authority": str(authority.ca.cert)}
        user = {"client-certificate": str(client_pair.cert), "client-key": str(client_pair.key)}
        write_kubeconfig(workspace.kubeconfig, tls_api.url, cluster, user | {"tokenFile": str(token)})
        daemon = launch_daemon(*dra_args(workspace), python_args=["-X", "importtime"])
        wait_until(lambda: pool_settled(tls_api) is not None, 20, "the pool published over TLS")
        daemon.kill()
    writes = [r for r in tls_api.requests if r.method in ("POST", "PUT")]
    assert writes and {(r.client, r.authorization) for r in writes} == {("npu-plugin", "Bearer daemon-token")}
    lines = daemon.log().splitlines()
    imported = [line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")]
    assert "npu_plugin.kubeapi.client" in imported
    # Neither the kubernetes package nor the device plugin's half is loaded: each costs every node
    # start time.
    assert not [name for name in imported if name.split(".")[0] == "kubernetes" or "deviceplugin" in name]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [unclosed", "not YAML at line 1: expected ',' or ']', but got '<stream end>'"),
        ("kind: Config\n", "current-context is not set"),
        (json.dumps({"current-context": "c", "contexts": [{"name": "d"}]}), "contexts has no entry named 'c'"),
    ],
)
def test_a_kubeconfig_that_cannot_be_used_is_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        connect(path)
    assert str(raised.value).startswith(f"--kubeconfig {path}: ") and message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_request_made_while_the_watch_is_open_leaves_both_connections_kept_without_a_warning(
    tls_api: FakeKubeAPI, authority: Authority, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The informer's watch holds one connection for minutes while the publisher and Prepare make
    requests on others; when the watch ends its connection goes back to the pool beside theirs, not
    away with urllib3's "Connection pool is full, discarding connection" warning (and a new TLS
    handshake next time)."""
    cluster = {"certificate-authority": str(authority.ca.cert)}
    client = KubeClient(connect(write_kubeconfig(tmp_path / "kc", tls_api.url, cluster, {"token": "w"})))
    try:
        listed = client.list_slices(NODE, "npu.huawei.com")
        events = client.watch_slices(NODE, "npu.huawei.com", listed.resource_version, 60)
        watching = threading.Thread(target=list, args=(events,))
        watching.start()
        wait_until(lambda: any(r.verb == "watch" for r in tls_api.requests), 10, "the watch to be answered")
        assert client.get_node(NODE)["metadata"]["name"] == NODE
        with caplog.at_level(logging.WARNING, logger="urllib3"):
            tls_api.end_watches()
            watching.join(timeout=10)
        assert not watching.is_alive()
        assert [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")] == []
    finally:
        client.close()


def keepalive_timers(port: int) -> list[bool]:
    """For each established TCP connection to 127.0.0.1:`port` (the client's side), whether the
    kernel runs its keep-alive timer: /proc/net/tcp's `tr` field is 2 for it (0 none, 1 retransmit,
    4 zero window)."""
    timers = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state, timer = fields[2], fields[3], fields[5].split(":")[0]
        if remote == f"0100007F:{port:04X}" and state == "01":
            timers.append(timer == "02")
    return timers


def test_connections_to_the_api_server_send_tcp_keep_alive_probes(tls_api: FakeKubeAPI, tmp_path: Path) -> None:
    """A watch on a connection the network lost silently ends within about a minute, not at its read
    timeout."""
    path = write_kubeconfig(tmp_path / "kc", tls_api.url, {"insecure-skip-tls-verify": True}, {"token": "k"})
    client = KubeClient(connect(path))
    try:
        client.get_node(NODE)
        assert keepalive_timers(tls_api.port) == [True]  # the pooled, idle connection
    finally:
        client.close()
