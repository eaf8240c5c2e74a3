"""The leak check itself: run on tests that leak on purpose (in a pytest of their own, so the leaks
stay there), it fails each one naming what was left, and kills the processes it reports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.leaks import Child, parse_stat

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """
import tests.support.leaks
from tests.conftest import no_leaks

# Shorter than the suite's grace, to keep this quick; long enough for a loaded machine.
tests.support.leaks.THREAD_GRACE_SECONDS = 2.0
tests.support.leaks.GRPC_SETTLE_SECONDS = 2.0
"""

LEAKING_TESTS = """
import asyncio
import contextlib
import subprocess
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

KEEP = []


async def health_server():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, grpc.aio.insecure_channel(f"127.0.0.1:{port}")


async def watch(channel):
    call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    await call.read()
    return call


def test_task_left_under_asyncio_run():
    async def main():
        asyncio.create_task(asyncio.sleep(60), name="left-behind")

    asyncio.run(main())


def test_task_left_on_a_closed_loop():
    loop = asyncio.new_event_loop()
    KEEP.append(loop.create_task(asyncio.sleep(60), name="never-ran"))
    loop.close()


def test_loop_never_closed():
    KEEP.append(asyncio.new_event_loop())


def test_thread_left_running():
    threading.Thread(target=threading.Event().wait, name="left-running", daemon=True).start()


def test_child_left_running():
    process = subprocess.Popen(["sleep", "60"])
    Path("sleeper.pid").write_text(str(process.pid))
    KEEP.append(process)


def test_child_never_waited_for():
    process = subprocess.Popen(["true"])
    KEEP.append(process)
    while Path(f"/proc/{process.pid}/stat").read_text().split(") ")[1][0] != "Z":
        time.sleep(0.01)


def test_grpc_stream_nobody_ended():
    async def main():
        server, channel = await health_server()
        KEEP.extend([server, channel, await watch(channel)])

    asyncio.run(main())


def test_stopping_everything_it_starts():
    async def main():
        task = asyncio.create_task(asyncio.sleep(60))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        server, channel = await health_server()
        async with channel:
            await watch(channel)  # closing the channel ends the stream
        await server.stop(None)

    asyncio.run(main())
    loop = asyncio.new_event_loop()
    loop.close()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    stop.set()
    thread.join()
    process = subprocess.Popen(["sleep", "60"])
    process.kill()
    process.wait()
"""

EXPECTED = {
    "test_task_left_under_asyncio_run": r"asyncio task still pending when asyncio.run's main coroutine returned: "
    r"<Task pending name='left-behind' coro=<sleep\(\)",
    "test_task_left_on_a_closed_loop": r"asyncio task still pending at the end of the test: "
    r"<Task pending name='never-ran' coro=<sleep\(\)",
    "test_loop_never_closed": r"event loop never closed: <_UnixSelectorEventLoop running=False closed=False",
    "test_thread_left_running": r"thread still running: <Thread\(left-running, started daemon \d+\)> "
    r"\(target threading.Event.wait\)",
    "test_child_left_running": r"child process still running: pid \d+: sleep 60",
    "test_child_never_waited_for": r"child process never waited for \(zombie\): pid \d+: \(true\)",
    "test_grpc_stream_nobody_ended": r"asyncio task still pending when asyncio.run's main coroutine returned: "
    r"<Task pending name='Task-\d+' coro=<_AioCall._handle_status_once_received\(\)",
}


@pytest.fixture(scope="module")
def leaking_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    directory = tmp_path_factory.mktemp("leaking")
    (directory / "conftest.py").write_text(textwrap.dedent(CONFTEST), encoding="utf-8")
    (directory / "test_leaking.py").write_text(textwrap.dedent(LEAKING_TESTS), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(directory), str(directory)],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout + result.stderr, directory


def teardown_errors(output: str) -> dict[str, str]:
    """Each test's section of the ERRORS report, by test name."""
    sections = re.split(r"^_+ ERROR at teardown of (\w+) _+$", output, flags=re.MULTILINE)
    return dict(zip(sections[1::2], sections[2::2], strict=True))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_kind_of_leak_fails_its_test_naming_what_was_left(leaking_run: tuple[str, Path], name: str) -> None:
    output, _ = leaking_run
    section = teardown_errors(output).get(name, "")
    assert "the test left these running:" in section, output
    assert re.search(EXPECTED[name], section), section


def test_only_the_leaking_tests_fail(leaking_run: tuple[str, Path]) -> None:
    output, _ = leaking_run
    assert sorted(teardown_errors(output)) == sorted(EXPECTED), output
    assert f"{len(EXPECTED) + 1} passed, {len(EXPECTED)} errors" in output, output


def test_a_child_left_running_is_killed_by_its_pid(leaking_run: tuple[str, Path]) -> None:
    _, directory = leaking_run
    pid = int((directory / "sleeper.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "sleep" not in Path(f"/proc/{pid}/cmdline").read_text()


@pytest.mark.parametrize(
    ("stat", "child"),
    [
        ("41 (sleep) S 40 41 40 0 -1 4194560 " + "0 " * 12 + "812345 0", Child(41, 812345, "(sleep)", False)),
        ("42 (a) b (c) Z 40 42 40 0 -1 4194560 " + "0 " * 12 + "99 0", Child(42, 99, "(a) b (c)", True)),
    ],
    ids=["running", "zombie whose name holds parentheses and a space"],
)
def test_proc_stat_is_read_after_the_last_parenthesis(stat: str, child: Child) -> None:
    assert parse_stat(stat, command="") == child
