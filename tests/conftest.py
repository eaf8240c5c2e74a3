"""Shared fixtures only: the leak check, the daemon launcher, a fake /dev; their helpers live in
tests/support/."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemons, Launcher, populate_dev_root
from tests.support.leaks import LeakWatch


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
    path = Path(tempfile.mkdtemp(prefix="npu-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def dev_root(tmp_path: Path) -> Path:
    return populate_dev_root(tmp_path / "dev")
