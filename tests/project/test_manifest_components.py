"""The optional kustomize Components (monitoring, NFD node selection), the image override the
daemonset kustomization's comment documents, and namespaces: each checked on real `kubectl
kustomize` output of an operator's own overlay over overlays/<mode>."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import generate_latest

from npu_plugin.observability.metrics import APIS, Metrics
from tests.project.test_manifests import MANIFESTS, MODES, Obj, _docs, _one, _validate, build

NAMESPACE = "npu-plugin"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DeviceClass",
}
NAMESPACED = {"ServiceAccount", "ResourceQuota", "ConfigMap", "DaemonSet", "PodMonitor", "PrometheusRule"}
NFD_LABEL = "feature.node.kubernetes.io/pci-19e5.present"


def own_overlay(directory: Path, mode: str, components: tuple[str, ...] = (), **extra: Any) -> tuple[Obj, ...]:
    """`kubectl kustomize` of an operator's overlay in `directory` over overlays/<mode>, with
    `components`."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    relative = Path(os.path.relpath(MANIFESTS, directory))  # kustomize refuses absolute resource paths
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(relative / "overlays" / mode)],
        "components": [str(relative / "components" / name) for name in components],
        **extra,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    proc = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"kubectl kustomize of an overlay over {mode} failed:\n{proc.stderr}"
    return tuple(_docs(proc.stdout))


def _container(objs: tuple[Obj, ...]) -> Obj:
    (container,) = _one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return container


# --- namespaces --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cluster_scoped_objects_carry_no_namespace(mode: str, tmp_path: Path) -> None:
    objs = build(mode) + own_overlay(tmp_path, mode, ("monitoring", "nfd-pci"))
    for obj in objs:
        kind, metadata = obj["kind"], obj["metadata"]
        assert kind in CLUSTER_SCOPED | NAMESPACED, f"{kind}: say whether it is cluster-scoped"
        expected = None if kind in CLUSTER_SCOPED else NAMESPACE
        assert metadata.get("namespace") == expected, f"{kind}/{metadata['name']} in {mode}"


# --- the image override ------------------------------------------------------------------------


def documented_image_command() -> tuple[str, str]:
    """The `kustomize edit set image NAME=REGISTRY/...` the daemonset kustomization's comment
    gives."""
    text = (MANIFESTS / "daemonset" / "kustomization.yaml").read_text()
    found = re.search(r"^#\s+kustomize edit set image (\S+)=(\S+)$", text, re.MULTILINE)
    assert found, "the comment no longer shows the override command"
    return found.group(1), found.group(2)


@pytest.mark.parametrize("mode", MODES)
def test_the_documented_image_override_works(mode: str, tmp_path: Path) -> None:
    name, template = documented_image_command()
    assert template == "REGISTRY/npu-plugin:TAG"
    # What `kustomize edit set image NAME=my.registry.io/team/npu-plugin:1.2.3` writes.
    images = [{"name": name, "newName": "my.registry.io/team/npu-plugin", "newTag": "1.2.3"}]
    objs = own_overlay(tmp_path, mode, images=images)
    assert _container(objs)["image"] == "my.registry.io/team/npu-plugin:1.2.3"


def test_the_overridden_name_is_the_one_the_shared_pod_gets() -> None:
    name, _ = documented_image_command()
    kustomization = yaml.safe_load((MANIFESTS / "daemonset" / "kustomization.yaml").read_text())
    assert [image["newName"] for image in kustomization["images"]] == [name]


# --- monitoring --------------------------------------------------------------------------------

