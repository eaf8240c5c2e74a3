"""What a test leaves running: asyncio tasks, threads and child processes it started and did not
stop.

Tests run asyncio through `asyncio.run` (or a loop of their own). `asyncio.run` quietly cancels
whatever tasks are still pending when the main coroutine returns, so the check looks at that moment:
it wraps the runner's final cancellation and records the tasks it is about to cancel. Loops made
with `new_event_loop()` are recorded too, and any task still pending on one of them at the end of
the test is a leak, as is a loop never closed (its selector and self-pipe stay open).

One kind of task gets time to finish instead: gRPC AsyncIO's own per-call tasks (GRPC_CALL_TASKS),
on the client (the call's status) and on the server (each RPC's handler and its cancellation watch).
After a call is ended (cancelled, its channel closed, its server stopped), gRPC core reports it from
its poller thread a moment later, and no public API awaits that report; so these tasks get up to
GRPC_SETTLE_SECONDS to end. One that does not end belongs to a call nobody ended, and is reported.

Threads started during the test must have ended by its end (each gets up to THREAD_GRACE_SECONDS to
finish what it was told to stop doing); garbage is collected first, because gRPC AsyncIO's poller
thread stops only when its last channel or server is collected. No thread is exempt.

Child processes of this process (any thread's) that were not there before the test must be gone and
waited for; the fixture kills and reaps the ones it reports, by pid.
"""

from __future__ import annotations

import asyncio
import asyncio.runners
import contextlib
import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import cleanup

THREAD_GRACE_SECONDS = 5.0
GRPC_SETTLE_SECONDS = 5.0
# gRPC AsyncIO's own per-call tasks: a client call's status, and a server RPC's scheduling,
# exception handling and cancellation watch. Each ends only after gRPC core reports the call's end.
GRPC_CALL_TASKS = frozenset(
    {
        "_AioCall._handle_status_once_received",
        "_schedule_rpc_coro",
        "_handle_exceptions",
        "_handle_cancellation_from_core",
    }
)


@dataclass(frozen=True)
class Child:
    pid: int
    started: int  # clock ticks after boot: tells a new process from an old one that had the same pid
    command: str
    zombie: bool


def children() -> dict[tuple[int, int], Child]:
    """The children of this process (every thread's, zombies included), keyed by pid and start
    time."""
    found = {}
    for pid in cleanup.child_pids(os.getpid()):
        child = describe(pid)
        if child is not None:
            found[child.pid, child.started] = child
    return found


def describe(pid: int) -> Child | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError):  # it was reaped while we looked
        return None
    return parse_stat(stat, command)


def parse_stat(stat: str, command: str) -> Child:
    """A child from its /proc/PID/stat line; `command` (its argv) if it has one, else the name in
    `stat`."""
    proc = cleanup.parse_stat(stat)
    return Child(proc.pid, proc.started, command or stat[stat.index("(") : stat.rindex(")") + 1], proc.zombie)


class LeakWatch:
    """Use around one test: `with LeakWatch() as watch: ...`, then `watch.leaks()` names what is
    left."""

    def __init__(self) -> None:
        self.threads_before: set[threading.Thread] = set()
        self.children_before: set[tuple[int, int]] = set()
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.abandoned: list[str] = []
        self._restore: list[Callable[[], None]] = []

    def __enter__(self) -> LeakWatch:
        self.threads_before = set(threading.enumerate())
        self.children_before = set(children())
        # asyncio.run cancels leftover tasks in this private function, the one moment they are
        # visible.
        self._wrap(asyncio.runners, "_cancel_all_tasks", self._before_runner_cancels)
        self._wrap(asyncio.events.BaseDefaultEventLoopPolicy, "new_event_loop", self._after_new_loop)
        return self

    def __exit__(self, *exc: object) -> None:
        for restore in reversed(self._restore):
            restore()
        self._restore.clear()

    def _wrap(self, owner: Any, name: str, hook: Callable[..., Any]) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any) -> Any:
            return hook(original, *args)

        setattr(owner, name, wrapper)
        self._restore.append(lambda: setattr(owner, name, original))

    def _before_runner_cancels(self, original: Callable[[asyncio.AbstractEventLoop], None], loop: Any) -> None:
        pending = asyncio.all_tasks(loop)
        settling = {task for task in pending if is_grpc_call_task(task)}
        if settling:
            loop.run_until_complete(asyncio.wait(settling, timeout=GRPC_SETTLE_SECONDS))
        self.abandoned += [
            f"asyncio task still pending when asyncio.run's main coroutine returned: {task!r}"
            for task in pending
            if task not in settling or not task.done()
        ]
        original(loop)

    def _after_new_loop(self, original: Callable[[Any], asyncio.AbstractEventLoop], policy: Any) -> Any:
        loop = original(policy)
        self.loops.append(loop)
        return loop

    def leaks(self) -> list[str]:
        """Every task, loop, thread and child process the test left behind, one line each."""
        return self.abandoned + self._loop_leaks() + self._thread_leaks() + self._child_leaks()

    def _loop_leaks(self) -> list[str]:
        found = []
        for loop in self.loops:
            found += [
                f"asyncio task still pending at the end of the test: {task!r}" for task in asyncio.all_tasks(loop)
            ]
            if not loop.is_closed():
                found.append(f"event loop never closed: {loop!r}")
        return found

    def _thread_leaks(self) -> list[str]:
        started = [thread for thread in threading.enumerate() if thread not in self.threads_before]
        if any(thread.is_alive() for thread in started):
            gc.collect()
        deadline = time.monotonic() + THREAD_GRACE_SECONDS
        for thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [
            f"thread still running: {thread!r} (target {thread_target(thread)})"
            for thread in started
            if thread.is_alive()
        ]

    def _child_leaks(self) -> list[str]:
        left = [child for key, child in children().items() if key not in self.children_before]
        return [
            f"child process {'never waited for (zombie)' if child.zombie else 'still running'}: "
            f"pid {child.pid}: {child.command}"
            for child in left
        ]

    def stop_children(self) -> None:
        """Kill (by pid) and reap the children the test left and everything below them, so the next
        test starts clean."""
        for key, child in children().items():
            if key in self.children_before:
                continue
            below = cleanup.descendants(child.pid)
            if not child.zombie:
                os.kill(child.pid, signal.SIGKILL)
            cleanup.kill_and_reap(below)
            with contextlib.suppress(ChildProcessError):  # its Popen object reaped it first
                os.waitpid(child.pid, 0)


def is_grpc_call_task(task: asyncio.Task[Any]) -> bool:
    return getattr(task.get_coro(), "__qualname__", None) in GRPC_CALL_TASKS


def thread_target(thread: threading.Thread) -> str:
    """The function a thread runs (`module.qualname`), or its class when it overrides `run`."""
    target = getattr(thread, "_target", None) or type(thread).run
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
