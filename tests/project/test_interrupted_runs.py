"""A run stopped by SIGTERM, Ctrl-C (SIGINT) or SIGHUP leaves nothing behind: `scripts/bench`, a
pytest session and any program under tests.support.cleanup stop every process they started
(grandchildren in sessions of their own, and orphans, too) and remove their temporary directories.
Each run is a real process, signalled once a daemon it started is serving; the processes are found
below its pid and told apart by their arguments."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tests.support import cleanup
from tests.support.daemon import REPO, wait_until

# Alone (scripts/test runs it before the suite goes beside the e2e tier): it times how soon signalled runs end.
pytestmark = pytest.mark.alone

START_TIMEOUT = 120.0  # a first run compiles the package; a busy host is slow
EXIT_TIMEOUT = 60.0  # stopping waits up to 10 s per child


def argv_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except (FileNotFoundError, ProcessLookupError):
        return []


def flag(argv: list[str], name: str) -> Path:
    return Path(argv[argv.index(name) + 1])


def daemons_below(pid: int) -> list[list[str]]:
    """The argv of every `npu_plugin serve` below `pid`."""
    found = [argv_of(proc.pid) for proc in cleanup.descendants(pid)]
    return [argv for argv in found if argv[1:4] == ["-m", "npu_plugin", "serve"]]


def serving_dra_daemon(pid: int) -> list[str] | None:
    """The argv of a DRA daemon below `pid` once its plugin socket is there."""
    for argv in daemons_below(pid):
        if "--kubelet-plugins-directory-path" in argv:
            socket = flag(argv, "--kubelet-plugins-directory-path") / "npu.huawei.com" / "dra.sock"
            if socket.is_socket():
                return argv
    return None


def send(pid: int, signum: signal.Signals) -> None:
    """SIGTERM to the process, as `kill` or `timeout` sends it; SIGINT and SIGHUP to its process
    group, as a terminal sends them (Ctrl-C, a closed terminal)."""
    if signum == signal.SIGTERM:
        os.kill(pid, signum)
    else:
        os.killpg(pid, signum)


def assert_all_gone(procs: list[cleanup.Proc], directories: list[Path]) -> None:
    running = [" ".join(argv_of(p.pid)) or str(p.pid) for p in procs if cleanup.same(p)]
    assert not running, f"still running: {running}"
    left = [str(d) for d in directories if d.exists()]
    assert not left, f"directories left: {left}"


@pytest.mark.parametrize(
    ("section", "signum"),
    [
        ("vnpu", signal.SIGTERM),
        ("vnpu", signal.SIGINT),
        ("vnpu", signal.SIGHUP),
        ("dra", signal.SIGTERM),  # the fake API server in a process of its own too
    ],
)
def test_an_interrupted_bench_stops_its_daemons_and_removes_its_directory(
    tmp_path: Path, section: str, signum: signal.Signals
) -> None:
    argv = [str(REPO / "scripts" / "bench"), "--quick", "--section", section, "--json", str(tmp_path / "r.json")]
    with cleanup.process(argv, tmp_path / "bench.log") as bench:

        def started() -> bool:
            return serving_dra_daemon(bench.pid) is not None or bench.poll() is not None

        wait_until(started, START_TIMEOUT, "a serving DRA daemon below scripts/bench")
        daemon = serving_dra_daemon(bench.pid)
        assert daemon is not None, (tmp_path / "bench.log").read_text()
        procs = cleanup.descendants(bench.pid)
        work = Path("/", *flag(daemon, "--state-dir").parts[1:3])
        assert work.name.startswith(f"npu-bench-{section}-"), work

        send(bench.pid, signum)
        assert bench.wait(EXIT_TIMEOUT) == -signum, (tmp_path / "bench.log").read_text()

    assert_all_gone(procs, [work])
    log = (tmp_path / "bench.log").read_text()
    assert f"bench: stopped by {signum.name}" in log
    assert "Traceback" not in log, log
    assert not (tmp_path / "r.json").exists()


HELD_TEST = """
import asyncio
import time

from tests.support.dra import dra_args, fake_api_with_node, run_with_kubelet, temporary_workspace


def test_held(launch_daemon, short_dir):
    print("short_dir", short_dir, flush=True)
    with fake_api_with_node() as api, temporary_workspace(api) as workspace:
        launch_daemon(*dra_args(workspace))
        time.sleep(3600)


