"""`npu-plugin serve` as a new user meets it: a real process, run as an unprivileged user where
permissions matter; each failure is one line and an exit code, never a traceback."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from npu_plugin import __version__
from tests.support import cleanup
from tests.support.daemon import REPO, DaemonProcess, Launcher

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
as_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to run the daemon as another user"
)
FAKE = ["--backend", "fake", "--fake-profile", "atlas-800t-a2"]
KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: k, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
"""


@pytest.fixture
def node() -> Iterator[Path]:
    """A short directory everyone may enter (sockets need short paths; the unprivileged daemon must
    reach it)."""
    with cleanup.temporary_directory("npu-") as path:
        path.chmod(0o755)
        yield path


def start_failure(daemon: DaemonProcess, code: int = 1) -> str:
    assert daemon.process.wait(30) == code, daemon.log()
    log = daemon.log()
    assert "Traceback" not in log and "unexpected error" not in log, log
    [line] = [line for line in log.splitlines() if "error:" in line]
    return line


def root_only(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o755)
    return path


@as_nobody
def test_an_unwritable_device_plugin_directory_is_one_line(node: Path, launch_daemon: Launcher) -> None:
    plugins = root_only(node / "device-plugins")
    daemon = launch_daemon(*FAKE, "--device-plugin-path", str(plugins), "--dev-root", str(node), wrapper=NOBODY)
    line = start_failure(daemon)
    assert line == (
        f"npu-plugin serve: error: {plugins}: Permission denied (EACCES): run as root or give the daemon write access"
    )


@as_nobody
@pytest.mark.parametrize("flag", ["--state-dir", "--kubelet-registrar-directory-path", "--cdi-root"])
def test_unwritable_dra_directories_are_one_line(node: Path, launch_daemon: Launcher, flag: str) -> None:
    writable = node / "w"
    writable.mkdir()
    writable.chmod(0o777)
    kubeconfig = node / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    kubeconfig.chmod(0o644)
    locked = root_only(node / "locked")
    target = locked / "sub" if flag == "--cdi-root" else locked  # the kubelet's directories are waited for, not made
    dirs = {
        "--kubelet-registrar-directory-path": writable,
        "--kubelet-plugins-directory-path": writable,
        "--cdi-root": writable,
        "--state-dir": writable / "state",
    }
    dirs[flag] = target
    args = [*FAKE, "--mode", "dra", "--node-name", "n1", "--dev-root", str(node), "--kubeconfig", str(kubeconfig)]
    args += ["--pod-resources-socket", str(writable / "no-pod-resources.sock")]  # never the host kubelet's
    for name, path in dirs.items():
        args += [name, str(path)]
    line = start_failure(launch_daemon(*args, wrapper=NOBODY))
    assert line.startswith("npu-plugin serve: error: ") and str(locked) in line and "Permission denied" in line, line


def test_a_missing_kubeconfig_from_the_standard_variable_says_no_such_file(node: Path, launch_daemon: Launcher) -> None:
    missing = node / "no-kubeconfig"
    args = [*FAKE, "--mode", "dra", "--node-name", "n1", "--dev-root", str(node), "--state-dir", str(node / "s")]
    daemon = launch_daemon(*args, env={"KUBECONFIG": str(missing)})
    assert start_failure(daemon, code=2) == f"npu-plugin serve: error: --kubeconfig {missing}: no such file"


def test_seed_dra_flags_without_a_dra_mode_are_warned_about(
    node: Path, dev_root: Path, launch_daemon: Launcher
) -> None:
    seed = ["--device-profile=npu", "--driver-name=npu.huawei.com", f"--kubelet-registrar-directory-path={node}"]
    daemon = launch_daemon(*FAKE, *seed, "--device-plugin-path", str(node / "dp"), "--dev-root", str(dev_root))
    daemon.wait_for_log("npu-plugin 0")
    assert daemon.signal(signal.SIGTERM, 10)[0] == 0
    [warning] = [line for line in daemon.log().splitlines() if "only apply to DRA" in line]
    assert warning.endswith(
        "--kubelet-registrar-directory-path, --driver-name only apply to DRA and are unused in "
        "--mode device-plugin; add --mode dra (or --mode both with --dra-devices LIST) to serve DRA"
    )


def test_version_through_python_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "npu_plugin", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"npu-plugin {__version__}\n", "")


@pytest.mark.parametrize("flag", ["--metrics-port", "--healthcheck-port"])
def test_a_port_in_use_is_one_line_naming_the_flag(
    node: Path, dev_root: Path, launch_daemon: Launcher, flag: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [*FAKE, "--device-plugin-path", str(node), "--dev-root", str(dev_root), "--bind-address", "127.0.0.1"]
        line = start_failure(launch_daemon(*args, flag, str(port)))
    assert line == f"npu-plugin serve: error: {flag} {port}: cannot listen on 127.0.0.1:{port}: " + (
        "Address already in use (EADDRINUSE)"
    )


def test_a_relative_socket_directory_is_taken_from_the_working_directory(
    node: Path, dev_root: Path, launch_daemon: Launcher
) -> None:
    """The daemon runs in the repository; `--device-plugin-path` relative to it names `node`."""
    relative = os.path.relpath(node, REPO)
    daemon = launch_daemon(*FAKE, "--device-plugin-path", relative, "--dev-root", str(dev_root))
    daemon.wait_for_log(f"device plugin serving on {node}/npu-plugin-Ascend910.sock")
    assert daemon.signal(signal.SIGTERM, 10)[0] == 0
    assert "Traceback" not in daemon.log()
