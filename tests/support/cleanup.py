"""What a benchmark or test run starts, stopped however the run ends: normally, by an exception, or
by SIGTERM, SIGINT (Ctrl-C) or SIGHUP. One mechanism for `scripts/bench` and for every test helper.

- `interruptible()` wraps a whole run (scripts/bench's main, the pytest session). Inside it
  SIGTERM and SIGHUP do what Ctrl-C does there: a KeyboardInterrupt from Python's own SIGINT
  handler, or, inside `asyncio.run`, the cancellation of its main task, whose cleanup runs in order
  before the KeyboardInterrupt; so every `finally`, context manager and pytest fixture teardown on
  the way out runs. A second signal kills whatever is still recorded at once. On the way out,
  whatever is still recorded is stopped and removed, whatever still runs below the process is
  killed (as a child subreaper, it also finds there the orphans of what it started), and the
  KeyboardInterrupt leaves as `Interrupted`, which names the signal.
- `spawn()` starts a child in a session of its own (a terminal's Ctrl-C reaches only the run, which
  stops it) and records it by pid; `stop()` and `kill()` end it and everything it started: its
  process group, any process still in its session, and every descendant seen before it ended (a
  grandchild may have made a session of its own). The child is reaped only after that, so its pid
  still names it.
- `temporary_directory()` makes a short directory under /tmp (Unix socket paths must stay under 108
  bytes) recorded until it is removed.

Recording and stopping defer SIGTERM and SIGHUP to their end. A Ctrl-C there is not deferred (it
keeps Python's and asyncio's own handling); what it cuts short is still recorded, or below the
process, and so stopped on the way out."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import NoReturn

POLL_SECONDS = 0.01
KILL_WAIT_SECONDS = 10.0  # for a SIGKILLed process to be gone
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
LIBC = ctypes.CDLL(None, use_errno=True)


class Interrupted(KeyboardInterrupt):
    """The run got SIGTERM, SIGINT or SIGHUP, and everything it started is stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def exit(self) -> NoReturn:
        """End this process by the signal it got, as it would have ended without the cleanup."""
        signal.signal(self.signum, signal.SIG_DFL)
        os.kill(os.getpid(), self.signum)
        raise SystemExit(128 + self.signum)  # not reached: the default action ends the process


@dataclass(frozen=True)
class Proc:
    """A process as /proc shows it; `started` (clock ticks after boot) tells it from a later one
    with its pid."""

    pid: int
    started: int
    group: int
    session: int
    zombie: bool


