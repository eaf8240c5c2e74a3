"""Programmable faults and the request log of the fake API server (thread-safe)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from npu_plugin.sim._kubeapi.routes import parse_route


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake answered it; `body` is the parsed JSON body, if any."""

    method: str
    path: str
    query: Mapping[str, str]
    status: int
    body: Any = None
    authorization: str | None = None  # the Authorization header as sent
    client: str | None = None  # the common name of the client certificate, over TLS

    @property
    def verb(self) -> str:
        """The API server's name for the request (as in its audit log): list and watch are GETs of a collection."""
        route = parse_route(self.path)
        collection = route is not None and route.name is None
        if self.method == "GET":
            if collection and self.query.get("watch", "").lower() in ("true", "1"):
                return "watch"
            return "list" if collection else "get"
        if self.method == "DELETE":
            return "deletecollection" if collection else "delete"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(self.method, self.method.lower())


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


# What a broken watch stream does after its headers: a line that is not JSON, an ERROR event (410 Expired),
# a connection cut in the middle of an event, an event whose resourceVersion is older than the last one.
WATCH_FAULTS = ("garbage", "error-event", "reset-mid-event", "version-backwards")


class Faults:
    """Failures to inject: per-request failures, latency, unavailability, forced update conflicts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_FailRule] = []
        self._latency = 0.0
        self._unavailable = False
        self._conflicts = 0
        self._answers: list[_AnswerRule] = []
        self._watch_limit: float | None = None
        self._watch_faults: list[str] = []

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

    def answer_next(self, n: int, path_contains: str, answer: RawAnswer) -> None:
        with self._lock:
            self._answers.append(_AnswerRule(n, path_contains, answer))

    def take_answer(self, method: str, path: str, watch: bool) -> RawAnswer | None:
        """The raw answer for this request, consuming one from the first matching rule. A rule matches
        `path_contains` against "METHOD path" (and "WATCH path" for a watch), so "GET /nodes/" works."""
        request = f"{'WATCH' if watch else method} {path}"
        with self._lock:
            for rule in self._answers:
                if rule.remaining > 0 and rule.path_contains in request:
                    rule.remaining -= 1
                    return rule.answer
            self._answers = [rule for rule in self._answers if rule.remaining > 0]
            return None

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
    """Append-only list of answered requests; `snapshot` copies it under the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[RecordedRequest] = []

    def append(self, request: RecordedRequest) -> None:
        with self._lock:
            self._items.append(request)

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
