"""Where the pod specs sit in the workload kinds `migrate` rewrites, and the names it derives
(pure)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq


@dataclass(frozen=True, slots=True)
class PodTemplates:
    """Where a kind keeps pod specs: a dotted path from the object to each pod spec.

    A step `key[]` walks every item of the list at `key`, naming the replica after the item's
    `role_key`; a step `key{}` walks every value of the mapping at `key`, named by its key. A path
    without such a step names its one pod template `role` (or nothing, for single-template kinds).
    """

    path: str
    role_noun: str = ""
    role: str | None = None
    role_key: str = "name"


_TEMPLATE = (PodTemplates("spec.template.spec"),)
_RAY_HEAD, _RAY_WORKERS = "headGroupSpec.template.spec", "workerGroupSpecs[].template.spec"


def _ray(prefix: str) -> tuple[PodTemplates, ...]:
    return (
        PodTemplates(f"{prefix}.{_RAY_HEAD}", "group", "head"),
        PodTemplates(f"{prefix}.{_RAY_WORKERS}", "worker group", role_key="groupName"),
    )


def _replica_specs(field: str) -> tuple[PodTemplates, ...]:
    return (PodTemplates(f"spec.{field}{{}}.template.spec", "replica type"),)


# (API group, kind) -> where its pod specs are. Adding a kind is one row.
KINDS: dict[tuple[str, str], tuple[PodTemplates, ...]] = {
    ("", "Pod"): (PodTemplates("spec"),),
    ("", "PodTemplate"): (PodTemplates("template.spec"),),
    ("", "ReplicationController"): _TEMPLATE,
    ("apps", "Deployment"): _TEMPLATE,
    ("apps", "StatefulSet"): _TEMPLATE,
    ("apps", "DaemonSet"): _TEMPLATE,
    ("apps", "ReplicaSet"): _TEMPLATE,
    ("batch", "Job"): _TEMPLATE,
    ("batch", "CronJob"): (PodTemplates("spec.jobTemplate.spec.template.spec"),),
    ("batch.volcano.sh", "Job"): (PodTemplates("spec.tasks[].template.spec", "task"),),
    ("mindxdl.gitee.com", "AscendJob"): _replica_specs("replicaSpecs"),
    ("kubeflow.org", "PyTorchJob"): _replica_specs("pytorchReplicaSpecs"),
    ("kubeflow.org", "MPIJob"): _replica_specs("mpiReplicaSpecs"),
    ("kubeflow.org", "TFJob"): _replica_specs("tfReplicaSpecs"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        PodTemplates("spec.leaderWorkerTemplate.leaderTemplate.spec", "template", "leader"),
        PodTemplates("spec.leaderWorkerTemplate.workerTemplate.spec", "template", "worker"),
    ),
    ("ray.io", "RayCluster"): _ray("spec"),
    ("ray.io", "RayJob"): _ray("spec.rayClusterSpec"),
    ("ray.io", "RayService"): _ray("spec.rayClusterConfig"),
    ("jobset.x-k8s.io", "JobSet"): (
        PodTemplates("spec.replicatedJobs[].template.spec.template.spec", "replicated job"),
    ),
    ("trainer.kubeflow.org", "TrainingRuntime"): (
        PodTemplates("spec.template.spec.replicatedJobs[].template.spec.template.spec", "replicated job"),
    ),
}
# Kinds that request NPUs without holding a pod template of their own: why migrate cannot rewrite
# them.
UNMIGRATABLE = {
    ("trainer.kubeflow.org", "TrainJob"): (
        "its pods come from the TrainingRuntime it references (spec.runtimeRef) and a TrainJob cannot "
        "add resource claims to them; move the NPU request into the runtime's pod template and claim "
        "it there"
    ),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): (
        "it is cluster-scoped while ResourceClaimTemplates are namespaced: its pods run in each TrainJob's "
        "namespace; copy it into a namespaced TrainingRuntime and migrate that"
    ),
}
BUILT_IN_GROUPS = ("", "apps", "batch")
_GROUP_ALIASES = {"extensions": "apps"}  # the pre-1.16 home of Deployment, DaemonSet and ReplicaSet
INIT_CONTAINER = "init container"
CONTAINER_LISTS = (("initContainers", INIT_CONTAINER), ("containers", "container"))
LABEL_MAX, SUBDOMAIN_MAX = 63, 253


@dataclass(frozen=True, slots=True)
class Workload:
    """One pod template of an object: the object's only one, or one replica type, task or group."""

    kind: str
    namespace: str | None
    name: str | None
    obj: CommentedMap
    pod_spec: CommentedMap
    role: str | None = None  # the replica type, task or group, for kinds with several templates
    role_noun: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} {qualified(self.namespace, self.name or '<unnamed>')}"

    @property
    def role_label(self) -> str:
        return f'{self.role_noun} "{self.role}"' if self.role is not None else ""


