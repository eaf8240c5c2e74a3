"""An in-memory `KubeApi` for unit tests: slices with resourceVersions, a watch history, call
counts, faults.

It behaves like the API server where the product relies on it (generateName, resourceVersion
preconditions, 404 on a missing slice, 410 for a watch from before the history) and counts every
call, so tests assert on requests rather than on time.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.protocol import (
    Node,
    ResourceClaim,
    ResourceSlice,
    SliceEvent,
    SliceList,
    StoredSlice,
    WatchEventType,
)


class InMemoryKube:
    """Thread-safe. `calls` counts requests by name (`list_slices`, `watch_slices`, `create_slice`,
    ...)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 1
        self._floor = 1  # watches from before this resourceVersion get 410
        self._slices: dict[str, StoredSlice] = {}
        self._history: list[SliceEvent] = []
        self._nodes: dict[str, Node] = {}
        self._claims: dict[tuple[str, str], ResourceClaim] = {}
        self._faults: dict[str, list[BaseException | SliceEvent]] = {}
        self._watch_epoch = 0
        self._at_once = 0
        self._closed = False
        self.calls: Counter[str] = Counter()
        self.claim_statuses: dict[tuple[str, str], dict[str, Any]] = {}

    # ---- set-up and faults
    def add_node(self, name: str, uid: str = "node-uid") -> None:
        self._nodes[name] = {"metadata": {"name": name, "uid": uid}}

    def add_claim(self, claim: ResourceClaim) -> None:
        meta = claim["metadata"]
        self._claims[(meta.get("namespace", "default"), meta.get("name", ""))] = claim

    def fail_next(self, call: str, *faults: BaseException | SliceEvent) -> None:
        """The next calls named `call` raise these errors, in order; a SliceEvent (for
        `watch_slices`) is that watch's only event, however wrong, before it ends."""
        with self._cond:
            self._faults.setdefault(call, []).extend(faults)

    def end_watches(self) -> None:
        """End every open watch as the server does when its timeout passes."""
        with self._cond:
            self._watch_epoch += 1
            self._cond.notify_all()

    def end_watches_at_once(self, count: int) -> None:
        """The next `count` watches end as soon as they start, delivering nothing."""
        with self._cond:
            self._at_once = count

    def inject_event(self, event: SliceEvent) -> None:
        """Send `event` to every watcher as it is, however wrong (a resourceVersion going backwards,
        say)."""
        with self._cond:
            self._history.append(event)
            self._version += 1
            self._cond.notify_all()

    def slices_version(self) -> int:
        with self._cond:
            return self._version

    def compact(self) -> None:
        """Forget the event history, and the current resourceVersion with it: every watcher resuming
        gets 410."""
        with self._cond:
            self._history.clear()
            self._version += 1
            self._floor = self._version
            self._watch_epoch += 1
            self._cond.notify_all()

    def remove_slice(self, name: str) -> None:
        """Someone else (the kubelet) deletes a slice."""
        with self._cond:
            self._commit("DELETED", self._slices.pop(name))

    def slices(self) -> list[StoredSlice]:
        with self._cond:
            return [copy.deepcopy(self._slices[name]) for name in sorted(self._slices)]

    def wait_for_watchers(self, count: int, timeout: float = 10.0) -> bool:
        """Until `count` watch requests were made (a condition, not a sleep)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.calls["watch_slices"] >= count, timeout)

    # ---- KubeApi
    def _enter(self, call: str) -> SliceEvent | None:
        with self._cond:
            self.calls[call] += 1
            self._cond.notify_all()
            pending = self._faults.get(call)
            fault = pending.pop(0) if pending else None
        if isinstance(fault, BaseException):
            raise fault
        return fault

    def get_node(self, name: str) -> Node:
        self._enter("get_node")
        if name not in self._nodes:
            raise KubeApiError(f"get node {name}", 404, "not found")
        return copy.deepcopy(self._nodes[name])

    def list_slices(self, node: str, driver: str) -> SliceList:
        self._enter("list_slices")
        with self._cond:
            mine = [s for s in self._slices.values() if _selected(s, node, driver)]
            return SliceList(tuple(copy.deepcopy(mine)), str(self._version))

    def watch_slices(self, node: str, driver: str, resource_version: str, timeout_seconds: int) -> Iterator[SliceEvent]:
        if (only := self._enter("watch_slices")) is not None:
            yield only
            return
        cursor = int(resource_version)
        with self._cond:
            if cursor < self._floor:
                raise KubeApiError("watch resourceslices", 410, f"too old resource version: {cursor}")
            if self._at_once > 0:
                self._at_once -= 1
                return
            epoch, seen = self._watch_epoch, self._delivered(cursor)
        while True:
            with self._cond:
                self._cond.wait_for(partial(self._watch_due, epoch, seen), timeout_seconds)
                if self._closed or self._watch_epoch != epoch:
                    return
                events, seen = self._history[seen:], len(self._history)
            for event in events:
                if event.object is None or _selected(event.object, node, driver):
                    yield event

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        self._enter("create_slice")
        if dry_run:  # answered as Kubernetes 1.34 with its alpha gates off: no counters, no taints
            spec = copy.deepcopy(body["spec"])
            spec.pop("sharedCounters", None)
            for device in spec.get("devices") or []:
                device.pop("taints", None)
            return {"metadata": {"name": body["metadata"].get("generateName", "slice-") + "dry"}, "spec": spec}
        with self._cond:
            meta = copy.deepcopy(body["metadata"])
            meta["name"] = meta.pop("generateName", "slice-") + str(self._version)
            stored: StoredSlice = {"metadata": meta, "spec": copy.deepcopy(body["spec"])}
            self._slices[meta["name"]] = stored
            return self._commit("ADDED", stored)

    def replace_slice(self, name: str, body: ResourceSlice) -> StoredSlice:
        self._enter("replace_slice")
        with self._cond:
            current = self._slices.get(name)
            if current is None:
                raise KubeApiError(f"update resourceslice {name}", 404, "not found")
            if body["metadata"].get("resourceVersion") not in (None, current["metadata"]["resourceVersion"]):
                raise KubeApiError(f"update resourceslice {name}", 409, "the object has been modified")
            stored: StoredSlice = {"metadata": copy.deepcopy(body["metadata"]), "spec": copy.deepcopy(body["spec"])}
            self._slices[name] = stored
            return self._commit("MODIFIED", stored)

    def server_version(self) -> tuple[int, int]:
        self._enter("server_version")
        return (1, 34)

    def delete_slice(self, name: str) -> None:
        self._enter("delete_slice")
        with self._cond:
            if name in self._slices:
                self._commit("DELETED", self._slices.pop(name))

    def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        self._enter("get_claim")
        if (namespace, name) not in self._claims:
            raise KubeApiError(f"get resourceclaim {namespace}/{name}", 404, "not found")
        return copy.deepcopy(self._claims[(namespace, name)])

    def apply_claim_status(self, namespace: str, name: str, body: Mapping[str, Any], *, field_manager: str) -> None:
        """Records the last apply configuration per claim in `claim_statuses`."""
        self._enter("apply_claim_status")
        with self._cond:
            self.claim_statuses[(namespace, name)] = copy.deepcopy(dict(body))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _watch_due(self, epoch: int, seen: int) -> bool:
        return self._closed or self._watch_epoch != epoch or len(self._history) > seen

    def _delivered(self, cursor: int) -> int:
        """How many history entries a watcher starting at `cursor` has already seen."""
        return next((i for i, e in enumerate(self._history) if int(e.resource_version) > cursor), len(self._history))

    def _commit(self, event_type: WatchEventType, stored: StoredSlice) -> StoredSlice:
        """Under the lock: a new resourceVersion for `stored`, and its event in the history."""
        self._version += 1
        stored["metadata"]["resourceVersion"] = str(self._version)
        self._history.append(SliceEvent(event_type, str(self._version), copy.deepcopy(stored)))
        self._cond.notify_all()
        return copy.deepcopy(stored)


def _selected(stored: StoredSlice, node: str, driver: str) -> bool:
    return stored["spec"]["nodeName"] == node and stored["spec"]["driver"] == driver
