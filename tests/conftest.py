"""Shared fixtures only: the leak check, the daemon launcher, a fake /dev; their helpers live in
tests/support/. The session runs under tests.support.cleanup: SIGTERM and SIGHUP end it as Ctrl-C
does, tearing every fixture down, and whatever a test started is stopped however the session ends."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import cleanup
from tests.support.daemon import Daemons, Launcher, populate_dev_root
from tests.support.hermetic import clear_host_environment, no_host_hccn_tool
from tests.support.leaks import LeakWatch

SESSION_CLEANUP = pytest.StashKey[contextlib.ExitStack]()


def pytest_configure(config: pytest.Config) -> None:
    stack = contextlib.ExitStack()
    # Not a subreaper: podman's conmon leaves its parent by design, and would become a child of the
    # session.
    stack.enter_context(cleanup.interruptible(subreaper=False))
    config.stash[SESSION_CLEANUP] = stack
    clear_host_environment()
    stack.enter_context(no_host_hccn_tool())


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash[SESSION_CLEANUP].close()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that ran an event loop's add_signal_handler (a daemon in this process) left the
    default actions."""
    cleanup.install()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail any test that leaves asyncio tasks, threads or child processes running (see
    tests/support/leaks.py). Children it reports are then killed by pid, so one leak does not spill
    into the next test."""
    with LeakWatch() as watch:
        yield
    leaks = watch.leaks()
    watch.stop_children()
    if leaks:
        pytest.fail("the test left these running:\n" + "\n".join(leaks), pytrace=False)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """For tests calling `main`, which sets up logging for the process: leave it as it was found."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.fixture
def launch_daemon(tmp_path: Path) -> Iterator[Launcher]:
    """Start `npu-plugin serve ARGS...`; every daemon still running at teardown is killed by its
    pid."""
    daemons = Daemons(tmp_path)
    yield daemons
    daemons.kill_all()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: Unix socket paths must stay under 108 bytes."""
    with cleanup.temporary_directory("npu-") as path:
        yield path


@pytest.fixture
def dev_root(tmp_path: Path) -> Path:
    return populate_dev_root(tmp_path / "dev")