_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"const": NAMESPACE}, "labels": _LABELS},
    "additionalProperties": False,
}
# The parts of the Prometheus Operator CRDs (monitoring.coreos.com/v1) these objects use, with the
# CRDs' required fields; unknown fields are refused so a misspelt one fails here, not in the
# cluster.
POD_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "required": ["matchLabels"],
                    "properties": {"matchLabels": _LABELS},
                    "additionalProperties": False,
                },
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "rules": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["alert", "expr", "labels", "annotations"],
                                    "properties": {
                                        "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                        "labels": {
                                            "type": "object",
                                            "required": ["severity"],
                                            "properties": {"severity": {"enum": ["warning", "critical"]}},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "required": ["summary", "description"],
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                    "additionalProperties": False,
                                },
                            },
                        },
                        "additionalProperties": False,
                    },
                }
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize("mode", MODES)
def test_monitoring_component_objects_are_well_formed(mode: str, tmp_path: Path) -> None:
    objs = own_overlay(tmp_path, mode, ("monitoring",))
    monitor, rules = _one(objs, "PodMonitor"), _one(objs, "PrometheusRule")
    jsonschema.validate(monitor, POD_MONITOR)
    jsonschema.validate(rules, PROMETHEUS_RULE)
    for obj in objs:
        if obj["kind"] not in ("PodMonitor", "PrometheusRule"):
            _validate(obj, f"an overlay over {mode} with the monitoring component")
    pod = _one(objs, "DaemonSet")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {port["name"]: port["containerPort"] for port in _container(objs)["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    assert f"--metrics-port={ports['metrics']}" in _container(objs)["args"]


def served_series() -> set[str]:
    """Every sample name the daemon's /metrics serves (both APIs enabled, so every series
    exists)."""
    metrics = Metrics()
    metrics.serving(list(APIS))
    text = generate_latest(metrics.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def alert_rules() -> list[Obj]:
    rules = yaml.safe_load((MANIFESTS / "components" / "monitoring" / "prometheusrule.yaml").read_text())
    return [rule for group in rules["spec"]["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda rule: rule["alert"])
def test_each_alert_reads_a_series_the_daemon_serves(rule: Obj) -> None:
    named = set(re.findall(r"\b(npu_plugin_[a-z_]+)\b", rule["expr"]))
    assert named, f"{rule['alert']} reads none of the daemon's series"
    assert named <= served_series(), f"{rule['alert']}: no such series {sorted(named - served_series())}"
    labels = set(re.findall(r"\$labels\.([a-z_]+)", " ".join(rule["annotations"].values())))
    grouped = set(re.findall(r"by \(([^)]*)\)", rule["expr"])[0].replace(" ", "").split(","))
    assert labels <= grouped, f"{rule['alert']}: annotations use labels the expression drops"


def test_the_alerts_cover_unhealthy_devices_lost_registration_and_publish_errors() -> None:
    exprs = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    assert 'npu_plugin_devices{health="unhealthy"}' in exprs["NpuPluginDeviceUnhealthy"]
    assert "npu_plugin_registered" in exprs["NpuPluginRegistrationLost"]
    assert 'npu_plugin_slice_publish_total{result="error"}' in exprs["NpuPluginSlicePublishErrors"]


# --- node selection by NFD ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_nfd_component_adds_the_pci_label_and_keeps_the_mode_label(mode: str, tmp_path: Path) -> None:
    plain = _one(build(mode), "DaemonSet")["spec"]["template"]["spec"]["nodeSelector"]
    objs = own_overlay(tmp_path, mode, ("nfd-pci",))
    selector = _one(objs, "DaemonSet")["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {**plain, NFD_LABEL: "true"}
    assert selector["npu.huawei.com/plugin-mode"] == mode
    for obj in objs:
        _validate(obj, f"an overlay over {mode} with the nfd-pci component")


# --- volcano -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["device-plugin", "both"])
def test_the_volcano_component_adds_the_flag_and_lets_the_plugin_mark_predicate_time(mode: str, tmp_path: Path) -> None:
    from npu_plugin.cli.main import config_from_args, parse_args
    from tests.project.test_manifests import ANNOTATIONS, _admits, _named, _pod

    objs = own_overlay(tmp_path, mode, ("volcano",))
    for obj in objs:
        _validate(obj, f"overlays/{mode} with components/volcano")
    args = _container(objs)["args"]
    assert args.count("--volcano") == 1
    settled = [a.replace("$(NODE_NAME)", "n1").replace("$(NPU_PLUGIN_DRA_DEVICES)", "4-7") for a in args[1:]]
    assert config_from_args(parse_args(["serve", *settled], {})).volcano is True
    policy = _named(objs, "ValidatingAdmissionPolicy", "npu-plugin-pods")
    marked = {**dict.fromkeys(ANNOTATIONS, "x"), "predicate-time": "18446744073709551615"}
    assert _admits(policy, _pod(**{"predicate-time": "1"}), _pod(**marked)) == []
    assert _admits(policy, _pod(other="a"), _pod(other="b"))  # still only those keys
    without = _named(build(mode), "ValidatingAdmissionPolicy", "npu-plugin-pods")
    assert _admits(without, _pod(**{"predicate-time": "1"}), _pod(**marked))
