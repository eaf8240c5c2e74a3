"""The resource kinds the fake API server serves, and how their names are spelled on the wire."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """One served resource: its URL plural, its kind, group/version and scope."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    status_subresource: bool
    tracks_generation: bool
    returns_deleted_object: bool = True  # a DELETE answers with the object rather than a Status

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_resource(self) -> str:
        """`resourceslices.resource.k8s.io`, or just `nodes` for the core group, as in Status
        messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODES = Kind(
    "nodes",
    "Node",
    "",
    "v1",
    namespaced=False,
    status_subresource=True,
    tracks_generation=False,
    returns_deleted_object=False,
)
RESOURCE_SLICES = Kind(
    "resourceslices",
    "ResourceSlice",
    "resource.k8s.io",
    "v1",
    namespaced=False,
    status_subresource=False,
    tracks_generation=True,
)
RESOURCE_CLAIMS = Kind(
    "resourceclaims",
    "ResourceClaim",
    "resource.k8s.io",
    "v1",
    namespaced=True,
    status_subresource=True,
    tracks_generation=True,
)
# Read by `npu-plugin plan` (and writable like any kind, with no validation of their own).
PODS = Kind("pods", "Pod", "", "v1", namespaced=True, status_subresource=True, tracks_generation=False)
RESOURCE_QUOTAS = Kind(
    "resourcequotas", "ResourceQuota", "", "v1", namespaced=True, status_subresource=True, tracks_generation=False
)
DAEMON_SETS = Kind(
    "daemonsets", "DaemonSet", "apps", "v1", namespaced=True, status_subresource=True, tracks_generation=True
)
POD_DISRUPTION_BUDGETS = Kind(
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    "policy",
    "v1",
    namespaced=True,
    status_subresource=True,
    tracks_generation=True,
)
DEVICE_CLASSES = Kind(
    "deviceclasses",
    "DeviceClass",
    "resource.k8s.io",
    "v1",
    namespaced=False,
    status_subresource=False,
    tracks_generation=True,
)
RESOURCE_CLAIM_TEMPLATES = Kind(
    "resourceclaimtemplates",
    "ResourceClaimTemplate",
    "resource.k8s.io",
    "v1",
    namespaced=True,
    status_subresource=False,
    tracks_generation=False,
)
ALL_KINDS = (
    NODES,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    PODS,
    RESOURCE_QUOTAS,
    DAEMON_SETS,
    POD_DISRUPTION_BUDGETS,
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
)


def group_list(minor: int) -> JSON:
    """`GET /apis` (an `APIGroupList`): the groups of the served kinds, with resource.k8s.io's
    versions as Kubernetes 1.<minor> serves them by default (v1 from 1.34, v1beta1 and v1beta2 only
    with --runtime-config, so not listed)."""
    groups: dict[str, list[str]] = {}
    for kind in ALL_KINDS:
        if kind.group and kind.version not in groups.setdefault(kind.group, []):
            groups[kind.group].append(kind.version)
    if minor < 34:
        groups.pop("resource.k8s.io", None)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": name,
                "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
            }
            for name, versions in groups.items()
        ],
    }


def resolve_kind(name: str) -> Kind:
    """Accept `ResourceSlice`, `resourceslices` or `resourceslice` (any case); raise ValueError
    otherwise."""
    wanted = name.lower()
    for kind in ALL_KINDS:
        if wanted in (kind.plural, kind.kind.lower()):
            return kind
    raise ValueError(f"unknown kind {name!r}; expected one of {[k.kind for k in ALL_KINDS]}")


def find_kind(group: str, version: str, plural: str) -> Kind | None:
    for kind in ALL_KINDS:
        if (kind.group, kind.version, kind.plural) == (group, version, plural):
            return kind
    return None


def meta(obj: JSON) -> JSON:
    """The object's metadata dict, created empty if absent."""
    value = obj.setdefault("metadata", {})
    assert isinstance(value, dict)
    return value
