"""Programmable faults and the request log of the fake API server (thread-safe)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from npu_plugin.sim._fakeapi.kinds import Kind
from npu_plugin.sim._fakeapi.routes import parse_route


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake answered it; `body` is the parsed JSON body, if any. `started` is
    when it arrived and `ended` when its answer (a watch: its stream) was over, both
    `time.monotonic()`; `ended` is None while it is still being answered. `end` says why a watch
    ended (see `server.FullHandler`)."""

    method: str
    path: str
    query: Mapping[str, str]
    status: int
    body: Any = None
    authorization: str | None = None  # the Authorization header as sent
    client: str | None = None  # the common name of the client certificate, over TLS
    started: float = 0.0
    ended: float | None = None
    end: str = ""

    @property
    def node(self) -> str | None:
        """The node its field selector names (`spec.nodeName=node-007,spec.driver=...`), if any."""
        for term in self.query.get("fieldSelector", "").split(","):
            field, _, value = term.partition("=")
            if field == "spec.nodeName":
                return value
        return None

    @property
    def verb(self) -> str:
        """The API server's name for the request (as in its audit log): list and watch are GETs of a
        collection."""
        return verb_of(self.method, self.path, self.query)


def verb_of(method: str, path: str, query: Mapping[str, str]) -> str:
    """The verb the API server authorizes a request as (and names in its audit log)."""
    route = parse_route(path)
    collection = route is not None and route.name is None
    if method == "GET":
        if collection and query.get("watch", "").lower() in ("true", "1"):
            return "watch"
        return "list" if collection else "get"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def denial(user: str, kind: Kind, *, verb: str, resource: str, namespace: str, name: str) -> str:
    """The RBAC authorizer's refusal as a Forbidden Status words it; `resource` may name a
    subresource (`resourceclaims/status`) or a synthetic one (`resourceclaims/driver`)."""
    what = f'{kind.qualified_resource} "{name}"' if name else kind.qualified_resource
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{kind.group}" {scope}'


def forbidden(verb: str, path: str, user: str) -> dict[str, Any] | None:
    """The 403 `Status` RBAC answers when `user` may not `verb` what `path` addresses, worded as
    the API server words it; None for a path that is no resource."""
    route = parse_route(path)
    if route is None:
        return None
    kind = route.kind
    resource = f"{kind.plural}/{route.subresource}" if route.subresource else kind.plural
    message = denial(user, kind, verb=verb, resource=resource, namespace=route.namespace or "", name=route.name or "")
    details: dict[str, Any] = {"kind": kind.plural} | ({"group": kind.group} if kind.group else {})
    if route.name:
        details["name"] = route.name
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


@dataclass
class _FailRule:
    remaining: int
    status: int
    path_contains: str


@dataclass(frozen=True)
class RawAnswer:
    """An answer sent as it is: any status, headers and body (which need not be JSON)."""

    status: int
    body: bytes
    headers: Mapping[str, str]


@dataclass
class _AnswerRule:
    remaining: int
    path_contains: str
    answer: RawAnswer


def request_line(method: str, path: str, watch: bool) -> str:
    """What `path_contains` of a fault is matched against: "METHOD path", "WATCH path" for a watch
    (so "GET /apis/resource.k8s.io/v1/resourceslices" selects a LIST and "WATCH " any watch)."""
    return f"{'WATCH' if watch else method} {path}"


# What a broken watch stream does after its headers: a line that is not JSON, an ERROR event (410
# Expired), a connection cut in the middle of an event, an event whose resourceVersion is older than
# the last one.
WATCH_FAULTS = ("garbage", "error-event", "reset-mid-event", "version-backwards")


