"""Shared fixtures: the real daemon as a subprocess (stopped by pid), a fake /dev, inventory files."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from npu_plugin.ascend.container_edits import COMMON_NODES
from npu_plugin.ascend.device import Device
from npu_plugin.backends.fake.inventory_file import inventory_document
from tests.leaks import LeakWatch

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail any test that leaves asyncio tasks, threads or child processes running (see tests/leaks.py).
    Children it reports are then killed by pid, so one leak does not spill into the next test."""
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


def write_inventory(path: Path, devices: Sequence[Device]) -> None:
    """Replace the fake inventory file in one rename, as a careful writer would."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(yaml.safe_dump(inventory_document(devices), sort_keys=False), encoding="utf-8")
    os.replace(temp, path)


def populate_dev_root(directory: Path, count: int = 8) -> Path:
    """Plain files standing in for /dev/davinci0..N-1 and the common device nodes."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in [f"davinci{i}" for i in range(count)] + list(COMMON_NODES):
        (directory / name).touch()
    return directory


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll until `predicate()` holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class DaemonProcess:
    """One `npu-plugin serve` subprocess in its own process group; its output goes to `log_path`."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process, self.log_path = process, log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, text: str, timeout: float = 10.0) -> None:
        wait_until(lambda: text in self.log() or self.process.poll() is not None, timeout, repr(text))
        assert text in self.log(), f"daemon exited with {self.process.returncode}:\n{self.log()}"

    def signal(self, sig: signal.Signals, timeout: float) -> tuple[int, float]:
        """Send `sig`; the exit code and how long the daemon took to exit."""
        started = time.monotonic()
        self.process.send_signal(sig)
        code = self.process.wait(timeout)
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


Launcher = Callable[..., DaemonProcess]


class Daemons:
    """Starts `npu-plugin serve ARGS...` with its output in `log_dir`; `kill_all` kills each one by its pid."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[DaemonProcess] = []

    def __call__(
        self,
        *args: str,
        python_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        wrapper: Sequence[str] = (),
    ) -> DaemonProcess:
        """`wrapper` is a command that ends by exec'ing its arguments (the daemon keeps the pid)."""
        log_path = self.log_dir / f"daemon-{len(self.started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*wrapper, sys.executable, *python_args, "-m", "npu_plugin", "serve", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
                env=None if env is None else {**os.environ, **env},
            )
        self.started.append(DaemonProcess(process, log_path))
        return self.started[-1]

    def kill_all(self) -> None:
        for daemon in self.started:
            daemon.kill()


@pytest.fixture
def launch_daemon(tmp_path: Path) -> Iterator[Launcher]:
    """Start `npu-plugin serve ARGS...`; every daemon still running at teardown is killed by its pid."""
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
