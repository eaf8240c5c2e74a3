"""What `plan` read from the cluster, reduced to the facts the planner decides on (pure records).

Every record is small and built as each page of a LIST arrives, so a 40,000-pod cluster is held as
40,000 of these rather than as 40,000 API objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("device-plugin", "dra", "both")
RESOURCE_PREFIX = "huawei.com/"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    mode: str | None  # the npu.huawei.com/plugin-mode label; None when absent
    kubelet: tuple[int, int] | None  # from status.nodeInfo.kubeletVersion
    ready: bool
    unschedulable: bool
    capacity: tuple[tuple[str, int], ...]  # huawei.com/* names with capacity > 0


@dataclass(frozen=True, slots=True)
class PluginDaemonSet:
    namespace: str
    name: str
    mode: str  # --mode of its serve container
    selected_mode: str | None  # the plugin-mode label value its nodeSelector asks for
    vnpu: str  # --vnpu (off, static, dynamic)
    unhealthy_policy: str  # --unhealthy-policy


@dataclass(frozen=True, slots=True)
class PluginPod:
    namespace: str
    name: str
    node: str
    mode: str
    ready: bool


@dataclass(frozen=True, slots=True)
class SliceInfo:
    name: str
    node: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: int
    vnpus: int  # devices with a vnpuTemplate attribute
    taints: int  # devices carrying a taint
    counters: bool  # sharedCounters or consumesCounters present (partitionable devices stored)
    foreign_attributes: bool  # another driver's devices with attributes in our driver's domain


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    extended_resource: str | None
    ours: bool  # its CEL names our driver (or our attribute domain)


@dataclass(frozen=True, slots=True)
class Owner:
    kind: str
    name: str
    group: str  # the API group of its apiVersion ("" for core)


@dataclass(frozen=True, slots=True)
class NpuPod:
    """A pod that asks for huawei.com/* resources or holds one of our claims; finished pods are
    left out."""

    namespace: str
    name: str
    node: str  # spec.nodeName; "" while pending
    resources: tuple[tuple[str, int], ...]  # huawei.com/* per pod (containers summed)
    owner: Owner | None  # the controller, a ReplicaSet read as its Deployment
    scheduler: str
    labels: tuple[tuple[str, str], ...]
    claims: tuple[str, ...]  # ResourceClaim names the pod's status names
    placed_by_name: bool  # spec.nodeName with no PodScheduled condition: the scheduler never saw it

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    namespace: str
    name: str
    classes: tuple[str, ...]
    nodes: tuple[str, ...]  # pools of our driver its allocation uses (our pools are named after nodes)
    reserved_for: tuple[str, ...]  # pod names


@dataclass(frozen=True, slots=True)
class ClaimTemplateInfo:
    namespace: str
    name: str
    classes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (matchLabels become In)
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: tuple[Requirement, ...] | None  # None selects nothing; () selects every pod
    disruptions_allowed: int


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    namespace: str
    name: str
    hard: tuple[tuple[str, str], ...]  # the huawei.com/* entries


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: tuple[int, int] | None
    resource_versions: tuple[str, ...]  # resource.k8s.io versions served (discovery)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A kind `plan` could not read, and why (one line)."""

    resource: str
    reason: str


@dataclass
class Snapshot:
    """Everything read; `unreadable` names the kinds missing from it."""

    driver: str
    server: ServerInfo = field(default_factory=lambda: ServerInfo(None, ()))
    nodes: list[NodeInfo] = field(default_factory=list)
    daemonsets: list[PluginDaemonSet] = field(default_factory=list)
    plugin_pods: list[PluginPod] = field(default_factory=list)
    slices: list[SliceInfo] = field(default_factory=list)
    classes: list[DeviceClassInfo] = field(default_factory=list)
    pods: list[NpuPod] = field(default_factory=list)
    claims: list[ClaimInfo] = field(default_factory=list)
    templates: list[ClaimTemplateInfo] = field(default_factory=list)
    budgets: list[DisruptionBudget] = field(default_factory=list)
    quotas: list[QuotaInfo] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # one line per object skipped

    def readable(self, resource: str) -> bool:
        return all(u.resource != resource for u in self.unreadable)