def read_proc(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return parse_stat(stat)


def parse_stat(stat: str) -> Proc:
    # The name in parentheses may hold spaces and parentheses itself: the fields start after the
    # last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    return Proc(int(stat.split(maxsplit=1)[0]), int(fields[19]), int(fields[2]), int(fields[3]), fields[0] == "Z")


def all_procs() -> list[Proc]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (proc := read_proc(int(entry.name))) is not None:
            found.append(proc)
    return found


def child_pids(pid: int) -> list[int]:
    """The children of process `pid`, every thread's (zombies too); none once it is gone."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return []
    for task in tasks:
        try:
            found += map(int, (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):  # the thread ended while we were listing
            continue
    return found


def descendants(pid: int) -> list[Proc]:
    """Every process below `pid` (its children, their children, ...)."""
    found: list[Proc] = []
    parents = [pid]
    while parents:
        for child in child_pids(parents.pop()):
            if (proc := read_proc(child)) is not None:
                found.append(proc)
                parents.append(child)
    return found


def same(proc: Proc) -> bool:
    """`proc` still runs (a zombie has ended) and its pid was not given to another process since."""
    now = read_proc(proc.pid)
    return now is not None and now.started == proc.started and not now.zombie


def kill_all(procs: Sequence[Proc]) -> None:
    """SIGKILL each one that is still itself, by pid."""
    for proc in procs:
        if same(proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


def wait_gone(procs: Sequence[Proc], timeout: float = KILL_WAIT_SECONDS) -> None:
    """Until each has ended (a zombie whose parent is not this process is its parent's to reap)."""
    deadline = time.monotonic() + timeout
    while any(same(proc) for proc in procs) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


def kill_and_reap(procs: Sequence[Proc]) -> None:
    """SIGKILL to each, wait until each has ended, and reap those that are children of this process
    (as a subreaper it inherits the orphans of what it started)."""
    kill_all(procs)
    wait_gone(procs)
    for proc in procs:
        now = read_proc(proc.pid)
        if now is not None and now.started == proc.started and now.zombie:
            with contextlib.suppress(ChildProcessError):  # another process's zombie
                os.waitpid(proc.pid, os.WNOHANG)


@dataclass
class Child:
    """A process this run started in a session of its own (its pid is its group's and its session's
    id), and the descendants last seen below it."""

    process: subprocess.Popen[bytes]
    proc: Proc
    seen_below: list[Proc] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def state(self) -> str:
        """One of "running", "ended" (a zombie: its pid, group and session id still name it) and
        "reaped"."""
        if self.process.returncode is not None:
            return "reaped"
        try:
            status = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped by a plain os.waitpid
            return "reaped"
        return "running" if status is None else "ended"

    def look_below(self) -> None:
        """Remember what runs below it now: a grandchild in a session of its own is found only this
        way."""
        self.seen_below = [*{p.pid: p for p in [*self.seen_below, *descendants(self.pid)]}.values()]

    def leftovers(self) -> list[Proc]:
        """What it started that still runs: its group and session, and the descendants seen below
        it. Only processes started after it count, and only while no later process has its pid (its
        group and session outlive it only while a member holds its pid)."""
        now = read_proc(self.pid)
        members: list[Proc] = []
        if now is None or now.started == self.proc.started:
            members = [
                p
                for p in all_procs()
                if self.pid in (p.group, p.session) and p.pid != self.pid and p.started >= self.proc.started
            ]
        return [p for p in {p.pid: p for p in [*members, *self.seen_below]}.values() if same(p)]

    def kill_now(self) -> None:
        """SIGKILL to it, its group and what it left, without waiting and without reaping."""
        self.look_below()
        if self.state() != "reaped":
            self.kill_unreaped()
        kill_all(self.leftovers())

    def kill_unreaped(self) -> None:
        """SIGKILL to it and its process group (unless it left the group it was started as the
        leader of)."""
        os.kill(self.pid, signal.SIGKILL)  # a zombie takes it too
        with contextlib.suppress(ProcessLookupError):  # no process left in its group
            os.killpg(self.pid, signal.SIGKILL)


@dataclass
class Records:
    """What this run started and has not stopped yet, and which signal came first."""

    children: dict[int, Child] = field(default_factory=dict)
    directories: set[Path] = field(default_factory=set)
    deferring: int = 0  # nesting depth of `deferred` blocks in the main thread
    pending: list[int] = field(default_factory=list)  # signals that arrived in one
    signum: int | None = None


RECORDS = Records()
OWN_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # SIGINT keeps Python's and asyncio's handling


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """SIGTERM or SIGHUP arriving in this block (in the main thread) is acted on at its end."""
    if not in_main_thread():
        yield
        return
    RECORDS.deferring += 1
    try:
        yield
    finally:
        RECORDS.deferring -= 1
        if not RECORDS.deferring and RECORDS.pending:
            signum = RECORDS.pending.pop(0)
            RECORDS.pending.clear()
            _interrupt(signum, None)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if RECORDS.deferring:
        RECORDS.pending.append(signum)
        return
    _interrupt(signum, frame)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """What Ctrl-C does here: the current SIGINT handler is Python's (it raises KeyboardInterrupt)
    or, inside `asyncio.run`, asyncio's (it cancels the main task the first time)."""
    if RECORDS.signum is None:
        RECORDS.signum = signum
    else:  # a second signal: wait for nothing, wherever the first one's cleanup is stuck
        for child in list(RECORDS.children.values()):
            child.kill_now()
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):  # ignored, or the default action: no Python handler to run
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)


def install() -> None:
    """SIGTERM and SIGHUP do what Ctrl-C does from here on (again, after code that set handlers of
    its own: an event loop's add_signal_handler leaves the default action behind)."""
    for signum in OWN_SIGNALS:
        signal.signal(signum, _on_signal)