def test_held_in_a_loop(launch_daemon, short_dir):
    print("short_dir", short_dir, flush=True)

    async def scenario(kubelet):
        launch_daemon(*dra_args(workspace))
        await asyncio.sleep(3600)

    with fake_api_with_node() as api, temporary_workspace(api) as workspace:
        run_with_kubelet(workspace, api, scenario)
"""


@pytest.mark.parametrize(
    ("test", "signum"),
    [
        ("test_held", signal.SIGTERM),
        ("test_held", signal.SIGINT),
        ("test_held", signal.SIGHUP),
        # Inside asyncio.run: the scenario's task is cancelled and unwinds before the interruption.
        ("test_held_in_a_loop", signal.SIGTERM),
        ("test_held_in_a_loop", signal.SIGHUP),
    ],
)
def test_an_interrupted_pytest_session_stops_its_daemons_and_removes_their_directories(
    tmp_path: Path, test: str, signum: signal.Signals
) -> None:
    """The helpers of every test (launch_daemon, short_dir, the DRA workspace and kubelet) in a
    session signalled mid-test."""
    (tmp_path / "test_held.py").write_text(HELD_TEST)
    argv = [
        *(sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "tests.conftest"),
        *("--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "basetemp"), f"{tmp_path / 'test_held.py'}::{test}"),
    ]
    log = tmp_path / "pytest.log"
    with cleanup.process(argv, log, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}) as session:
        wait_until(
            lambda: serving_dra_daemon(session.pid) is not None or session.poll() is not None,
            START_TIMEOUT,
            "a serving DRA daemon below pytest",
        )
        daemon = serving_dra_daemon(session.pid)
        assert daemon is not None, log.read_text()
        procs = cleanup.descendants(session.pid)
        workspace = flag(daemon, "--state-dir").parent
        [short_dir] = [Path(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("short_dir")]
        send(session.pid, signum)
        assert session.wait(EXIT_TIMEOUT) == pytest.ExitCode.INTERRUPTED, log.read_text()
    assert_all_gone(procs, [workspace, short_dir])


DRIVER = """
import sys, time
from pathlib import Path
from tests.support import cleanup

try:
    with cleanup.interruptible():
        print(cleanup.make_directory("npu-driver-"), flush=True)
        # A child in its own session, a grandchild in the child's session, one in a session of its
        # own, and an orphan (its parent, the subshell, has ended) in a session of its own.
        script = "sleep 3600 & setsid sleep 3600 & (setsid sleep 3600 &); wait"
        cleanup.spawn(["sh", "-c", script], Path(sys.argv[1]))
        time.sleep(3600)
except cleanup.Interrupted as interrupted:
    interrupted.exit()
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signalled_run_ends_grandchildren_in_their_own_sessions_and_orphans(
    tmp_path: Path, signum: signal.Signals
) -> None:
    argv = [sys.executable, "-c", DRIVER, str(tmp_path / "child.log")]
    with cleanup.process(argv, tmp_path / "driver.log", cwd=REPO) as driver:
        sleeps: list[cleanup.Proc] = []

        def three_sleeps() -> bool:
            sleeps[:] = [p for p in cleanup.descendants(driver.pid) if argv_of(p.pid)[:1] == ["sleep"]]
            return len(sleeps) == 3 or driver.poll() is not None

        wait_until(three_sleeps, START_TIMEOUT, "three sleeps below the driver")
        procs = cleanup.descendants(driver.pid)
        # The child's session and two of their own.
        assert len({p.session for p in sleeps}) == 3, sleeps
        directory = Path((tmp_path / "driver.log").read_text().split()[0])
        send(driver.pid, signum)
        assert driver.wait(EXIT_TIMEOUT) == -signum, (tmp_path / "driver.log").read_text()
    assert_all_gone(procs, [directory])


def test_stop_ends_what_a_child_started_in_sessions_of_their_own(tmp_path: Path) -> None:
    child = cleanup.spawn(["sh", "-c", "sleep 3600 & setsid sleep 3600 & wait"], tmp_path / "child.log")
    wait_until(lambda: len(cleanup.descendants(child.pid)) == 2, START_TIMEOUT, "two sleeps below the child")
    procs = cleanup.descendants(child.pid)
    cleanup.stop([child])
    assert child.returncode == -signal.SIGTERM
    assert_all_gone(procs, [])
