"""The manifests and the code agree: DaemonSet args parse, and RBAC covers exactly the API calls made."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from npu_plugin.cli import parse_args
from npu_plugin.config import config_from_args
from tests.unit.test_manifests import MODES, build, overlay_args

ROOT = Path(__file__).resolve().parents[2]
KUBE_MODULE = ROOT / "npu_plugin" / "kube.py"
VERBS = {"read": "get", "list": "list", "create": "create", "replace": "update", "delete": "delete", "patch": "patch"}
SEED_ARGS = [
    "--node-name=node-a", "--device-profile=npu", "--driver-name=npu.huawei.com",
    "--kubelet-registrar-directory-path=/var/lib/kubelet/plugins_registry",
    "--kubelet-plugins-directory-path=/var/lib/kubelet/plugins", "--cdi-root=/etc/cdi", "--healthcheck-port=-1",
    "--mode=dra",
]


def _expanded(args: list[str]) -> list[str]:
    """$(VAR) as the kubelet expands it from the downward API and the ConfigMap."""
    values = {"NODE_NAME": "node-a", "POD_UID": "0b7c6f3e-1111-2222-3333-444455556666", "NPU_PLUGIN_DRA_DEVICES": "4-7"}
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], arg) for arg in args]


@pytest.mark.parametrize("mode", MODES)
def test_overlay_args_are_accepted_by_serve(mode: str) -> None:
    config = config_from_args(parse_args(_expanded(overlay_args(mode)), environ={}))
    assert config.mode == mode


def test_seed_daemonset_args_start_dra_mode_unchanged() -> None:
    config = config_from_args(parse_args(SEED_ARGS, environ={}))
    assert (config.mode, config.driver_name, str(config.cdi_root), config.healthcheck_port) == (
        "dra", "npu.huawei.com", "/etc/cdi", -1)


def api_calls() -> set[tuple[str, str]]:
    """(resource, verb) for every kubernetes client method kube.py calls, read from its syntax tree."""
    calls: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(KUBE_MODULE.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Attribute) and owner.attr in ("_core", "_resource")):
            continue
        action, _, kind = node.func.attr.partition("_")
        resource = kind.removeprefix("namespaced_").replace("_", "") + "s"
        calls.add((resource, VERBS[action]))
        if any(k.arg == "watch" for k in node.keywords):
            calls.add((resource, "watch"))
    return calls


def granted() -> set[tuple[str, str]]:
    role = next(o for o in build("dra") if o["kind"] == "ClusterRole")
    return {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_derivation_finds_the_calls_we_know_of() -> None:
    assert {("nodes", "get"), ("resourceslices", "watch"), ("resourceclaims", "get")} <= api_calls()


def test_rbac_grants_exactly_what_the_code_calls() -> None:
    assert granted() == api_calls()