@contextlib.contextmanager
def interruptible(subreaper: bool = True) -> Iterator[None]:
    """SIGTERM and SIGHUP do what Ctrl-C does inside. With `subreaper` this process is a child
    subreaper: an orphan of what it started (a grandchild whose parent ended first) becomes its
    child instead of init's, so it is still found below it. At the end, whatever is still recorded
    is stopped and removed, and whatever still runs below is killed; a KeyboardInterrupt leaves as
    `Interrupted`."""
    previous = {signum: signal.getsignal(signum) for signum in OWN_SIGNALS}
    install()
    set_subreaper(subreaper)
    RECORDS.signum = None
    interrupted = False
    try:
        yield
    except KeyboardInterrupt as interrupt:
        interrupted = True
        raise Interrupted(RECORDS.signum or signal.SIGINT) from interrupt
    finally:
        with deferred():
            stop(list(RECORDS.children.values()), grace=0.0 if interrupted else 10.0)
            for directory in list(RECORDS.directories):
                remove(directory)
            kill_below()
        set_subreaper(False)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        RECORDS.pending.clear()


def set_subreaper(on: bool) -> None:
    if LIBC.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(error)}")


def kill_below() -> None:
    """SIGKILL to every process below this one, each reaped if it is this process's child."""
    kill_and_reap(descendants(os.getpid()))


def spawn(
    argv: Sequence[str], log: Path, *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`argv` in a session of its own, stdin from /dev/null, output to `log`; recorded until
    stopped."""
    with deferred(), log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        # Read while unreaped, so the pid is still this child's; a child that has already ended has
        # no leftovers to tell by start time, so its own birth is taken as now.
        proc = read_proc(process.pid) or Proc(process.pid, 0, process.pid, process.pid, True)
        RECORDS.children[process.pid] = Child(process, proc)
    return process


def _record(process: subprocess.Popen[bytes]) -> Child | None:
    """Its record; None once it was stopped."""
    child = RECORDS.children.get(process.pid)
    if child is not None and child.process is process:
        return child
    if process.returncode is None:
        raise ValueError(f"pid {process.pid} was not started by spawn()")
    return None


def stop(processes: Sequence[subprocess.Popen[bytes] | Child], grace: float = 10.0) -> None:
    """SIGTERM to each child still running, all at once; after `grace` seconds SIGKILL to the group
    of each one still running; then SIGKILL to what they left (see `Child.leftovers`), and every
    child reaped. A child stopped before is left alone."""
    children = [child for p in processes if (child := p if isinstance(p, Child) else _record(p)) is not None]
    with deferred():
        for child in children:
            child.look_below()
        running = [child for child in children if child.state() == "running"]
        if grace > 0:
            for child in running:
                os.kill(child.pid, signal.SIGTERM)  # unreaped: the pid is still this child's
            deadline = time.monotonic() + grace
            while any(c.state() == "running" for c in running) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
        for child in children:
            _finish(child)


def kill(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGKILL to each child's group and to what it left; every child reaped."""
    stop(processes, grace=0.0)


def _finish(child: Child) -> None:
    child.look_below()
    left = child.leftovers()
    if child.state() != "reaped":  # its pid, group and session id still name it
        child.kill_unreaped()
    kill_and_reap(left)
    if child.process.returncode is None:
        with contextlib.suppress(ChildProcessError):  # reaped by a plain os.waitpid
            child.process.wait()
    RECORDS.children.pop(child.pid, None)


@contextlib.contextmanager
def process(
    argv: Sequence[str], log: Path, *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`spawn(...)` for the block, stopped (`stop`) when it ends."""
    child = spawn(argv, log, cwd=cwd, env=env)
    try:
        yield child
    finally:
        stop([child])


def make_directory(prefix: str) -> Path:
    """A new directory /tmp/`prefix`XXXXXXXX, recorded until `remove`."""
    with deferred():
        path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        RECORDS.directories.add(path)
    return path


def remove(path: Path) -> None:
    with deferred():
        shutil.rmtree(path, ignore_errors=True)
        RECORDS.directories.discard(path)


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[Path]:
    """`make_directory(prefix)` for the block, removed when it ends."""
    path = make_directory(prefix)
    try:
        yield path
    finally:
        remove(path)
