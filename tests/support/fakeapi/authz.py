"""Who calls, and what RBAC lets them do: off by default (everyone may do everything, as before);
`FakeKubeAPI.authorize_as` makes the server check each request that carries the caller's bearer
token (others, such as a test's own scheduler, stay unchecked) as kube-apiserver's RBAC authorizer
does, and, from Kubernetes 1.36 (DRAResourceClaimGranularStatusAuthorization, beta and on), the
per-driver check a change of ResourceClaim `status.devices` needs (`pkg/registry/resource/utils.go`
`AuthorizedForDeviceStatus`): `resourceclaims/driver` named after each driver whose entries change,
verb `associated-node:<verb>` when the caller's service-account token is bound to the node the claim
is allocated on, else (and as a fallback) `arbitrary-node:<verb>`."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from npu_plugin.sim._fakeapi.kinds import JSON, Kind
from npu_plugin.sim._fakeapi.routes import parse_route
from npu_plugin.sim._fakeapi.status import ApiError
from tests.support.fakeapi.faults import denial, forbidden
from tests.support.fakeapi.fielderrors import forbidden as forbidden_cause
from tests.support.fakeapi.fielderrors import invalid

GRANULAR_STATUS_FROM_MINOR = 36


@dataclass(frozen=True)
class Rule:
    """One RBAC policy rule: `resources` as `plural` or `plural/subresource`; empty `names`: all."""

    group: str
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str] = frozenset()

    def allows(self, group: str, resource: str, verb: str, name: str) -> bool:
        return (
            group == self.group
            and resource in self.resources
            and (verb in self.verbs or "*" in self.verbs)
            and (not self.names or name in self.names)
        )


def rules_of(role: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The rules of a ClusterRole object (as the manifests hold it)."""
    return tuple(
        Rule(group, frozenset(r["resources"]), frozenset(r["verbs"]), frozenset(r.get("resourceNames", [])))
        for r in role["rules"]
        for group in r["apiGroups"]
    )


@dataclass(frozen=True)
class Caller:
    """A service account, known by its bearer `token`; `node` is the node its token is bound to
    (the `node-name` extra)."""

    username: str
    rules: tuple[Rule, ...]
    node: str | None = None
    token: str = "npu-plugin-token"

    def may(self, group: str, resource: str, verb: str, name: str = "") -> bool:
        return any(rule.allows(group, resource, verb, name) for rule in self.rules)


def check_request(caller: Caller, verb: str, path: str) -> None:
    """403 unless RBAC lets `caller` make this request."""
    route = parse_route(path)
    if route is None:
        return
    resource = f"{route.kind.plural}/{route.subresource}" if route.subresource else route.kind.plural
    if not caller.may(route.kind.group, resource, verb, route.name or ""):
        raise ApiError(forbidden(verb, path, caller.username) or {})


def _device_key(entry: JSON) -> tuple[str, str, str, str]:
    return (entry.get("driver", ""), entry.get("pool", ""), entry.get("device", ""), entry.get("shareID", ""))


def modified_drivers(new: Iterable[JSON], old: Iterable[JSON]) -> set[str]:
    """Drivers whose `status.devices` entries were added, removed or changed."""
    before = {_device_key(e): e for e in old}
    drivers = set()
    for entry in new:
        if before.pop(_device_key(entry), None) != entry:
            drivers.add(entry.get("driver", ""))
    return drivers | {key[0] for key in before}


def allocated_node(status: JSON) -> str:
    """`nodeNameFromAllocation`: the one node of a single `metadata.name In [node]` term, else ""."""
    terms = ((status.get("allocation") or {}).get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions") or len(terms[0].get("matchFields") or []) != 1:
        return ""
    match = terms[0]["matchFields"][0]
    values = match.get("values") or []
    ok = match.get("key") == "metadata.name" and match.get("operator") == "In" and len(values) == 1
    return str(values[0]) if ok else ""


class Authorizer:
    """The caller to check (`caller`), and who makes the request this thread answers (`acting`)."""

    def __init__(self) -> None:
        self.caller: Caller | None = None
        self._local = threading.local()

    def act_for(self, authorization: str | None) -> Caller | None:
        """Note who makes this thread's request from its Authorization header; the caller to check,
        or None."""
        caller = self.caller
        acting = caller if caller is not None and authorization == f"Bearer {caller.token}" else None
        self._local.acting = acting
        return acting

    def check_device_status(self, kind: Kind, verb: str, new: JSON, old: JSON, minor: int) -> None:
        """422 with a Forbidden cause when a changed driver's entries lack the synthetic
        permission."""
        caller: Caller | None = getattr(self._local, "acting", None)
        if caller is None or minor < GRANULAR_STATUS_FROM_MINOR:
            return
        new_status, old_status = new.get("status") or {}, old.get("status") or {}
        drivers = modified_drivers(new_status.get("devices") or [], old_status.get("devices") or [])
        node = allocated_node(new_status)
        prefixes = ("associated-node:", "arbitrary-node:") if node and caller.node == node else ("arbitrary-node:",)
        verbs = [prefix + verb for prefix in prefixes]
        namespace, name = old["metadata"].get("namespace", ""), old["metadata"]["name"]
        errors = []
        for driver in sorted(drivers):
            if any(caller.may(kind.group, f"{kind.plural}/driver", v, driver) for v in verbs):
                continue
            refusal = denial(
                caller.username, kind, verb=verbs[0], resource=f"{kind.plural}/driver", namespace=namespace, name=driver
            )
            shown = "[" + " ".join(verbs) + "]"
            needed = f'resource="{kind.plural}/driver", verb="{shown}"'
            detail = f"changing status.devices requires {needed} permission: {refusal}"
            errors.append(forbidden_cause("status.devices", detail))
        if errors:
            raise invalid(kind, name, errors)
