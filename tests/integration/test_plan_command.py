"""`npu-plugin plan` as a process: exit codes 0/1/2, the three outputs, and every bad input as one
line on stderr with no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import REPO
from tests.support.fakeapi import FakeKubeAPI
from tests.support.plan_cluster import NPU, daemonset, node, npu_pod, plant, resource_slice

NODE_KEYS = {"name", "mode", "target", "verdict", "reasons", "pods", "steps", "vnpu"}
FINDING_KEYS = {"kind", "severity", "message", "objects"}


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(kubernetes_minor=36) as server:
        plant(server, {"daemonsets": [daemonset("device-plugin"), daemonset("dra")]})
        yield server


def plan(tmp_path: Path, api: FakeKubeAPI | None, *args: str) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "kubeconfig"
    if api is not None:
        api.write_kubeconfig(kubeconfig)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "npu_plugin", "plan", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("npu-plugin plan: error: "), line
    return line.removeprefix("npu-plugin plan: error: ")


def test_every_node_ready_exits_0_and_json_has_the_documented_shape(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("a", "dra")], "slices": [resource_slice("a")]})
    result = plan(tmp_path, api, "--output", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"target", "nodes", "findings"}
    assert [set(n) for n in data["nodes"]] == [NODE_KEYS]
    assert data["nodes"][0] | {"reasons": []} == {
        "name": "a",
        "mode": "dra",
        "target": "dra",
        "verdict": "ready",
        "reasons": [],
        "pods": [],
        "steps": [],
        "vnpu": False,
    }
    assert all(set(f) == FINDING_KEYS for f in data["findings"])


def test_a_node_that_needs_a_drain_exits_1_in_every_output(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("busy", capacity={NPU: "8"})], "pods": [npu_pod("train-7d9f8b6c5-a", "busy")]})
    table, as_json, as_yaml = (plan(tmp_path, api, "-o", out) for out in ("table", "json", "yaml"))
    assert (table.returncode, as_json.returncode, as_yaml.returncode) == (1, 1, 1)
    assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout)
    assert json.loads(as_json.stdout)["nodes"][0]["pods"] == [
        {"namespace": "ml", "name": "train-7d9f8b6c5-a", "resources": {NPU: 1}}
    ]
    lines = table.stdout.splitlines()
    assert lines[:2] == [
        "NODE  MODE           TARGET  VERDICT            NPU PODS",
        "busy  device-plugin  dra     ready-after-drain  1",
    ]
    assert "  $ kubectl drain busy --ignore-daemonsets --delete-emptydir-data  # evicts ml/train-7d9f8b6c5-a" in lines


def test_no_cluster_is_exit_2_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    result = plan(tmp_path, None)
    assert result.returncode == 2
    assert one_error_line(result).startswith("cannot reach the API server: get version: unreachable: ")


def test_a_missing_kubeconfig_is_exit_2_in_one_line(tmp_path: Path) -> None:
    result = plan(tmp_path, None)
    assert result.returncode == 2
    assert one_error_line(result).startswith(f"--kubeconfig {tmp_path / 'kubeconfig'}: ")


def test_an_unknown_node_is_exit_2_in_one_line(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("a")]})
    result = plan(tmp_path, api, "--node", "a", "--node", "nope")
    assert result.returncode == 2
    assert one_error_line(result) == "--node: node nope does not exist"


def test_a_bad_target_is_exit_2_naming_the_flag(api: FakeKubeAPI, tmp_path: Path) -> None:
    result = plan(tmp_path, api, "--to", "gpu")
    assert result.returncode == 2
    assert "--to" in result.stderr and "Traceback" not in result.stderr


def test_a_forbidden_kind_is_reported_and_planning_goes_on(api: FakeKubeAPI, tmp_path: Path) -> None:
    plant(api, {"nodes": [node("a", capacity={NPU: "8"})]})
    api.forbid("list", "resourceclaims")
    result = plan(tmp_path, api)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        "error    unreadable: cannot list resourceclaims: forbidden, the credentials lack verb list on resourceclaims "
        'in API group "resource.k8s.io"; not made: the pods holding DRA devices on each node'
    ) in result.stdout.splitlines()
