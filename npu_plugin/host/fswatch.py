"""Directory watches whose events run on the event loop, and files re-read on change one read at a
time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from npu_plugin.errors import NpuPluginError

log = logging.getLogger(__name__)
T = TypeVar("T")
# What a watcher hears: the path and "created", "deleted", "modified" or "closed" (after a write).
FileEvent = Callable[[str, str], None]
_KINDS = ("created", "deleted", "modified", "closed")
# The kernel is asked for these only: a watched directory listed, or a file in it opened and read (a
# workload opening /dev/davinci3, a tool scanning the registrar directory), then wakes no thread of
# ours.
_RELAYED: tuple[type[FileSystemEvent], ...] = (
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileModifiedEvent,
    DirModifiedEvent,
    FileClosedEvent,
)


class Relay(FileSystemEventHandler):
    """Hands watchdog events (on its thread) to `callback(path, kind)` on the event loop; a move is
    the deletion of its source and the creation of its destination."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: FileEvent) -> None:
        self._loop, self._callback = loop, callback

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type == "moved":
            self._relay(event.src_path, "deleted")
            self._relay(event.dest_path, "created")
        elif event.event_type in _KINDS:
            self._relay(event.src_path, event.event_type)

    def _relay(self, path: str | bytes, kind: str) -> None:
        # An event can arrive after the loop closed (a watched temporary directory removed at shutdown, before the
        # observer joined): nobody is left to tell, and raising would print a thread traceback.
        with contextlib.suppress(RuntimeError):  # "Event loop is closed"
            self._loop.call_soon_threadsafe(self._callback, path.decode() if isinstance(path, bytes) else path, kind)


class Reread(Generic[T]):
    """Re-reads one file after it changes: at most one read in flight; events during a read make one
    more read after it, so a burst of writes costs one or two reads and the latest content wins."""

    def __init__(self, read: Callable[[], T], deliver: Callable[[T], None]) -> None:
        self._read, self._deliver = read, deliver
        self._task: asyncio.Task[None] | None = None
        self._again = False

    @property
    def busy(self) -> bool:
        """A read is in flight or about to start."""
        return self._task is not None

    def changed(self) -> None:
        if self._task is not None:
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="file-reread")

    async def _run(self) -> None:
        try:
            self._again = True
            while self._again:
                self._again = False
                try:
                    result = await asyncio.to_thread(self._read)
                except NpuPluginError as error:
                    log.warning("re-reading a changed file failed: %s", error, extra={"error": str(error)})
                    continue
                if not self._again:  # a newer read follows; its result replaces this one
                    self._deliver(result)
        finally:
            self._task = None

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


class DirectoryWatch:
    """One watchdog observer for the directories a component follows; start and stop it on the
    loop."""

    def __init__(self) -> None:
        self._observer = Observer()
        self._observer.daemon = True
        self._rereads: list[Reread[object]] = []
        self._stale_checks: list[tuple[Callable[[], bool], Reread[object]]] = []
        self._handlers: dict[ObservedWatch, int] = {}  # one watch per directory, shared by its callbacks

    def add(self, directory: Path, callback: FileEvent) -> Callable[[], None]:
        """Call `callback` on the running loop for each change directly in `directory`, until the
        function returned is called."""
        relay = Relay(asyncio.get_running_loop(), callback)
        watch = self._observer.schedule(relay, str(directory), recursive=False, event_filter=list(_RELAYED))
        self._handlers[watch] = self._handlers.get(watch, 0) + 1

        def remove() -> None:
            self._handlers[watch] -= 1
            if self._handlers[watch]:
                self._observer.remove_handler_for_watch(relay, watch)
            else:
                del self._handlers[watch]
                self._observer.unschedule(watch)

        return remove

    def add_file(
        self,
        path: Path,
        read: Callable[[], T],
        deliver: Callable[[T], None],
        *,
        up_to_date: Callable[[], bool] | None = None,
    ) -> None:
        """Run `read` in a thread whenever `path` changes and hand its result to `deliver` on the
        loop. `up_to_date` tells whether the file is still what was last read: a change made after
        that read but before the watch started sends no event, so `start` re-reads a file that is
        not.

        `path` may be or lead through symbolic links: the directory holding `path` and the one
        holding the file it resolves to are both watched, and `path` resolving to another file is a
        change. That is how a ConfigMap volume is updated: the kubelet never writes the file, it
        renames a new `..data` link over the old one next to `path` and removes the directory the
        old one led to."""
        followed = _FollowedFile(self, path.absolute(), Reread(read, deliver))
        self._rereads.append(followed.reread)  # type: ignore[arg-type]
        if up_to_date is not None:
            self._stale_checks.append((up_to_date, followed.reread))  # type: ignore[arg-type]
        self.add(followed.path.parent, followed.on_event)
        followed.follow(followed.path.resolve())

    def start(self) -> None:
        self._observer.start()
        for up_to_date, reread in self._stale_checks:
            if not up_to_date():
                reread.changed()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the observer thread and any re-read in flight."""
        for reread in self._rereads:
            reread.cancel()
        # Also when `start` failed (a watched directory had gone): the observer's inotify reader
        # thread runs from the observer's creation, and only stopping the observer ends it.
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout)


class _FollowedFile(Generic[T]):
    """One `add_file`: which file `path` resolves to, and the watch on that file's directory when it
    is not `path`'s own."""

    def __init__(self, watch: DirectoryWatch, path: Path, reread: Reread[T]) -> None:
        self._watch, self.path, self.reread = watch, path, reread
        self._target = path
        self._unwatch_target: Callable[[], None] | None = None

    def follow(self, target: Path) -> None:
        """Watch `target`'s directory instead of the previous target's."""
        self._target = target
        if self._unwatch_target is not None:
            self._unwatch_target()
            self._unwatch_target = None
        if target.parent != self.path.parent:
            try:
                self._unwatch_target = self._watch.add(target.parent, self.on_event)
            except OSError as error:  # it went again meanwhile; the next change of `path` tries again
                log.warning("cannot watch %s for changes of %s: %s", target.parent, self.path, error)

    def on_event(self, changed: str, _kind: str) -> None:
        target = self.path.resolve()
        if target != self._target:
            self.follow(target)
            self.reread.changed()
        elif Path(changed).resolve() == target:
            self.reread.changed()
