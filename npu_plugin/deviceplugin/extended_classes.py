"""The DeviceClasses that map (`extendedResourceName`, KEP-5004) a name this node's device plugin
advertises: the scheduler then serves that name here from the device plugin only, never from DRA,
and says nothing. The cluster's classes are watched (one LIST, then a WATCH resumed every 5-10
minutes: no request at rest beyond it), and each such class is told once, when it appears."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from npu_plugin.config import Mode
from npu_plugin.kubeapi.informer import Informer
from npu_plugin.kubeapi.protocol import KubeApi, StoredDeviceClass

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True, slots=True)
class Conflict:
    device_class: str
    resource: str


def conflicts(classes: Iterable[StoredDeviceClass], advertised: Iterable[str]) -> set[Conflict]:
    """Pure: each class whose `extendedResourceName` is one of the advertised names."""
    names = set(advertised)
    return {
        Conflict(c["metadata"]["name"], resource)
        for c in classes
        if (resource := c["spec"].get("extendedResourceName")) in names
    }


def warning(conflict: Conflict, mode: Mode) -> str:
    """The one line that tells an operator about a conflict and what to do, as this mode needs."""
    head = (
        f"DeviceClass {conflict.device_class} maps {conflict.resource}, which this node's device plugin also "
        "advertises: the scheduler serves that name here from the device plugin only"
    )
    if mode is Mode.BOTH:
        return (
            f"{head}, and never from this node's DRA devices (KEP-5004); move the node to --mode dra, or delete "
            "the class if DRA should not serve that name"
        )
    return f"{head}, not from DRA (KEP-5004); move the node to --mode dra for DRA to serve pods asking it"


class ExtendedClassCheck:
    """Runs while `run` runs; `advertised()` (called on the loop) is the set of names the device
    plugin serves now, and `recheck()` must be called when it grows. `on_conflicts` hears every
    conflict present after each change."""

    def __init__(
        self,
        api: KubeApi,
        mode: Mode,
        advertised: Callable[[], set[str]],
        on_conflicts: Callable[[set[Conflict]], None] = lambda _conflicts: None,
    ) -> None:
        self._mode, self._advertised, self._on_conflicts = mode, advertised, on_conflicts
        self._reported: set[Conflict] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.informer: Informer[StoredDeviceClass] = Informer(
            "DeviceClasses", api.list_device_classes, api.watch_device_classes, on_change=self._changed_from_thread
        )

    async def run(self, stop: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        stop_watch = threading.Event()
        # A daemon thread: a blocked watch read must never delay shutdown.
        threading.Thread(target=self.informer.run, args=(stop_watch,), name="deviceclass-watch", daemon=True).start()
        try:
            await stop.wait()
        finally:
            stop_watch.set()

    def _changed_from_thread(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is gone after shutdown
                self._loop.call_soon_threadsafe(self.recheck)

    def recheck(self) -> None:
        """Compare the classes with the advertised names; tell each new conflict once."""
        if not self.informer.synced.is_set():
            return
        found = conflicts(self.informer.snapshot(), self._advertised())
        for conflict in sorted(found - self._reported):
            log.warning(
                warning(conflict, self._mode),
                extra={"device_class": conflict.device_class, "resource": conflict.resource},
            )
        for conflict in sorted(self._reported - found):
            log.info(
                "DeviceClass %s no longer maps %s, which this node's device plugin advertises",
                conflict.device_class,
                conflict.resource,
            )
        if found != self._reported:
            self._reported = found
            self._on_conflicts(found)
