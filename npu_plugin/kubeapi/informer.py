"""A local cache of API objects, kept by LIST once and WATCH from then on, as client-go does: this
node's ResourceSlices for the DRA publisher, the cluster's DeviceClasses for the device plugin's
extended-resource check.

At rest this costs one watch request every 5 to 10 minutes: the watch resumes from the last
resourceVersion seen (bookmarks keep it fresh), and a new LIST happens only when the server says
that resourceVersion is gone (410) or the stream cannot be trusted (garbage, an ERROR event, a
resourceVersion going backwards). Transport failures (refused, reset, 503) resume the watch from
where it was. Every failure is logged once and backs off with jitter; a watch that ends at once
without delivering anything counts as a failure, so a server that closes every watch cannot make
this a tight loop.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from npu_plugin.aio.backoff import Backoff, BackoffPolicy
from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.protocol import KubeApi, ObjectList, StoredObject, StoredSlice, WatchEvent

log = logging.getLogger(__name__)
WATCH_SECONDS = (300, 600)
# A watch that ends sooner than this having delivered nothing is treated as a failure (client-go
# does too).
SHORT_WATCH_SECONDS = 1.0
# A watch the server ends this long before its timeoutSeconds was cut short (a restart, a proxy),
# not timed out.
EARLY_END_SECONDS = 10.0
WATCH_BACKOFF = BackoffPolicy(initial=0.5, maximum=30.0)
_GONE = 410


class _UntrustedStreamError(Exception):
    """The stream said something that makes the cache doubtful: relist."""


class _ShortWatchError(Exception):
    """The watch ended at once without an event: back off, then resume it."""


T = TypeVar("T", bound=StoredObject)


class Informer(Generic[T]):
    """Runs `run` in a thread; `snapshot` and `record` may be called from any thread.

    `on_change` is called (from the informer's thread) after the cache was filled by a LIST or
    changed by an event; an event that only repeats what the cache holds (our own write coming back)
    is not a change.
    """

    def __init__(
        self,
        what: str,
        list_objects: Callable[[], ObjectList[T]],
        watch_objects: Callable[[str, int], Iterator[WatchEvent[T]]],
        *,
        on_change: Callable[[], None],
        policy: BackoffPolicy = WATCH_BACKOFF,
        watch_seconds: tuple[int, int] = WATCH_SECONDS,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`what` names the objects in log lines ("ResourceSlices"); `list_objects()` and
        `watch_objects(resource_version, timeout_seconds)` are the two calls. `draw` gives the jitter
        of each pause after a failure (uniform in [0, 1)); `clock` tells how long a watch lasted."""
        self._what, self._list_objects, self._watch_objects = what, list_objects, watch_objects
        self._on_change = on_change
        self._backoff = Backoff(policy, draw)
        self._watch_seconds = watch_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._objects: dict[str, T] = {}
        self._version = ""
        self.synced = threading.Event()
        # LISTs and WATCHes that failed, and watches the server ended before their time: an API
        # server restart (which an upgrade needs) does one or the other, so what only a restart
        # changes (the server's version) is read again.
        self.interruptions = 0

    @property
    def failures(self) -> int:
        """Consecutive failures of LIST/WATCH, each followed by a growing pause."""
        return self._backoff.failures

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen by the LIST, an event or a bookmark."""
        with self._lock:
            return self._version

    def snapshot(self) -> list[T]:
        """The cached objects, ordered by name."""
        with self._lock:
            return [self._objects[name] for name in sorted(self._objects)]

    def record(self, stored: T | None, name: str) -> None:
        """Note our own write (the stored object; None after a delete), so its echo changes
        nothing. A write the stream has already gone past is left out: the cache holds what
        became of it (a later version, or nothing when a delete crossed our create)."""
        with self._lock:
            if stored is None:
                self._objects.pop(name, None)
            elif _newer(stored, self._objects.get(name)) and not self._passed(stored):
                self._objects[name] = stored

    def _passed(self, stored: T) -> bool:
        version = stored["metadata"]["resourceVersion"]
        return version.isdigit() and self._version.isdigit() and int(version) <= int(self._version)

    def run(self, stop: threading.Event) -> None:
        """LIST, then WATCH until `stop` is set; never raises. Each pause after a failure is a wait
        on `stop`, so setting it ends a pause at once."""
        relist = True
        while not stop.is_set():
            try:
                if relist:
                    self._list()
                    relist = False
                self._watch(stop)
                continue
            except KubeApiError as error:
                relist = relist or error.status in (_GONE, 200)  # 200: the body was not what we asked for
                pause = self._backoff.failed(error.retry_after)
                what = "relisting" if relist else "resuming the watch"
                log.warning("watching %s failed, %s in %.1fs: %s", self._what, what, pause, error)
            except _UntrustedStreamError as error:
                relist = True
                pause = self._backoff.failed()
                log.warning("the %s watch %s; relisting in %.1fs", self._what, error, pause)
            except _ShortWatchError:
                pause = self._backoff.failed()
                log.info("the %s watch ended at once without an event; resuming it in %.1fs", self._what, pause)
            except Exception:  # the thread must survive anything, or slices would silently go stale
                relist = True
                pause = self._backoff.failed()
                log.exception("the %s watch failed unexpectedly; relisting in %.1fs", self._what, pause)
            self.interruptions += 1
            stop.wait(pause)

    def _list(self) -> None:
        listing = self._list_objects()
        with self._lock:
            self._objects = {o["metadata"]["name"]: o for o in listing.items}
            self._version = listing.resource_version
        self.synced.set()
        self._on_change()

    def _watch(self, stop: threading.Event) -> None:
        started, delivered = self._clock(), False
        timeout = random.randint(*self._watch_seconds)
        for event in self._watch_objects(self._version, timeout):
            if stop.is_set():
                return
            delivered = True
            if self._apply(event):
                self._on_change()
        lasted = self._clock() - started
        if not delivered and lasted < SHORT_WATCH_SECONDS:
            raise _ShortWatchError
        if lasted < timeout - EARLY_END_SECONDS:
            self.interruptions += 1
        self._backoff.succeeded()

    def _apply(self, event: WatchEvent[T]) -> bool:
        """Take in one event; True when the cache changed."""
        with self._lock:
            if _version_number(event.resource_version) < _version_number(self._version):
                raise _UntrustedStreamError(
                    f"went back from resourceVersion {self._version} to {event.resource_version}"
                )
            self._version = event.resource_version
            if event.object is None:
                return False
            name = event.object["metadata"]["name"]
            cached = self._objects.get(name)
            if event.type == "DELETED":
                return self._objects.pop(name, None) is not None
            if cached is not None and not _newer(event.object, cached):
                return False
            self._objects[name] = event.object
            return True


def slice_informer(api: KubeApi, *, node: str, driver: str, on_change: Callable[[], None]) -> Informer[StoredSlice]:
    """This node's ResourceSlices of `driver`."""
    return Informer(
        "ResourceSlices",
        lambda: api.list_slices(node, driver),
        lambda version, timeout: api.watch_slices(node, driver, version, timeout),
        on_change=on_change,
    )


def _version_number(version: str) -> int:
    """resourceVersions are opaque, but every API server (etcd) issues increasing integers; others
    compare 0."""
    return int(version) if version.isdigit() else 0


def _newer(stored: StoredObject, cached: StoredObject | None) -> bool:
    if cached is None:
        return True
    return _version_number(stored["metadata"]["resourceVersion"]) > _version_number(
        cached["metadata"]["resourceVersion"]
    )
