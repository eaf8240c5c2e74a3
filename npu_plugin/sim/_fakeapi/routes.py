"""URL paths of the served resources, parsed into what they address (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass

from npu_plugin.sim._fakeapi.kinds import Kind, find_kind


@dataclass(frozen=True)
class Route:
    """`namespace` is None for cluster-scoped kinds and for all-namespaces collections."""

    kind: Kind
    namespace: str | None
    name: str | None
    subresource: str

    @property
    def key(self) -> tuple[str, str]:
        assert self.name is not None
        return self.namespace or "", self.name


def parse_route(path: str) -> Route | None:
    """`/api/v1/nodes/n1`, `/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status`, ..."""
    parts = [part for part in path.split("/") if part]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    kind = find_kind(group, version, rest[0])
    if kind is None or (namespace is not None and not kind.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if name is not None and kind.namespaced and namespace is None:
        return None
    if subresource and (subresource != "status" or not kind.status_subresource):
        return None
    return Route(kind, namespace, name, subresource)
