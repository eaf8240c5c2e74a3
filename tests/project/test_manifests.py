"""Deployment manifests: schema-valid for Kubernetes 1.34, and the DaemonSets keep their promises.

Every YAML object under manifests/ (kustomizations and the patches they apply excepted) and every
overlay's `kubectl kustomize` output validates with kubernetes-validate --strict against 1.34. The
rest checks what a schema cannot: overlays that coexist in one cluster, least-privilege RBAC, the
admission policy naming the plugin's service account, and CEL that selects what it says.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy.adapter import json_to_cel

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
MODES = ("device-plugin", "dra", "both")
ALL_MODES = "all-modes"  # every mode in one kustomization, for one GitOps app
OVERLAYS = (*MODES, ALL_MODES)
K8S_VERSION = "1.34.0"
DRIVER = "npu.huawei.com"
MODE_LABEL = "npu.huawei.com/plugin-mode"
KUBELET = "/var/lib/kubelet"
CRD_GROUPS = ("monitoring.coreos.com",)  # the Prometheus Operator's PodMonitor and PrometheusRule

Obj = dict[str, Any]


# --- loading ---------------------------------------------------------------------------------


def _docs(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _kustomization_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("kustomization.yaml"))


def _patch_files() -> set[Path]:
    """Files a kustomization applies as patches: fragments, not objects."""
    patches: set[Path] = set()
    for kfile in _kustomization_files():
        for patch in (yaml.safe_load(kfile.read_text()) or {}).get("patches", []):
            if "path" in patch:
                patches.add((kfile.parent / patch["path"]).resolve())
    return patches


def _object_files() -> list[Path]:
    skip = _patch_files()
    files = sorted(p for p in MANIFESTS.rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    return [p for p in files if p.name != "kustomization.yaml" and p.resolve() not in skip]


@functools.cache
def build(mode: str) -> tuple[Obj, ...]:
    """`kubectl kustomize manifests/overlays/<mode>`, parsed (cached: kubectl takes ~0.1 s)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    proc = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / "overlays" / mode)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize overlays/{mode} failed:\n{proc.stderr}"
    return tuple(_docs(proc.stdout))


def _one(objs: tuple[Obj, ...] | list[Obj], kind: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _named(objs: tuple[Obj, ...] | list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def daemonset(mode: str) -> Obj:
    return _one(build(mode), "DaemonSet")


def container(mode: str) -> Obj:
    containers: list[Obj] = daemonset(mode)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def overlay_args(mode: str) -> list[str]:
    """The plugin's argv (after the image's ENTRYPOINT) in an overlay's DaemonSet."""
    return list(container(mode)["args"])


def _flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} given twice"
    return values[0] if values else None


def _mounts(mode: str) -> dict[str, Obj]:
    """mountPath -> the hostPath volume behind it."""
    spec = daemonset(mode)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container(mode)["volumeMounts"]}


def _host_path(mode: str, mount_path: str) -> str:
    mounts = _mounts(mode)
    assert mount_path in mounts, f"{mode}: nothing mounted at {mount_path}"
    return str(mounts[mount_path]["hostPath"]["path"])


def _validate(obj: Obj, where: str) -> None:
    problem = None
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:  # a jsonschema.ValidationError
        path = "/".join(str(p) for p in exc.absolute_path)
        problem = f"{obj['kind']}/{obj['metadata'].get('name')} at /{path}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        problem = exc.message
    if problem:  # failed outside the handler, so the report is one line, not the whole schema
        pytest.fail(f"{where}: {problem}")


# --- schema ----------------------------------------------------------------------------------


def test_there_is_something_to_validate() -> None:
    assert len(_object_files()) >= 10
    assert all((MANIFESTS / "overlays" / m / "kustomization.yaml").is_file() for m in OVERLAYS)