class Faults:
    """Failures to inject: per-request failures, latency, unavailability, forced update
    conflicts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_FailRule] = []
        self._latency = 0.0
        self._unavailable = False
        self._conflicts = 0
        self._answers: list[_AnswerRule] = []
        self._watch_limit: float | None = None
        self._watch_faults: list[str] = []
        self._holds: dict[str, float] = {}
        self._forbidden: set[tuple[str, str]] = set()

    def fail_next(self, n: int, status: int, path_contains: str) -> None:
        with self._lock:
            self._rules.append(_FailRule(n, status, path_contains))

    def take_failure(self, path: str) -> int | None:
        """The status to fail this request with, consuming one from the first matching rule."""
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.path_contains in path:
                    rule.remaining -= 1
                    return rule.status
            self._rules = [rule for rule in self._rules if rule.remaining > 0]
            return None

    def forbid(self, verb: str, resource: str) -> None:
        with self._lock:
            self._forbidden.add((verb, resource))

    def is_forbidden(self, verb: str, resource: str) -> bool:
        with self._lock:
            return (verb, resource) in self._forbidden

    def answer_next(self, n: int, path_contains: str, answer: RawAnswer) -> None:
        with self._lock:
            self._answers.append(_AnswerRule(n, path_contains, answer))

    def take_answer(self, request: str) -> RawAnswer | None:
        """The raw answer for this request ("METHOD path", see `request_line`), consuming one from
        the first matching rule."""
        with self._lock:
            for rule in self._answers:
                if rule.remaining > 0 and rule.path_contains in request:
                    rule.remaining -= 1
                    return rule.answer
            self._answers = [rule for rule in self._answers if rule.remaining > 0]
            return None

    def hold(self, path_contains: str, seconds: float) -> None:
        with self._lock:
            self._holds[path_contains] = max(0.0, seconds)

    def held_for(self, request: str) -> float:
        """How long to hold this request ("METHOD path", see `request_line`) before answering it."""
        with self._lock:
            return max((s for part, s in self._holds.items() if part in request), default=0.0)

    def break_next_watch(self, fault: str) -> None:
        if fault not in WATCH_FAULTS:
            raise ValueError(f"unknown watch fault {fault!r}; expected one of {WATCH_FAULTS}")
        with self._lock:
            self._watch_faults.append(fault)

    def take_watch_fault(self) -> str | None:
        with self._lock:
            return self._watch_faults.pop(0) if self._watch_faults else None

    def force_conflicts(self, n: int) -> None:
        with self._lock:
            self._conflicts = n

    def take_conflict(self) -> bool:
        with self._lock:
            if self._conflicts <= 0:
                return False
            self._conflicts -= 1
            return True

    @property
    def latency(self) -> float:
        with self._lock:
            return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        with self._lock:
            self._latency = max(0.0, seconds)

    @property
    def watch_limit(self) -> float | None:
        with self._lock:
            return self._watch_limit

    @watch_limit.setter
    def watch_limit(self, seconds: float | None) -> None:
        with self._lock:
            self._watch_limit = seconds

    @property
    def unavailable(self) -> bool:
        with self._lock:
            return self._unavailable

    @unavailable.setter
    def unavailable(self, value: bool) -> None:
        with self._lock:
            self._unavailable = value


class RequestLog:
    """Append-only list of answered requests; `snapshot` copies it under the lock. `append` returns
    a ticket with which `finish` notes when (and why) that request's answer was over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[RecordedRequest] = []
        self._first = 0  # the ticket of _items[0]

    def append(self, request: RecordedRequest) -> int:
        with self._lock:
            self._items.append(request)
            return self._first + len(self._items) - 1

    def finish(self, ticket: int, ended: float, end: str) -> None:
        """Note the end of the request `ticket`; nothing when the log was cleared since."""
        with self._lock:
            index = ticket - self._first
            if 0 <= index < len(self._items):
                self._items[index] = replace(self._items[index], ended=ended, end=end)

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._first += len(self._items)
            self._items.clear()


def most_at_once(requests: Iterable[RecordedRequest]) -> int:
    """The most of `requests` being answered at one moment, from their arrival and end times (one
    still being answered counts until now). One ending as another arrives does not overlap it."""
    moments: list[tuple[float, int]] = []
    for request in requests:
        moments.append((request.started, 1))
        if request.ended is not None:
            moments.append((request.ended, -1))
    most = current = 0
    for _, step in sorted(moments):  # at one moment an end (-1) sorts before an arrival
        current += step
        most = max(most, current)
    return most