@dataclass(frozen=True, slots=True)
class Container:
    """One entry of a pod spec's containers or initContainers."""

    role: str  # "container" or "init container"
    name: str | None
    index: int
    node: CommentedMap

    @property
    def label(self) -> str:
        return f'{self.role} "{self.name}"' if self.name else f"{self.role} #{self.index + 1}"

    @property
    def runs_first(self) -> bool:
        """An init container that ends before the next container starts (a sidecar, restartPolicy
        Always, does not)."""
        return self.role == INIT_CONTAINER and self.node.get("restartPolicy") != "Always"


class ShapeError(Exception):
    """A known kind whose template path holds the wrong type of node; `line` is the node's body
    line."""

    def __init__(self, detail: str, line: int) -> None:
        super().__init__(detail)
        self.line = line


def qualified(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def objects(data: Any) -> Iterator[CommentedMap]:
    """The Kubernetes objects a document holds: itself, or the items of a `kind: List`."""
    if not isinstance(data, CommentedMap):
        return
    if data.get("kind") == "List" and isinstance(data.get("items"), list):
        yield from (item for item in data["items"] if isinstance(item, CommentedMap))
    else:
        yield data


def group_kind(obj: CommentedMap) -> tuple[str, str]:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return "", ""
    group = api_version.rpartition("/")[0]
    return _GROUP_ALIASES.get(group, group), kind


def type_label(obj: CommentedMap) -> str:
    """`apiVersion/kind`, or as much of it as the object has."""
    parts = [str(obj[key]) for key in ("apiVersion", "kind") if obj.get(key)]
    return "/".join(parts) or "object"


def identity(obj: CommentedMap) -> tuple[str | None, str | None]:
    """(namespace, name) from metadata; `generateName` stands in for a missing name."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None, None
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not isinstance(name, str) or not name:
        generated = metadata.get("generateName")
        name = generated.rstrip("-.") if isinstance(generated, str) else None
    return (str(namespace) if namespace else None), (name or None)


def is_workload(obj: CommentedMap) -> bool:
    return group_kind(obj) in KINDS


def kept_as_is(obj: CommentedMap) -> str | None:
    """Why migrate leaves `obj`, whatever its kind, as it is: a Pod read from the cluster (Pods are
    immutable), or an object a controller owns (the controller puts back its own pod template)."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    references = metadata.get("ownerReferences")
    owner = next(
        (
            f"{reference.get('kind')} {reference.get('name')}"
            for reference in (references if isinstance(references, list) else [])
            if isinstance(reference, dict) and reference.get("controller") is True
        ),
        None,
    )
    if group_kind(obj) == ("", "Pod"):
        fields = (("metadata.uid", "uid" in metadata), ("metadata.ownerReferences", bool(references)))
        live = [name for name, here in (*fields, ("status", "status" in obj)) if here]
        if not live:
            return None
        then = (
            f"migrate the manifest of its controller, {owner} (or of what owns that), which replaces the Pod"
            if owner
            else "migrate the manifest it was created from, then delete the Pod and create it again"
        )
        return f"a live Pod ({', '.join(live)}), and Pods are immutable: {then}"
    if owner:
        kind = owner.split(" ", 1)[0]
        return (
            f"its controller, {owner} (metadata.ownerReferences), puts back its own pod template: migrate the "
            f"{kind}'s manifest instead"
        )
    return None


def workloads(obj: CommentedMap) -> list[Workload]:
    """Every pod template of `obj` (none for kinds not in KINDS); ShapeError when a path has the
    wrong type."""
    group, kind = group_kind(obj)
    namespace, name = identity(obj)
    label = kind if group in BUILT_IN_GROUPS else type_label(obj)
    found: list[Workload] = []
    for templates in KINDS.get((group, kind), ()):
        for role, pod_spec in _walk(obj, templates.path.split("."), templates, templates.role, ""):
            found.append(Workload(label, namespace, name, obj, pod_spec, role, templates.role_noun))
    return found


def _walk(
    node: CommentedMap, steps: list[str], templates: PodTemplates, role: str | None, where: str
) -> Iterator[tuple[str | None, CommentedMap]]:
    if not steps:
        yield role, node
        return
    step, rest = steps[0], steps[1:]
    key = step.removesuffix("[]").removesuffix("{}")
    value = node.get(key)
    if value is None:
        return
    path = f"{where}.{key}" if where else key
    line = key_line(node, key)
    children: list[tuple[str, str | None, Any, int]]
    if step.endswith("[]"):
        if not isinstance(value, CommentedSeq):
            raise ShapeError(f"{path} must be a list, got {_type_name(value)}", line)
        children = [
            (f"{path}[{index}]", _item_role(item, templates.role_key, index), item, value.lc.item(index)[0])
            for index, item in enumerate(value)
        ]
    elif step.endswith("{}"):
        if not isinstance(value, CommentedMap):
            raise ShapeError(f"{path} must be a mapping, got {_type_name(value)}", line)
        children = [(f"{path}.{name}", str(name), item, key_line(value, name)) for name, item in value.items()]
    else:
        children = [(path, role, value, line)]
    for child_path, child_role, child, child_line in children:
        if child is None:
            continue
        if not isinstance(child, CommentedMap):
            raise ShapeError(f"{child_path} must be a mapping, got {_type_name(child)}", child_line)
        yield from _walk(child, rest, templates, child_role, child_path)


def _item_role(item: Any, role_key: str, index: int) -> str:
    named = item.get(role_key) if isinstance(item, dict) else None
    return str(named) if named else str(index)


def key_line(mapping: CommentedMap, key: Any) -> int:
    try:
        return int(mapping.lc.key(key)[0])
    except (KeyError, TypeError):
        return int(mapping.lc.line)


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def containers(pod_spec: CommentedMap) -> Iterator[Container]:
    for key, role in CONTAINER_LISTS:
        entries = pod_spec.get(key)
        for index, node in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(node, CommentedMap):
                name = node.get("name")
                yield Container(role, name if isinstance(name, str) and name else None, index, node)


def claim_name(container: str) -> str:
    """The pod-level claim name for a container's NPUs: a DNS label, unique in the pod."""
    return _dns_name(f"{container}-npu", LABEL_MAX, allow_dots=False)


def template_name(workload_name: str, container: str, role: str | None = None) -> str:
    """The ResourceClaimTemplate name for a workload's (replica type's) container: a DNS-1123
    subdomain.

    Replica types are written in any case (`Worker`); they are lowered here rather than digested.
    """
    middle = f"{role.lower()}-" if role is not None else ""
    return _dns_name(f"{workload_name}-{middle}{container}-npu", SUBDOMAIN_MAX, allow_dots=True)


def _dns_name(wanted: str, limit: int, allow_dots: bool) -> str:
    invalid = r"[^a-z0-9.-]+" if allow_dots else r"[^a-z0-9-]+"
    name = re.sub(invalid, "-", wanted.lower())
    name = re.sub(r"[-.]*\.[-.]*", ".", name).strip("-.")
    if len(name) <= limit and name == wanted:
        return name
    # Cut names and repaired names both get a digest, so two inputs cannot fold into one name.
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:8]
    return f"{name[: limit - len(digest) - 1].rstrip('-.')}-{digest}".lstrip("-")
