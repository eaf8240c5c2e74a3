"""Field and label selectors as list and watch requests use them (pure functions)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from npu_plugin.sim._fakeapi.kinds import (
    DAEMON_SETS,
    DEVICE_CLASSES,
    JSON,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_QUOTAS,
    RESOURCE_SLICES,
    Kind,
)
from npu_plugin.sim._fakeapi.status import bad_request

_Getter = Callable[[JSON], str]


def _name(obj: JSON) -> str:
    return str(obj["metadata"].get("name", ""))


def _namespace(obj: JSON) -> str:
    return str(obj["metadata"].get("namespace", ""))


def _spec(*keys: str) -> _Getter:
    def get(obj: JSON) -> str:
        value: object = obj.get("spec", {})
        for key in keys:
            value = value.get(key, "") if isinstance(value, dict) else ""
        return str(value).lower() if isinstance(value, bool) else str(value)

    return get


# The selectable fields of each kind (`toSelectableFields` in the registries).
_FIELDS: dict[Kind, dict[str, _Getter]] = {
    NODES: {"metadata.name": _name, "spec.unschedulable": _spec("unschedulable")},
    RESOURCE_SLICES: {
        "metadata.name": _name,
        "spec.nodeName": _spec("nodeName"),
        "spec.driver": _spec("driver"),
        "spec.pool.name": _spec("pool", "name"),
    },
    RESOURCE_CLAIMS: {"metadata.name": _name, "metadata.namespace": _namespace},
    PODS: {
        "metadata.name": _name,
        "metadata.namespace": _namespace,
        "spec.nodeName": _spec("nodeName"),
        "spec.schedulerName": _spec("schedulerName"),
        "status.phase": lambda obj: str((obj.get("status") or {}).get("phase", "")),
    },
    **{
        kind: {"metadata.name": _name, "metadata.namespace": _namespace}
        for kind in (RESOURCE_QUOTAS, DAEMON_SETS, POD_DISRUPTION_BUDGETS, RESOURCE_CLAIM_TEMPLATES)
    },
    DEVICE_CLASSES: {"metadata.name": _name},
}


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...]

    def matches(self, actual: str | None) -> bool:
        if self.op == "exists":
            return actual is not None
        if self.op == "!exists":
            return actual is None
        hit = actual in self.values
        return hit if self.op in ("=", "in") else not hit


@dataclass(frozen=True)
class Selector:
    """A parsed `fieldSelector` plus `labelSelector`; `matches` tells whether an object is
    selected."""

    kind: Kind
    fields: tuple[_Requirement, ...] = ()
    labels: tuple[_Requirement, ...] = ()

    def matches(self, obj: JSON) -> bool:
        getters = _FIELDS[self.kind]
        if not all(r.matches(getters[r.key](obj)) for r in self.fields):
            return False
        labels = obj["metadata"].get("labels", {})
        return all(r.matches(labels.get(r.key)) for r in self.labels)


def parse(kind: Kind, field_selector: str, label_selector: str) -> Selector:
    """Parse both selectors; raise a 400 `ApiError` the way the API server words it."""
    return Selector(kind, _parse_fields(kind, field_selector), _parse_labels(label_selector))


_FIELD_TERM = re.compile(r"\s*([^=!\s]+)\s*(==|=|!=)\s*([^,]*?)\s*\Z")


def _parse_fields(kind: Kind, text: str) -> tuple[_Requirement, ...]:
    requirements = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        match = _FIELD_TERM.match(term)
        if not match:
            raise bad_request(f'invalid field selector: "{term}": invalid selector')
        key, op, value = match.groups()
        if key not in _FIELDS[kind]:
            raise bad_request(f"field label not supported: {key}")
        requirements.append(_Requirement(key, "!=" if op == "!=" else "=", (value,)))
    return tuple(requirements)


_LABEL_SET_TERM = re.compile(r"\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*\Z")
_LABEL_EQ_TERM = re.compile(r"\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s,()]*)\s*\Z")
_LABEL_EXISTS_TERM = re.compile(r"\s*(!?)\s*([^\s!=(),]+)\s*\Z")


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def _parse_labels(text: str) -> tuple[_Requirement, ...]:
    requirements = []
    for term in _split_terms(text):
        if match := _LABEL_SET_TERM.match(term):
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            requirements.append(_Requirement(match.group(1), match.group(2), values))
        elif match := _LABEL_EQ_TERM.match(term):
            op = "!=" if match.group(2) == "!=" else "="
            requirements.append(_Requirement(match.group(1), op, (match.group(3),)))
        elif match := _LABEL_EXISTS_TERM.match(term):
            requirements.append(_Requirement(match.group(2), "!exists" if match.group(1) else "exists", ()))
        else:
            raise bad_request(f"unable to parse requirement: {term!r}")
    return tuple(requirements)
