"""Programmable faults and the request log of the fake API server (thread-safe)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake answered it; `body` is the parsed JSON body, if any."""

    method: str
    path: str
    query: Mapping[str, str]
    status: int
    body: Any = None


@dataclass
class _FailRule:
    remaining: int
    status: int
    path_contains: str


class Faults:
    """Failures to inject: per-request failures, latency, unavailability, forced update conflicts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_FailRule] = []
        self._latency = 0.0
        self._unavailable = False
        self._conflicts = 0

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
