"""The real daemon as a subprocess (stopped by pid), a fake /dev and inventory files: the helpers
most integration and reliability tests share (their fixtures are in tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from npu_plugin.ascend.container_edits import COMMON_NODES
from npu_plugin.ascend.device import Device
from npu_plugin.backends.fake.inventory_file import inventory_document
from tests.support import cleanup

REPO = Path(__file__).resolve().parents[2]


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
        """SIGKILL to its process group and to whatever it left (tests.support.cleanup.kill);
        reaped."""
        cleanup.kill([self.process])


Launcher = Callable[..., DaemonProcess]
# A PodResources socket no kubelet serves, in a directory that does not exist, so any user reads it
# as absent (ENOENT, not EACCES).
NO_KUBELET = "/nonexistent/npu-plugin-tests/pod-resources/kubelet.sock"


class Daemons:
    """Starts `npu-plugin serve ARGS...` with its output in `log_dir`; `kill_all` kills each one by
    its pid."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[DaemonProcess] = []

    def __call__(
        self,
        *args: str,
        python_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        wrapper: Sequence[str] = (),
        constants: Mapping[str, float] | None = None,
    ) -> DaemonProcess:
        """`wrapper` is a command that ends by exec'ing its arguments (the daemon keeps the pid).
        `constants` sets module constants of the daemon first (tests.support.tuned), such as a period
        no flag sets. The daemon reads no kubelet of the host: its PodResources socket is one no
        kubelet serves unless the test names another (a real cluster on this machine would say its
        pods hold devices)."""
        log_path = self.log_dir / f"daemon-{len(self.started)}.log"
        runner = (
            ["tests.support.tuned", *(f"{k}={v}" for k, v in constants.items()), "--"] if constants else ["npu_plugin"]
        )
        argv = [*wrapper, sys.executable, *python_args, "-m", *runner, "serve", *args]
        isolated = {"NPU_PLUGIN_POD_RESOURCES_SOCKET": NO_KUBELET}
        process = cleanup.spawn(argv, log_path, cwd=REPO, env={**os.environ, **isolated, **(env or {})})
        self.started.append(DaemonProcess(process, log_path))
        return self.started[-1]

    def kill_all(self) -> None:
        for daemon in self.started:
            daemon.kill()
