"""The fake API server's storage: objects, one resourceVersion counter, and a bounded event
history."""

from __future__ import annotations

import bisect
import copy
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from npu_plugin.sim._fakeapi.kinds import JSON, Kind
from npu_plugin.sim._fakeapi.status import already_exists, expired, not_found

ObjectKey = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped kinds


@dataclass(frozen=True)
class Event:
    """One committed change. `obj` is the object after it (for DELETED: as deleted); `old` before
    it."""

    rv: int
    type: str
    kind: Kind
    obj: JSON
    old: JSON | None


def now() -> str:
    """A creation/deletion timestamp as the API server writes it (RFC 3339, seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: JSON) -> ObjectKey:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _same_ignoring_rv(a: JSON, b: JSON) -> bool:
    a_meta = {k: v for k, v in a["metadata"].items() if k != "resourceVersion"}
    b_meta = {k: v for k, v in b["metadata"].items() if k != "resourceVersion"}
    return a_meta == b_meta and {**a, "metadata": {}} == {**b, "metadata": {}}


class Store:
    """Thread-safe object storage; every read hands out deep copies, so callers may mutate them
    freely."""

    def __init__(self, history_limit: int) -> None:
        self._cond = threading.Condition()
        self._objects: dict[Kind, dict[ObjectKey, JSON]] = {}
        self._rv = 1
        self._history: deque[Event] = deque()
        self._history_limit = history_limit
        self._floor = 1  # every event with rv > floor is still in the history
        self._sorted: dict[Kind, list[ObjectKey]] = {}  # each kind's keys in order, for chunked lists

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def find(self, kind: Kind, key: ObjectKey) -> JSON | None:
        with self._cond:
            found = self._objects.get(kind, {}).get(key)
            return copy.deepcopy(found) if found is not None else None

    def get(self, kind: Kind, key: ObjectKey) -> JSON:
        found = self.find(kind, key)
        if found is None:
            raise not_found(kind, key[1])
        return found

    def list_objects(self, kind: Kind, namespace: str | None) -> tuple[list[JSON], int]:
        """Objects of `kind` (in `namespace`, or all when None) sorted by key, and the store's
        resourceVersion."""
        with self._cond:
            items = [
                copy.deepcopy(obj)
                for key, obj in sorted(self._objects.get(kind, {}).items())
                if namespace is None or key[0] == namespace
            ]
            return items, self._rv

    def page(
        self, kind: Kind, namespace: str | None, matches: Callable[[JSON], bool], after: ObjectKey | None, limit: int
    ) -> tuple[list[JSON], int, ObjectKey | None, int]:
        """One page of a chunked LIST, as the API server's storage reads it: up to `limit` objects
        (0: all) with keys after `after` that `matches` selects, in key order. Returns them, the
        store's resourceVersion, the key of the last one when more may follow (else None), and how
        many objects of the collection follow it (before any selector).

        The objects are the stored ones, not copies (a 40,000-pod list is served in chunks without
        copying each): callers only serialize them. A committed object is never changed in place,
        since every write stores a new one."""
        with self._cond:
            objects = self._objects.get(kind, {})
            keys = self._sorted.get(kind)
            if keys is None:
                keys = self._sorted[kind] = sorted(objects)
            index = bisect.bisect_right(keys, after) if after is not None else 0
            found: list[JSON] = []
            last: ObjectKey | None = None
            while index < len(keys) and not (limit and len(found) >= limit):
                key = keys[index]
                index += 1
                if (namespace is None or key[0] == namespace) and matches(objects[key]):
                    found.append(objects[key])
                    last = key
            rest = keys[index:] if namespace is None else [k for k in keys[index:] if k[0] == namespace]
            return found, self._rv, (last if rest else None), len(rest)

    def create(self, kind: Kind, obj: JSON) -> JSON:
        with self._cond:
            objects = self._objects.setdefault(kind, {})
            if key_of(obj) in objects:
                raise already_exists(kind, key_of(obj)[1])
            return self._commit(kind, "ADDED", copy.deepcopy(obj), None)

    def update(self, kind: Kind, key: ObjectKey, change: Callable[[JSON], JSON]) -> tuple[JSON, bool]:
        """Atomically replace the object with `change(copy of it)`; return (result, whether it is
        now gone).

        Like the API server, a change that alters nothing commits nothing, and an object left with a
        deletionTimestamp and no finalizers is deleted.
        """
        with self._cond:
            current = self._objects.get(kind, {}).get(key)
            if current is None:
                raise not_found(kind, key[1])
            new = change(copy.deepcopy(current))
            meta = new["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                return self._commit(kind, "DELETED", new, current), True
            if _same_ignoring_rv(new, current):
                return copy.deepcopy(current), False
            return self._commit(kind, "MODIFIED", new, current), False

    def delete(self, kind: Kind, key: ObjectKey, precondition: Callable[[JSON], None]) -> tuple[JSON, bool]:
        """Delete after `precondition(copy)` passes; with finalizers, only set deletionTimestamp.

        Return the object and whether it is gone.
        """
        with self._cond:
            current = self._objects.get(kind, {}).get(key)
            if current is None:
                raise not_found(kind, key[1])
            precondition(copy.deepcopy(current))
            if not current["metadata"].get("finalizers"):
                return self._commit(kind, "DELETED", copy.deepcopy(current), current), True
            if current["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(current), False
            marked = copy.deepcopy(current)
            marked["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=0)
            return self._commit(kind, "MODIFIED", marked, current), False

    def _commit(self, kind: Kind, event_type: str, obj: JSON, old: JSON | None) -> JSON:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        objects = self._objects.setdefault(kind, {})
        if event_type == "DELETED":
            del objects[key_of(obj)]
            self._sorted.pop(kind, None)
        else:
            if key_of(obj) not in objects:
                self._sorted.pop(kind, None)
            objects[key_of(obj)] = obj
        self._history.append(Event(self._rv, event_type, kind, copy.deepcopy(obj), old))
        while len(self._history) > self._history_limit:
            self._floor = self._history.popleft().rv
        self._cond.notify_all()
        return copy.deepcopy(obj)

    def events_after(self, rv: int) -> list[Event]:
        """Events newer than `rv`, or 410 Expired when some of them were already dropped from the
        history."""
        with self._cond:
            if rv < self._floor:
                raise expired(f"too old resource version: {rv} ({self._floor + 1})")
            return [event for event in self._history if event.rv > rv]

    @property
    def oldest_listable(self) -> int:
        """The oldest resourceVersion a continued list may still be consistent from: older ones are
        compacted (410 Expired)."""
        with self._cond:
            return self._floor

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watches then get 410 Gone."""
        with self._cond:
            self._history.clear()
            self._floor = self._rv

    def wait(self, rv: int, timeout: float, cancelled: Callable[[], bool]) -> None:
        """Block until something newer than `rv` is committed, `cancelled()` holds (see `wake`) or
        timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self._rv > rv or cancelled(), timeout)

    def wake(self) -> None:
        """Wake every `wait`er so it re-checks its cancellation."""
        with self._cond:
            self._cond.notify_all()
