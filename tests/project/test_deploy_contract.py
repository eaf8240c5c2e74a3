"""The manifests and the code agree: DaemonSet args parse, and RBAC covers exactly the API calls
made."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from npu_plugin.cli.main import config_from_args, parse_args
from npu_plugin.kubeapi import client as kube
from npu_plugin.plan import read as plan_read
from tests.project.test_manifests import MANIFESTS, MODES, build, overlay_args

ROOT = Path(__file__).resolve().parents[2]
KUBE_MODULE = ROOT / "npu_plugin" / "kubeapi" / "client.py"
HTTP_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "patch"}
SEED_ARGS = [
    "--node-name=node-a",
    "--device-profile=npu",
    "--driver-name=npu.huawei.com",
    "--kubelet-registrar-directory-path=/var/lib/kubelet/plugins_registry",
    "--kubelet-plugins-directory-path=/var/lib/kubelet/plugins",
    "--cdi-root=/etc/cdi",
    "--healthcheck-port=-1",
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
        "dra",
        "npu.huawei.com",
        "/etc/cdi",
        -1,
    )


def api_calls() -> set[tuple[str, str]]:
    """(resource, verb) for every request the client makes, read from its syntax tree.

    Each call is `self._json(...)` or `self._request(...)` with an HTTP method literal and one of
    the module's path constants, or `self._watch(action, PATH, ...)` watching one (its own
    `_request` takes the path as a parameter, not a constant).
    """
    calls: set[tuple[str, str]] = set()
    for function in ast.walk(ast.parse(KUBE_MODULE.read_text())):
        # get_json is plan's read of any path, granted by its own role (test_plan_role_...).
        if not isinstance(function, ast.FunctionDef) or function.name == "get_json":
            continue
        for call in ast.walk(function):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            if call.func.attr == "_watch" and isinstance(call.args[1], ast.Name):
                calls.add((_resource(getattr(kube, call.args[1].id))[0], "watch"))
            elif (
                call.func.attr in ("_json", "_request")
                and len(call.args) >= 3
                and isinstance(call.args[1], ast.Constant)
                and isinstance(call.args[2], ast.Name)
                and call.args[2].id.isupper()
            ):
                resource, collection = _resource(getattr(kube, call.args[2].id))
                verb = HTTP_VERBS[call.args[1].value]
                calls.add((resource, "list" if verb == "get" and collection else verb))
    return calls


def _resource(path: str) -> tuple[str, bool]:
    """The resource a path names (`resourceclaims/status` for a subresource), and whether it is the
    collection (no `{name}` at the end)."""
    segments = path.strip("/").split("/")
    if len(segments) >= 3 and segments[-2].startswith("{") and not segments[-1].startswith("{"):
        return f"{segments[-3]}/{segments[-1]}", False
    return next(s for s in reversed(segments) if not s.startswith("{")), not segments[-1].startswith("{")


def granted() -> set[tuple[str, str]]:
    role = next(o for o in build("dra") if o["kind"] == "ClusterRole")
    return {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}


# Checked by the API server besides a request's own permission, never requested themselves: from
# Kubernetes 1.36 a change of ResourceClaim status.devices also needs this, for each driver.
SYNTHETIC = {("resourceclaims/driver", "associated-node:patch")}


def test_the_derivation_finds_the_calls_we_know_of() -> None:
    known = {
        ("nodes", "get"),
        ("resourceslices", "watch"),
        ("resourceclaims", "get"),
        ("resourceclaims/status", "patch"),
    }
    assert known <= api_calls()


def test_rbac_grants_exactly_what_the_code_calls() -> None:
    assert granted() == api_calls() | SYNTHETIC


def test_plan_role_grants_exactly_the_lists_plan_makes_and_nothing_else() -> None:
    role = yaml.safe_load((MANIFESTS / "plan" / "clusterrole.yaml").read_text())
    resources = {
        (group, resource, verb)
        for rule in role["rules"]
        if "resources" in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    urls = {(url, verb) for rule in role["rules"] for url in rule.get("nonResourceURLs", ()) for verb in rule["verbs"]}
    assert resources == {(kind.group, kind.resource, "list") for kind in plan_read.LISTED}
    assert urls == {(plan_read.VERSION_PATH, "get"), (plan_read.DISCOVERY_PATH, "get")}