@pytest.mark.parametrize("path", _object_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_manifest_file_validates_strict(path: Path) -> None:
    docs = _docs(path.read_text())
    assert docs, f"{path} holds no object"
    for obj in docs:
        assert isinstance(obj, dict) and "apiVersion" in obj and "kind" in obj, f"{path}: not an object"
        if obj["apiVersion"].split("/")[0] in CRD_GROUPS:
            continue  # no schema in kubernetes-validate: test_manifest_components.py checks their structure
        _validate(obj, str(path.relative_to(REPO)))


@pytest.mark.parametrize("mode", OVERLAYS)
def test_overlay_builds_and_validates_strict(mode: str) -> None:
    for obj in build(mode):
        _validate(obj, f"kubectl kustomize overlays/{mode}")


# --- the overlays side by side -----------------------------------------------------------------


def test_overlays_can_be_applied_together() -> None:
    """Nodes migrate by relabelling, so all three overlays may be applied to one cluster at once."""
    shared: dict[tuple[str, str], Obj] = {}
    for mode in MODES:
        for obj in build(mode):
            if obj["kind"] == "DaemonSet":
                continue
            key = (obj["kind"], obj["metadata"]["name"])
            assert shared.setdefault(key, obj) == obj, f"{key} differs between overlays"
    names = [daemonset(m)["metadata"]["name"] for m in MODES]
    assert len(set(names)) == len(names), names
    selectors = [daemonset(m)["spec"]["selector"]["matchLabels"] for m in MODES]
    for i, a in enumerate(selectors):
        for b in selectors[i + 1 :]:
            assert a.items() != b.items() and not (a.items() <= b.items() or b.items() <= a.items()), (
                f"DaemonSet selectors overlap: {a} / {b}"
            )


def test_the_all_modes_overlay_composes_the_three() -> None:
    """One kustomization (one GitOps app) holds every mode: the shared objects once, each mode's DaemonSet, and
    nothing else, so no app prunes what another applied."""

    def key(obj: Obj) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    union = {key(o): o for mode in MODES for o in build(mode)}
    together = build(ALL_MODES)
    assert len(together) == len({key(o) for o in together}), "an object is declared twice"
    assert {key(o): o for o in together} == union


@pytest.mark.parametrize("mode", MODES)
def test_daemonset_selects_nodes_by_mode_label(mode: str) -> None:
    ds = daemonset(mode)
    assert ds["spec"]["template"]["spec"]["nodeSelector"][MODE_LABEL] == mode
    template_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= template_labels.items()


@pytest.mark.parametrize("mode", MODES)
def test_daemonset_pod_basics(mode: str) -> None:
    pod = daemonset(mode)["spec"]["template"]["spec"]
    ctr = container(mode)
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["serviceAccountName"] == "npu-plugin"
    assert not pod.get("hostNetwork", False)
    assert ctr["securityContext"]["privileged"] is True
    assert "allowPrivilegeEscalation" not in ctr["securityContext"], "rejected by the API with privileged"
    assert {"cpu", "memory"} <= ctr["resources"]["requests"].keys()
    assert "memory" in ctr["resources"]["limits"]
    assert any(
        t.get("operator") == "Exists" and t.get("effect") == "NoSchedule" and "key" not in t for t in pod["tolerations"]
    )
    env = {e["name"]: e for e in ctr["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert ctr["image"] != "npu-plugin", "the images transformer did not set the image"


@pytest.mark.parametrize("mode", MODES)
def test_args_reference_only_defined_env(mode: str) -> None:
    args = overlay_args(mode)
    assert args[0] == "serve"
    assert _flag(args, "mode") == mode
    defined = {e["name"] for e in container(mode)["env"]}
    used = {v for a in args for v in re.findall(r"\$\((\w+)\)", a)}
    assert used <= defined, f"args use undefined env {used - defined}"


@pytest.mark.parametrize("mode", MODES)
def test_probes_use_the_grpc_health_port(mode: str) -> None:
    args, ctr = overlay_args(mode), container(mode)
    port = int(_flag(args, "healthcheck-port") or -1)
    assert port > 0
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert ctr[probe]["grpc"]["port"] == port, probe
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ports["health"] == port
    assert ports["metrics"] == int(_flag(args, "metrics-port") or -1)
    annotations = daemonset(mode)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])


@pytest.mark.parametrize("mode", MODES)
def test_every_mount_has_a_volume_and_back(mode: str) -> None:
    spec = daemonset(mode)["spec"]["template"]["spec"]
    volumes = {v["name"] for v in spec["volumes"]}
    mounted = [m["name"] for m in container(mode)["volumeMounts"]]
    assert set(mounted) == volumes
    assert len(mounted) == len(set(mounted))


@pytest.mark.parametrize("mode", MODES)
def test_host_paths_every_mode_needs(mode: str) -> None:
    assert _host_path(mode, "/dev") == "/dev"
    assert _host_path(mode, "/usr/local/Ascend/driver") == "/usr/local/Ascend/driver"
    assert _host_path(mode, "/usr/local/bin/npu-smi") == "/usr/local/bin/npu-smi"
    mounts = {m["mountPath"]: m for m in container(mode)["volumeMounts"]}
    for ro in ("/usr/local/Ascend/driver", "/usr/local/bin/npu-smi", "/sys"):
        assert mounts[ro].get("readOnly") is True, f"{ro} must be read-only"


@pytest.mark.parametrize("mode", MODES)
def test_the_driver_vnpu_recovery_config_and_its_lock_are_the_hosts(mode: str) -> None:
    assert _host_path(mode, "/etc/vnpu.cfg") == "/etc/vnpu.cfg"
    assert _host_path(mode, "/run/vnpu_cfg_lock") == "/run/vnpu_cfg_lock"
    mounts = {m["mountPath"]: m for m in container(mode)["volumeMounts"]}
    assert not mounts["/etc/vnpu.cfg"].get("readOnly") and not mounts["/run/vnpu_cfg_lock"].get("readOnly")


@pytest.mark.parametrize("mode", ["device-plugin", "both"])
def test_device_plugin_paths(mode: str) -> None:
    args = overlay_args(mode)
    path = _flag(args, "device-plugin-path")
    assert path == f"{KUBELET}/device-plugins"
    assert _host_path(mode, path) == path


@pytest.mark.parametrize("mode", ["dra", "both"])
def test_dra_paths(mode: str) -> None:
    args = overlay_args(mode)
    assert _flag(args, "node-name") == "$(NODE_NAME)"
    assert _flag(args, "driver-name") == DRIVER
    registrar = f"{KUBELET}/plugins_registry"
    assert _flag(args, "kubelet-registrar-directory-path") == registrar
    assert _host_path(mode, registrar) == registrar
    assert _flag(args, "kubelet-plugins-directory-path") == f"{KUBELET}/plugins"
    # Only the driver's own directory (socket, checkpoint, lock) is mounted, at the same path.
    ours = f"{KUBELET}/plugins/{DRIVER}"
    assert _host_path(mode, ours) == ours
    assert f"{KUBELET}/plugins" not in _mounts(mode)
    assert _flag(args, "cdi-root") == "/etc/cdi"
    assert _host_path(mode, "/etc/cdi") == "/etc/cdi"


def test_device_plugin_mode_has_a_token_for_pod_annotations_and_no_dra_mounts() -> None:
    assert daemonset("device-plugin")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert not any(p.startswith(f"{KUBELET}/plugins") for p in _mounts("device-plugin"))


def test_dra_rolls_with_surge_and_pod_uid() -> None:
    ds = daemonset("dra")
    rolling = ds["spec"]["updateStrategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, 0)
    assert _flag(overlay_args("dra"), "pod-uid") == "$(POD_UID)"
    env = {e["name"]: e for e in container("dra")["env"]}
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"


@pytest.mark.parametrize("mode", ["device-plugin", "both"])
def test_device_plugin_modes_never_surge(mode: str) -> None:
    rolling = daemonset(mode)["spec"]["updateStrategy"]["rollingUpdate"]
    assert rolling["maxSurge"] == 0 and rolling["maxUnavailable"] >= 1


def test_dra_keeps_the_seed_args() -> None:
    seed = [
        "--node-name=$(NODE_NAME)",
        "--device-profile=npu",
        f"--driver-name={DRIVER}",
        f"--kubelet-registrar-directory-path={KUBELET}/plugins_registry",
        f"--kubelet-plugins-directory-path={KUBELET}/plugins",
        "--cdi-root=/etc/cdi",
    ]
    args = overlay_args("dra")
    assert all(a in args for a in seed), set(seed) - set(args)


def test_both_mode_reads_dra_devices_from_the_configmap() -> None:
    objs = build("both")
    args = overlay_args("both")
    assert _flag(args, "dra-devices") == "$(NPU_PLUGIN_DRA_DEVICES)"
    env = {e["name"]: e for e in container("both")["env"]}
    ref = env["NPU_PLUGIN_DRA_DEVICES"]["valueFrom"]["configMapKeyRef"]
    configmap = _one(objs, "ConfigMap")
    assert ref["name"] == configmap["metadata"]["name"]
    assert configmap["data"][ref["key"]].strip()


@pytest.mark.parametrize("mode", MODES)
def test_the_pod_resources_socket_is_mounted_read_only(mode: str) -> None:
    assert _flag(overlay_args(mode), "pod-resources-socket") == f"{KUBELET}/pod-resources/kubelet.sock"
    assert _host_path(mode, f"{KUBELET}/pod-resources") == f"{KUBELET}/pod-resources"
    (mount,) = [m for m in container(mode)["volumeMounts"] if m["mountPath"] == f"{KUBELET}/pod-resources"]
    assert mount.get("readOnly") is True


# --- RBAC and admission ----------------------------------------------------------------------


def _rules(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def test_clusterrole_is_least_privilege() -> None:
    """The verbs themselves are derived from the code in test_deploy_contract.py."""
    role = _one(build("dra"), "ClusterRole")
    assert {group for group, _, _ in _rules(role)} == {"", "resource.k8s.io"}
    assert not any("nonResourceURLs" in r for r in role["rules"])
    # Only the synthetic status permission is named, and after our driver alone.
    assert [(r["resources"], r["resourceNames"]) for r in role["rules"] if "resourceNames" in r] == [
        (["resourceclaims/driver"], [DRIVER])
    ]
    binding = _one(build("dra"), "ClusterRoleBinding")
    sa = _one(build("dra"), "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    ]


def test_admission_policy_pins_slices_to_the_token_node() -> None:
    objs = build("dra")
    sa = _one(objs, "ServiceAccount")["metadata"]
    policy = _named(objs, "ValidatingAdmissionPolicy", "npu-plugin-resourceslices")
    binding = _named(objs, "ValidatingAdmissionPolicyBinding", "npu-plugin-resourceslices")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    (condition,) = spec["matchConditions"]
    assert f'"system:serviceaccount:{sa["namespace"]}:{sa["name"]}"' in condition["expression"]
    text = yaml.safe_dump(spec)
    assert "authentication.kubernetes.io/node-name" in text
    assert "nodeName" in text and "oldObject" in text


def test_claim_status_policy_pins_status_writes_to_the_token_node_and_our_driver() -> None:
    objs = build("dra")
    sa = _one(objs, "ServiceAccount")["metadata"]
    policy = _named(objs, "ValidatingAdmissionPolicy", "npu-plugin-claim-status")
    binding = _named(objs, "ValidatingAdmissionPolicyBinding", "npu-plugin-claim-status")
    assert binding["spec"] == {"policyName": "npu-plugin-claim-status", "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["resourceclaims/status"], ["UPDATE"])
    (condition,) = spec["matchConditions"]
    assert f'"system:serviceaccount:{sa["namespace"]}:{sa["name"]}"' in condition["expression"]
    text = yaml.safe_dump(spec)
    for needed in ("authentication.kubernetes.io/node-name", "metadata.name", f"d.driver != '{DRIVER}'", "allocation"):
        assert needed in text, needed


ANNOTATIONS = ("huawei.com/kltDev", "huawei.com/AscendReal", "ascend.kubectl.kubernetes.io/ascend-910-configuration")


def _pod(node: str | None = "node-a", **annotations: str) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "i"}]} | ({"nodeName": node} if node else {})
    return {"metadata": {"name": "p", "labels": {"app": "x"}, "annotations": annotations}, "spec": spec}


def _admits(policy: Obj, old: Obj, new: Obj, token_node: str = "node-a") -> list[str]:
    """The messages of the policy's validations that fail for this update, evaluated with cel-python
    (the variables written with CEL's optional syntax, which it lacks, are given)."""
    env = celpy.Environment()

    def run(expression: str, activation: dict[str, Any]) -> Any:
        return env.program(env.compile(expression)).evaluate(activation)

    activation: dict[str, Any] = {"object": json_to_cel(new), "oldObject": json_to_cel(old)}
    variables: dict[str, Any] = {"tokenNode": celpy.celtypes.StringType(token_node)}
    for variable in policy["spec"]["variables"]:
        if variable["name"] not in variables:
            variables[variable["name"]] = run(variable["expression"], activation | {"variables": variables})
    activation["variables"] = celpy.celtypes.MapType(variables)
    return [
        v.get("message", v.get("messageExpression", ""))
        for v in policy["spec"]["validations"]
        if not bool(run(v["expression"], activation))
    ]


def test_pod_policy_lets_a_node_annotate_only_its_own_pods_and_only_mindclusters_keys() -> None:
    objs = build("device-plugin")
    sa = _one(objs, "ServiceAccount")["metadata"]
    policy = _named(objs, "ValidatingAdmissionPolicy", "npu-plugin-pods")
    binding = _named(objs, "ValidatingAdmissionPolicyBinding", "npu-plugin-pods")
    assert binding["spec"] == {"policyName": "npu-plugin-pods", "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == ([""], ["pods"], ["UPDATE"])
    (condition,) = policy["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{sa["namespace"]}:{sa["name"]}"' in condition["expression"]
    ours = dict.fromkeys(ANNOTATIONS, "x")
    assert _admits(policy, _pod(), _pod(**ours)) == []
    assert _admits(policy, _pod(**ours), _pod(**{k: "y" for k in ours}, other="kept")) != []
    assert _admits(policy, _pod(other="a", **ours), _pod(other="a")) == []  # removing ours is fine
    assert len(_admits(policy, _pod(other="a"), _pod(other="b"))) == 1  # another key
    assert len(_admits(policy, _pod(other="a"), _pod())) == 1  # removing another key
    assert len(_admits(policy, _pod(node="node-b"), _pod(node="node-b", **ours))) == 1  # another node
    assert len(_admits(policy, _pod(node=None), _pod(node=None, **ours))) == 1  # not bound yet
    assert _admits(policy, _pod(), _pod(**ours), token_node="")  # a token bound to no node
    relabelled = _pod(**ours) | {"metadata": {"name": "p", "labels": {"app": "y"}, "annotations": ours}}
    assert len(_admits(policy, _pod(), relabelled)) == 1
    assert "predicate-time" not in yaml.safe_dump(policy["spec"]["variables"])


def test_namespace_admits_privileged_pods() -> None:
    ns = _one(build("dra"), "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert all(o["metadata"].get("namespace") in (None, ns["metadata"]["name"]) for o in build("dra"))


# --- CEL: DeviceClasses and example claims ---------------------------------------------------


def _device(driver: str = DRIVER, **attrs: Any) -> Any:
    """A device as the CEL environment sees it; attributes as the driver publishes them."""
    published = {
        "chipName": "910B3",
        "deviceType": "Ascend910B",
        "physicalId": 0,
        "logicId": 0,
        "cardId": 0,
        "chipId": 0,
        "topologyGroup": "ring-0",
    }
    published.update(attrs)
    published = {k: v for k, v in published.items() if v is not None}
    return json_to_cel(
        {"driver": driver, "attributes": {driver: published}, "capacity": {driver: {"memCapacity": "64Gi"}}}
    )


def _selects(expression: str, device: Any) -> bool:
    env = celpy.Environment()
    result = env.program(env.compile(expression)).evaluate({"device": device})
    assert isinstance(result, celpy.celtypes.BoolType), f"{expression!r} returned {result!r}"
    return bool(result)


def _cel(obj: Obj) -> list[str]:
    selectors = obj["spec"].get("selectors", [])
    return [s["cel"]["expression"] for s in selectors]


def _device_classes() -> dict[str, Obj]:
    classes = {}
    for path in (MANIFESTS / "deviceclasses").rglob("*.yaml"):
        if path == MANIFESTS / "deviceclasses" / VNPU_EXTENDED:
            continue
        for obj in _docs(path.read_text()):
            if obj.get("kind") == "DeviceClass":
                classes[obj["metadata"]["name"]] = obj
    return classes


FAMILIES = ("Ascend910", "Ascend910B", "Ascend910C", "Ascend310P", "Ascend310")
# class -> the device types it selects (of the driver's devices; another driver's never).
SELECTED_TYPES = {
    DRIVER: set(FAMILIES),
    "ascend910.npu.huawei.com": {"Ascend910", "Ascend910B", "Ascend910C"},
    "ascend310p.npu.huawei.com": {"Ascend310P"},
    "ascend310.npu.huawei.com": {"Ascend310"},
    "ascend910b.npu.huawei.com": {"Ascend910B"},
    "ascend910.extended.npu.huawei.com": {"Ascend910", "Ascend910B", "Ascend910C"},
    "ascend310p.extended.npu.huawei.com": {"Ascend310P"},
    "ascend310.extended.npu.huawei.com": {"Ascend310"},
    "vnpu.npu.huawei.com": set(),  # whole NPUs: none
    "shared.npu.huawei.com": set(),  # whole NPUs: none
}
# The vNPU mapping classes (optional/extended-resource-vnpu.yaml) select vNPUs only; their test is
# tests/unit/cli/test_inventory_deviceclasses.py.
VNPU_EXTENDED = "optional/extended-resource-vnpu.yaml"
VNPU_CLASS = "vnpu.npu.huawei.com"
SHARED_CLASS = "shared.npu.huawei.com"
# The classes `npu-plugin migrate` names by default, per device-plugin resource name.
MIGRATE_CLASSES = {
    "huawei.com/Ascend910": "ascend910.npu.huawei.com",
    "huawei.com/Ascend310P": "ascend310p.npu.huawei.com",
    "huawei.com/Ascend310": "ascend310.npu.huawei.com",
}


@pytest.mark.parametrize("name", sorted(SELECTED_TYPES))
def test_device_class_selects_exactly_its_device_types(name: str) -> None:
    (expression,) = _cel(_device_classes()[name])
    chosen = {family for family in FAMILIES if _selects(expression, _device(deviceType=family))}
    assert chosen == SELECTED_TYPES[name]
    assert _selects(expression, _device(driver="gpu.example.com", deviceType="Ascend910B")) is False


@pytest.mark.parametrize("name", sorted(SELECTED_TYPES))
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_only_the_vnpu_class_selects_vnpus(name: str, mode: str) -> None:
    """vNPUs overlap their NPU: a whole-NPU class that selected one would hand out part of a chip as
    a chip, and make `allocationMode: All` unsatisfiable."""
    (expression,) = _cel(_device_classes()[name])
    for family in FAMILIES:
        vnpu = _device(deviceType=family, vnpuTemplate="vir05_1c_16g", vnpuMode=mode)
        assert _selects(expression, vnpu) is (name == VNPU_CLASS), family
    assert _selects(expression, _device(driver="gpu.example.com", vnpuTemplate="vir05_1c_16g")) is False


@pytest.mark.parametrize("name", sorted(SELECTED_TYPES))
def test_only_the_shared_class_selects_shared_npus(name: str) -> None:
    """A claim of a whole-NPU class must get a chip of its own, never a share of one; the
    extended-resource classes select what the device plugin hands out under their name, which on a
    shared chip is a share."""
    (expression,) = _cel(_device_classes()[name])
    for family in FAMILIES:
        extended = name.endswith(".extended.npu.huawei.com") and family in SELECTED_TYPES[name]
        expected = name == SHARED_CLASS or extended
        assert _selects(expression, _device(deviceType=family, shareCount=4)) is expected, family


def test_every_device_class_is_described() -> None:
    assert _device_classes().keys() == SELECTED_TYPES.keys()
    extended = _device_classes()["ascend910.extended.npu.huawei.com"]
    assert extended["spec"]["extendedResourceName"] == "huawei.com/Ascend910"


def test_overlays_apply_the_classes_migrate_names() -> None:
    from npu_plugin.migrate.options import RESOURCE_DEVICE_CLASSES

    assert RESOURCE_DEVICE_CLASSES == MIGRATE_CLASSES
    for mode in ("dra", "both"):
        applied = {o["metadata"]["name"] for o in build(mode) if o["kind"] == "DeviceClass"}
        assert applied == {DRIVER, VNPU_CLASS, SHARED_CLASS, *MIGRATE_CLASSES.values()}, mode
    assert "DeviceClass" not in {o["kind"] for o in build("device-plugin")}


def _example_objects() -> Iterator[tuple[Path, Obj]]:
    for path in sorted((MANIFESTS / "examples").glob("*.yaml")):
        for obj in _docs(path.read_text()):
            yield path, obj


def _claim_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    return spec


def test_example_claims_are_coherent() -> None:
    classes = _device_classes()
    claims = {
        (o["kind"], o["metadata"]["name"]): o
        for _, o in _example_objects()
        if o["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
    }
    assert claims
    pods = [o for _, o in _example_objects() if o["kind"] == "Pod"]
    for pod in pods:
        declared = {c["name"]: c for c in pod["spec"].get("resourceClaims", [])}
        for c in declared.values():
            kind = "ResourceClaimTemplate" if "resourceClaimTemplateName" in c else "ResourceClaim"
            name = c.get("resourceClaimTemplateName") or c.get("resourceClaimName")
            assert (kind, name) in claims, f"pod {pod['metadata']['name']}: no {kind} {name}"
        for ctr in pod["spec"]["containers"]:
            for used in ctr.get("resources", {}).get("claims", []):
                assert used["name"] in declared
    for (_, name), claim in claims.items():
        spec = _claim_spec(claim)["devices"]
        for request in spec["requests"]:
            assert request["exactly"]["deviceClassName"] in classes, name
        for constraint in spec.get("constraints", []):
            assert constraint["matchAttribute"] == f"{DRIVER}/topologyGroup"


def test_example_selectors_never_error_on_devices_without_optional_attributes() -> None:
    claim = next(o for _, o in _example_objects() if o["kind"] == "ResourceClaim")
    (request,) = _claim_spec(claim)["devices"]["requests"]
    (expression,) = [s["cel"]["expression"] for s in request["exactly"]["selectors"]]
    assert 'device.attributes["npu.huawei.com"].numaNode == 6' in expression
    assert _selects(expression, _device(numaNode=6)) is True
    assert _selects(expression, _device(numaNode=5)) is False
    assert _selects(expression, _device()) is False  # numaNode unknown: not published


def test_examples_cover_the_documented_cases() -> None:
    kinds = [(p.name, o["kind"]) for p, o in _example_objects()]
    assert ("classic-limits.yaml", "Pod") in kinds
    classic = next(o for p, o in _example_objects() if p.name == "classic-limits.yaml")
    assert classic["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == 1
    assert any(k == "ResourceClaimTemplate" for _, k in kinds)
    assert any(k == "ResourceClaim" for _, k in kinds)
