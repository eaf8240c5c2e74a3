"""Where the pod specs sit in the workload kinds `migrate` rewrites, and the names it derives (pure)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap

_TEMPLATE = ("spec", "template", "spec")
# (API group, kind) -> path from the object to its pod spec.
POD_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("spec",),
    ("", "PodTemplate"): ("template", "spec"),
    ("", "ReplicationController"): _TEMPLATE,
    ("apps", "Deployment"): _TEMPLATE,
    ("apps", "StatefulSet"): _TEMPLATE,
    ("apps", "DaemonSet"): _TEMPLATE,
    ("apps", "ReplicaSet"): _TEMPLATE,
    ("batch", "Job"): _TEMPLATE,
    ("batch", "CronJob"): ("spec", "jobTemplate", *_TEMPLATE),
}
_GROUP_ALIASES = {"extensions": "apps"}  # the pre-1.16 home of Deployment, DaemonSet and ReplicaSet
CONTAINER_LISTS = (("initContainers", "init container"), ("containers", "container"))
LABEL_MAX, SUBDOMAIN_MAX = 63, 253


@dataclass(frozen=True, slots=True)
class Workload:
    """An object whose pod spec `migrate` may edit."""

    kind: str
    namespace: str | None
    name: str | None
    obj: CommentedMap
    pod_spec: CommentedMap

    @property
    def label(self) -> str:
        return f"{self.kind} {qualified(self.namespace, self.name or '<unnamed>')}"


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


def workload(obj: CommentedMap) -> Workload | None:
    path = POD_SPEC_PATHS.get(group_kind(obj))
    if path is None:
        return None
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, CommentedMap):
        return None
    namespace, name = identity(obj)
    return Workload(str(obj["kind"]), namespace, name, obj, node)


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


def template_name(workload_name: str, container: str) -> str:
    """The ResourceClaimTemplate name for a workload's container: a DNS-1123 subdomain."""
    return _dns_name(f"{workload_name}-{container}-npu", SUBDOMAIN_MAX, allow_dots=True)


def _dns_name(wanted: str, limit: int, allow_dots: bool) -> str:
    invalid = r"[^a-z0-9.-]+" if allow_dots else r"[^a-z0-9-]+"
    name = re.sub(invalid, "-", wanted.lower())
    name = re.sub(r"[-.]*\.[-.]*", ".", name).strip("-.")
    if len(name) <= limit and name == wanted:
        return name
    # Cut names and repaired names both get a digest, so two inputs cannot fold into one name.
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:8]
    return f"{name[: limit - len(digest) - 1].rstrip('-.')}-{digest}".lstrip("-")
