"""The decision (pure): from a `Snapshot`, each node's verdict, reasons and steps toward a target
mode, and the cluster's findings. Everything the operator must run is a shell command in `steps`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from npu_plugin.migrate.options import KNOWN_RESOURCE_NAMES
from npu_plugin.plan import features
from npu_plugin.plan.features import DRA_FLOOR, Feature, gate_state
from npu_plugin.plan.objects import MODE_LABEL
from npu_plugin.plan.snapshot import ClaimInfo, DisruptionBudget, NodeInfo, NpuPod, PluginPod, SliceInfo, Snapshot

READY, AFTER_DRAIN, BLOCKED = "ready", "ready-after-drain", "blocked"
ERROR, WARNING, INFO = "error", "warning", "info"
# Finding kinds (documented in docs/migration.md).
DUAL_ADVERTISEMENT = "dual-advertisement"
SECOND_DRIVER = "second-driver"
NEEDS_MIGRATE = "needs-migrate"
SERVED_UNCHANGED = "served-unchanged"
NEEDS_REVERT = "needs-revert"
VERSION_FLOOR = "version-floor"
QUOTA = "quota"
SCHEDULER = "scheduler"
BOTH_SPLIT = "both-split"
UNREADABLE = "unreadable"
MALFORMED = "malformed"
DEFAULT_SCHEDULER = "default-scheduler"
WAIT_SECONDS = 300
_RANK = {READY: 0, AFTER_DRAIN: 1, BLOCKED: 2}
# What each kind that cannot be read keeps `plan` from knowing.
_NOT_MADE = {
    "nodes": "every node verdict",
    "pods": "the NPU pods on each node, needs-migrate, scheduler",
    "daemonsets": "whether a DaemonSet serves the target mode, vNPU and taint floors",
    "resourceslices": "second-driver, both-split, the gates seen in stored slices",
    "deviceclasses": "dual-advertisement, served-unchanged, the KEP-5004 floor",
    "resourceclaims": "the pods holding DRA devices on each node",
    "resourceclaimtemplates": "needs-revert of templates",
    "poddisruptionbudgets": "whether a drain is allowed now",
    "resourcequotas": "quota",
    "version": "every version-floor",
    "discovery": "whether resource.k8s.io/v1 is served",
}


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    resources: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class NodePlan:
    name: str
    mode: str
    target: str
    verdict: str
    reasons: tuple[str, ...]
    pods: tuple[PodRef, ...]
    steps: tuple[str, ...]
    vnpu: bool


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    severity: str
    message: str
    objects: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    target: str
    nodes: tuple[NodePlan, ...]
    findings: tuple[Finding, ...]

    @property
    def ready(self) -> bool:
        """Every selected node can reach the target now and no finding is an error."""
        return all(node.verdict == READY for node in self.nodes) and all(f.severity != ERROR for f in self.findings)


class UnknownNodeError(ValueError):
    """A --node name the cluster does not have."""


# ---- the cluster as the planner sees it


@dataclass
class _Cluster:
    """Indexes over the snapshot, built once."""

    snapshot: Snapshot
    target: str

    def __post_init__(self) -> None:
        s = self.snapshot
        self.pods_by_node: dict[str, list[NpuPod]] = defaultdict(list)
        for pod in s.pods:
            if pod.node:
                self.pods_by_node[pod.node].append(pod)
        self.our_claims = {(c.namespace, c.name): c for c in s.claims if c.nodes}
        self.reserved: dict[tuple[str, str], list[ClaimInfo]] = defaultdict(list)
        for c in self.our_claims.values():
            for pod_name in c.reserved_for:
                self.reserved[(c.namespace, pod_name)].append(c)
        self.slices_by_node: dict[str, list[SliceInfo]] = defaultdict(list)
        for item in s.slices:
            self.slices_by_node[item.node].append(item)
        self.mapping = {c.extended_resource: c for c in s.classes if c.ours and c.extended_resource is not None}
        self.plugin_modes: dict[str, set[str]] = defaultdict(set)
        self.plugins_by_node: dict[str, list[PluginPod]] = defaultdict(list)
        for plugin in s.plugin_pods:
            self.plugin_modes[plugin.node].add(plugin.mode)
            self.plugins_by_node[plugin.node].append(plugin)
        self.budgets: dict[str, list[DisruptionBudget]] = defaultdict(list)
        for found in s.budgets:
            self.budgets[found.namespace].append(found)

    def readable(self, *resources: str) -> bool:
        return all(self.snapshot.readable(r) for r in resources)

    def dra_held(self, pod: NpuPod) -> bool:
        """The pod holds devices of our driver through a claim on its node."""
        named = (self.our_claims.get((pod.namespace, name)) for name in pod.claims)
        reserving = self.reserved.get((pod.namespace, pod.name), [])
        return any(claim is not None and pod.node in claim.nodes for claim in (*named, *reserving))


def _mode_of(node: NodeInfo, cluster: _Cluster) -> str:
    if node.mode:
        return node.mode
    modes = cluster.plugin_modes.get(node.name)
    return sorted(modes)[0] if modes else "none"


def _is_npu_node(node: NodeInfo, cluster: _Cluster) -> bool:
    return bool(
        node.mode or node.capacity or cluster.slices_by_node.get(node.name) or cluster.plugin_modes.get(node.name)
    )


def _is_vnpu_node(node: NodeInfo, cluster: _Cluster) -> bool:
    """vNPU resources advertised (`huawei.com/Ascend910-5c.1cpu.16g`) or vNPU devices published."""
    dp_vnpus = any("-" in name.partition("/")[2] for name, _ in node.capacity)
    return dp_vnpus or any(s.vnpus for s in cluster.slices_by_node.get(node.name, []))


# ---- one node


def _selects(budget: DisruptionBudget, pod: NpuPod) -> bool:
    if budget.namespace != pod.namespace or budget.selector is None:
        return False
    labels = dict(pod.labels)
    for req in budget.selector:
        value = labels.get(req.key)
        ok = {
            "In": value is not None and value in req.values,
            "NotIn": value is None or value not in req.values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[req.operator]
        if not ok:
            return False
    return True


def _pods_to_move(node: NodeInfo, mode: str, target: str, cluster: _Cluster) -> list[NpuPod]:
    """The pods that must leave before the node changes mode: those holding devices the new mode
    does not see (device-plugin allocations for pure DRA, claims for the pure device plugin)."""
    pods = cluster.pods_by_node.get(node.name, [])
    if target in ("both", mode):
        return []
    if target == "dra":
        return [p for p in pods if p.resources and not cluster.dra_held(p)]
    return [p for p in pods if cluster.dra_held(p)]  # target device-plugin


def _drain_blockers(moving: Sequence[NpuPod], budgets: Sequence[DisruptionBudget]) -> list[str]:
    reasons = []
    for pod in moving:
        if pod.owner is None:
            reasons.append(f"pod {pod.key} has no controller: a drain deletes it for good; move it first")
        elif pod.owner.kind == "DaemonSet":
            reasons.append(
                f"pod {pod.key} of DaemonSet {pod.owner.name} holds NPUs and a drain leaves DaemonSet pods; "
                "keep that DaemonSet off this node first"
            )
    for budget in budgets:
        covered = [p for p in moving if _selects(budget, p)]
        if len(covered) > budget.disruptions_allowed:
            names = ", ".join(p.key for p in covered)
            reasons.append(
                f"PodDisruptionBudget {budget.namespace}/{budget.name} allows {budget.disruptions_allowed} "
                f"disruption(s) now and this node's pods {names} need {len(covered)}"
            )
    return reasons


def _daemonset_for(target: str, cluster: _Cluster) -> list[str]:
    if not cluster.readable("daemonsets"):
        return []
    found = [d for d in cluster.snapshot.daemonsets if d.mode == target and d.selected_mode in (target, None)]
    if found:
        return []
    return [
        f"no npu-plugin DaemonSet runs --mode {target} on nodes labelled {MODE_LABEL}={target}: "
        f"kubectl apply -k manifests/overlays/{target}"
    ]


def _version_blockers(node: NodeInfo, target: str, cluster: _Cluster) -> list[str]:
    if target == "device-plugin":
        return []
    reasons = []
    if node.kubelet is not None and node.kubelet < DRA_FLOOR:
        reasons.append(
            f"kubelet {node.kubelet[0]}.{node.kubelet[1]} is older than 1.34, the first release serving "
            "resource.k8s.io/v1 to DRA drivers: upgrade the kubelet first"
        )
    served = cluster.snapshot.server.resource_versions
    if cluster.readable("discovery") and "v1" not in served:
        reasons.append("the API server does not serve resource.k8s.io/v1 (Kubernetes 1.34+): upgrade it first")
    return reasons


def _wait_step(node: str, target: str, driver: str) -> str:
    """A bounded wait until the node serves the target: its ResourceSlices published, or a
    `huawei.com/*` resource above 0 in its allocatable (a device plugin that left keeps its name at
    0)."""
    if target == "device-plugin":
        check = (
            f'kubectl get node {node} -o jsonpath="{{.status.allocatable}}" | grep -Eq "huawei.com/[^\\"]*\\":\\"[1-9]"'
        )
    else:
        selector = f"spec.nodeName={node},spec.driver={driver}"
        check = f"kubectl get resourceslices --field-selector {selector} -o name | grep -q ."
    return f"timeout {WAIT_SECONDS} sh -c 'until {check}; do sleep 2; done'"


def _steps(node: NodeInfo, target: str, moving: Sequence[NpuPod], drops_a_side: bool, driver: str) -> list[str]:
    cordon = drops_a_side and not node.unschedulable
    steps = [f"kubectl cordon {node.name}"] if cordon else []
    if evicted := [p for p in moving if p.owner is None or p.owner.kind != "DaemonSet"]:
        evicts = ", ".join(p.key for p in evicted)
        steps.append(f"kubectl drain {node.name} --ignore-daemonsets --delete-emptydir-data  # evicts {evicts}")
    steps.append(f"kubectl label node {node.name} {MODE_LABEL}={target} --overwrite")
    steps.append(_wait_step(node.name, target, driver))
    if cordon:
        steps.append(f"kubectl uncordon {node.name}")
    return steps


def _health(node: NodeInfo, target: str, cluster: _Cluster) -> list[str]:
    """What is still settling on a node already in the target mode: its plugin pod, its pool."""
    notes = []
    plugins = [p for p in cluster.plugins_by_node.get(node.name, []) if p.mode == target]
    if cluster.readable("pods") and not plugins:
        notes.append(f"no npu-plugin pod of mode {target} runs here yet")
    notes += [f"npu-plugin pod {p.namespace}/{p.name} is not ready" for p in plugins if not p.ready]
    if target == "device-plugin" or not cluster.readable("resourceslices"):
        return notes
    pool = [s for s in cluster.slices_by_node.get(node.name, []) if s.driver == cluster.snapshot.driver]
    newest = max((s.generation for s in pool), default=0)
    current = [s for s in pool if s.generation == newest]
    if not current:
        notes.append("its pool is not published yet: no ResourceSlice of this node")
    elif len(current) < current[0].slice_count:
        notes.append(f"its pool is incomplete: {len(current)} of {current[0].slice_count} ResourceSlices published")
    return notes


def _plan_node(node: NodeInfo, target: str, cluster: _Cluster, blocked_by: dict[str, list[str]]) -> NodePlan:
    mode = _mode_of(node, cluster)
    vnpu = _is_vnpu_node(node, cluster)
    held = [
        PodRef(p.namespace, p.name, p.resources)
        for p in cluster.pods_by_node.get(node.name, [])
        if p.resources or cluster.dra_held(p)
    ]
    if mode == target:
        reasons = [f"already in {target} mode", *_health(node, target, cluster)]
        if held:
            reasons.append(f"{len(held)} NPU pod(s) run here, served by the {target} mode")
        return NodePlan(node.name, mode, target, READY, tuple(reasons), tuple(held), (), vnpu)
    blockers = list(blocked_by.get(node.name, []))
    if not node.ready:
        blockers.append("the node is not Ready: the plugin cannot start there")
    blockers += _version_blockers(node, target, cluster)
    blockers += _daemonset_for(target, cluster)
    notes: list[str] = []
    unknown = [r for r in ("pods", "resourceclaims") if not cluster.readable(r)]
    if unknown:
        blockers.append(f"{' and '.join(unknown)} could not be read: the NPU pods on this node are unknown")
    moving = _pods_to_move(node, mode, target, cluster)
    if moving and not cluster.readable("poddisruptionbudgets"):
        blockers.append("poddisruptionbudgets could not be read: whether a drain is allowed now is unknown")
    namespaces = sorted({p.namespace for p in moving})
    blockers += _drain_blockers(moving, [b for ns in namespaces for b in cluster.budgets.get(ns, [])])
    if moving:
        notes.append(
            f"{len(moving)} pod(s) hold NPUs the {target} mode does not see and must move: "
            + ", ".join(p.key for p in moving)
        )
    elif held and target == "both":
        notes.append(f"{len(held)} NPU pod(s) keep their devices: each device moves to DRA once released")
    if target == "both":
        notes.append("both mode gives DRA the devices of dra-devices in manifests/base/kustomization.yaml")
    if node.unschedulable:
        notes.append("the node is cordoned already: the steps leave it cordoned")
    drops_a_side = target != "both"
    steps = _steps(node, target, moving, drops_a_side, cluster.snapshot.driver)
    verdict = BLOCKED if blockers else AFTER_DRAIN if moving else READY
    if not blockers and not moving:
        notes.insert(0, "no NPU pod has to move" if not held else "its NPU pods can stay")
    return NodePlan(node.name, mode, target, verdict, tuple(blockers + notes), tuple(held), tuple(steps), vnpu)


# ---- the cluster's findings


def _server_version_findings(cluster: _Cluster, planned: Sequence[NodePlan]) -> list[Finding]:
    s = cluster.snapshot
    found: list[Finding] = []
    version = s.server.version
    if version is not None and version < DRA_FLOOR and cluster.target != "device-plugin":
        found.append(
            Finding(
                VERSION_FLOOR,
                ERROR,
                f"the API server is {version[0]}.{version[1]}; DRA (resource.k8s.io/v1) needs 1.34 or newer",
                ("apiserver",),
            )
        )
    if version is None or cluster.target == "device-plugin":
        return found
    kubelets = {n.name: n.kubelet for n in s.nodes if n.kubelet is not None}
    dra_nodes = [p.name for p in planned]
    wanted: list[tuple[Feature, str, bool | None]] = []
    if cluster.mapping:
        names = ", ".join(f"{c.name} maps {r}" for r, c in sorted(cluster.mapping.items()))
        wanted.append((features.EXTENDED_RESOURCE, names, None))
    if any(d.vnpu == "dynamic" for d in s.daemonsets):
        observed = True if any(x.counters for x in s.slices if x.driver == s.driver) else None
        wanted.append((features.PARTITIONABLE, "a DaemonSet runs --vnpu dynamic", observed))
    if any(d.unhealthy_policy == "taint" for d in s.daemonsets) or any(x.taints for x in s.slices):
        observed = True if any(x.taints for x in s.slices if x.driver == s.driver) else None
        wanted.append((features.DEVICE_TAINTS, "devices are tainted when unhealthy", observed))
    for feature, why, observed in wanted:
        state = gate_state(feature, version, observed)
        message = f"{feature.purpose} ({why}) needs {feature.gate} on the API server and scheduler: {state.how}"
        if not state.on:
            message += f"; enable it with {features.enable_hint(feature)}"
        found.append(Finding(VERSION_FLOOR, INFO if state.on else WARNING, message, ("apiserver",)))
        if feature is features.PARTITIONABLE:
            continue  # a kubelet does not take part in partitioning
        old = sorted(n for n in dra_nodes if (k := kubelets.get(n)) is not None and not gate_state(feature, k).on)
        if old:
            found.append(
                Finding(
                    VERSION_FLOOR,
                    WARNING,
                    f"{feature.gate} is off by default on the kubelets of {len(old)} node(s) (older than "
                    f"1.{feature.default_on_from}, inferred): {feature.purpose} needs "
                    f"{features.enable_hint(feature)} on them",
                    tuple(f"node/{n}" for n in old),
                )
            )
    return found


def _dual_advertisement(cluster: _Cluster) -> list[Finding]:
    found = []
    for node in cluster.snapshot.nodes:
        for name, count in node.capacity:
            mapped = cluster.mapping.get(name)
            if mapped is not None:
                found.append(
                    Finding(
                        DUAL_ADVERTISEMENT,
                        WARNING,
                        f"node {node.name} advertises {name} through the device plugin ({count}) while DeviceClass "
                        f"{mapped.name} maps the same name: the scheduler serves {name} there from the device "
                        "plugin and the class only where no device plugin advertises it (KEP-5004)",
                        (f"node/{node.name}", f"deviceclass/{mapped.name}"),
                    )
                )
    return found


def _second_driver(cluster: _Cluster) -> tuple[list[Finding], dict[str, list[str]]]:
    s = cluster.snapshot
    found, per_node = [], defaultdict(list)
    for item in s.slices:
        if item.driver == s.driver and (item.pool == item.node or not item.node):
            continue
        if item.driver != s.driver and not item.foreign_attributes:
            continue
        who = f"driver {item.driver}" if item.driver != s.driver else f"pool {item.pool} (not this node's)"
        message = (
            f"ResourceSlice {item.name} on node {item.node or '(all nodes)'} publishes {s.driver} devices from "
            f"{who}: two publishers would hand out the same NPUs; remove the other driver from the node first"
        )
        found.append(Finding(SECOND_DRIVER, ERROR, message, (f"resourceslice/{item.name}",)))
        if item.node:
            per_node[item.node].append(f"another publisher of {s.driver} devices runs here ({who})")
    return found, per_node


def _workload_key(pod: NpuPod) -> tuple[str, str]:
    """(namespace, kubectl resource/name) of what created the pod."""
    if pod.owner is None:
        return pod.namespace, f"pod/{pod.name}"
    group = f".{pod.owner.group}" if pod.owner.group not in ("", "apps", "batch") else ""
    return pod.namespace, f"{pod.owner.kind.lower()}{group}/{pod.owner.name}"


def _migrate_findings(cluster: _Cluster) -> list[Finding]:
    s = cluster.snapshot
    if not cluster.readable("pods"):
        return []
    workloads: dict[tuple[str, str], set[str]] = defaultdict(set)
    for pod in s.pods:
        if pod.resources and not cluster.dra_held(pod):
            workloads[_workload_key(pod)].update(name for name, _ in pod.resources)
    found = []
    version = s.server.version
    mapping_on = version is not None and gate_state(features.EXTENDED_RESOURCE, version).on
    for (namespace, ref), names in sorted(workloads.items()):
        if cluster.target == "device-plugin":
            continue
        mapped = [cluster.mapping[n].name for n in sorted(names) if n in cluster.mapping]
        if len(mapped) == len(names) and mapping_on:
            found.append(
                Finding(
                    SERVED_UNCHANGED,
                    INFO,
                    f"{namespace}/{ref} asks {', '.join(sorted(names))}: served unchanged on DRA nodes by "
                    f"DeviceClass {', '.join(mapped)}",
                    (f"{namespace}/{ref}",),
                )
            )
            continue
        known = [n for n in sorted(names) if n in KNOWN_RESOURCE_NAMES]
        flags = "".join(f" --resource-name {n}" for n in known)
        file = ref.split("/", 1)[1]
        message = f"{namespace}/{ref} asks {', '.join(sorted(names))} and needs migrate"
        if known:
            message += (
                f": kubectl get -n {namespace} {ref} -o yaml | npu-plugin migrate -f -{flags} "
                f"-o {namespace}-{file}.dra.yaml"
            )
        if other := sorted(set(names) - set(known)):
            message += (
                f"; {', '.join(other)} has no shipped DeviceClass: pick one (npu-plugin inventory --output "
                "deviceclasses prints one per vNPU template) and pass --resource-name NAME --device-class CLASS"
            )
        found.append(Finding(NEEDS_MIGRATE, WARNING, message, (f"{namespace}/{ref}",)))
    if cluster.target == "device-plugin":
        ours = {c.name for c in s.classes if c.ours}
        for template in s.templates:
            if set(template.classes) & ours:
                found.append(
                    Finding(
                        NEEDS_REVERT,
                        WARNING,
                        f"ResourceClaimTemplate {template.namespace}/{template.name} asks DeviceClass "
                        f"{', '.join(template.classes)}: its workloads find no devices on device-plugin nodes; "
                        "re-apply their manifests from before migrate",
                        (f"{template.namespace}/resourceclaimtemplate/{template.name}",),
                    )
                )
    return found


def _scheduler_findings(cluster: _Cluster) -> list[Finding]:
    by_scheduler: dict[str, list[str]] = defaultdict(list)
    pinned = []
    for pod in cluster.snapshot.pods:
        if pod.scheduler != DEFAULT_SCHEDULER:
            by_scheduler[pod.scheduler].append(pod.key)
        if pod.placed_by_name:
            pinned.append(pod.key)
    found = []
    for scheduler, pods in sorted(by_scheduler.items()):
        if "volcano" in scheduler:
            why = (
                "Volcano allocates resource claims only with its DRA plugin enabled (older Volcano ignores "
                "resourceClaims): keep these workloads on device-plugin nodes or unmigrated until it is"
            )
        else:
            why = "check that it allocates resource claims before migrating these workloads"
        found.append(
            Finding(SCHEDULER, WARNING, f"{len(pods)} NPU pod(s) use scheduler {scheduler}: {why}", tuple(pods))
        )
    if pinned:
        found.append(
            Finding(
                SCHEDULER,
                WARNING,
                f"{len(pinned)} NPU pod(s) were placed by spec.nodeName, bypassing the scheduler: a claim is never "
                "allocated for such a pod; let the scheduler place them (nodeSelector) before migrating",
                tuple(pinned),
            )
        )
    return found


def _quota_findings(cluster: _Cluster) -> list[Finding]:
    found = []
    for quota in cluster.snapshot.quotas:
        entries = ", ".join(f"{k}={v}" for k, v in quota.hard)
        message = (
            f"ResourceQuota {quota.namespace}/{quota.name} limits {entries}: pods served by DRA through a "
            "DeviceClass extendedResourceName still count against it; migrated pods count against "
            "<class>.deviceclass.resource.k8s.io/devices instead, which it does not limit"
        )
        found.append(Finding(QUOTA, WARNING, message, (f"{quota.namespace}/resourcequota/{quota.name}",)))
    return found


def _both_split(cluster: _Cluster) -> list[Finding]:
    found = []
    for node in cluster.snapshot.nodes:
        if _mode_of(node, cluster) != "both":
            continue
        dp = ", ".join(f"{k}={v}" for k, v in node.capacity) or "nothing"
        ours = [s for s in cluster.slices_by_node.get(node.name, []) if s.driver == cluster.snapshot.driver]
        found.append(
            Finding(
                BOTH_SPLIT,
                INFO,
                f"node {node.name} is in both mode: the device plugin advertises {dp}, DRA publishes "
                f"{sum(s.devices for s in ours)} device(s)",
                (f"node/{node.name}",),
            )
        )
    return found


def _unreadable_findings(snapshot: Snapshot) -> list[Finding]:
    return [
        Finding(
            UNREADABLE,
            ERROR,
            f"{u.reason}; not made: {_NOT_MADE.get(u.resource, u.resource)}",
            (u.resource,),
        )
        for u in snapshot.unreadable
    ] + [Finding(MALFORMED, WARNING, f"skipped {line}", ()) for line in snapshot.malformed]


# ---- the whole plan


def make_plan(snapshot: Snapshot, target: str, selected: Iterable[str] = ()) -> Plan:
    """The plan for `selected` node names (every NPU node when empty); UnknownNodeError names the
    first selected node the cluster lacks."""
    cluster = _Cluster(snapshot, target)
    by_name = {n.name: n for n in snapshot.nodes}
    chosen = list(dict.fromkeys(selected))
    if chosen and (missing := [n for n in chosen if n not in by_name]) and snapshot.readable("nodes"):
        raise UnknownNodeError(f"node {missing[0]} does not exist")
    npu_nodes = [n for n in snapshot.nodes if _is_npu_node(n, cluster)]
    nodes = [by_name[n] for n in chosen if n in by_name] if chosen else npu_nodes
    second, blocked_by = _second_driver(cluster)
    planned = [_plan_node(node, target, cluster, blocked_by) for node in nodes]
    planned.sort(key=lambda p: (p.vnpu, _RANK[p.verdict], p.name))
    findings = [
        *_unreadable_findings(snapshot),
        *_server_version_findings(cluster, planned),
        *second,
        *_dual_advertisement(cluster),
        *_migrate_findings(cluster),
        *_scheduler_findings(cluster),
        *_quota_findings(cluster),
        *_both_split(cluster),
    ]
    findings.sort(key=lambda f: {ERROR: 0, WARNING: 1, INFO: 2}[f.severity])
    return Plan(target, tuple(planned), tuple(findings))
