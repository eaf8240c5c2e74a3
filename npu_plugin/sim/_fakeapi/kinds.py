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
ALL_KINDS = (NODES, RESOURCE_SLICES, RESOURCE_CLAIMS)


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
