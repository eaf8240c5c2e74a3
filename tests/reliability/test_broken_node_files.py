"""A real DRA daemon on a node whose files turn against it: read-only mounts, a full disk, a
directory where the checkpoint should be, a checkpoint garbled while serving, a planted symlink, a
permissive umask.

Read-only and full file systems are real mounts in a private mount namespace (`unshare -m`), so they
fail even for root; the daemon runs inside it and keeps its pid, and the test reaches its view of
the files through /proc/<pid>/root.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from npu_plugin.dra.checkpoint import Checkpoint
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.daemon import DaemonProcess, Launcher
from tests.support.dra import DRIVER, Workspace, dra_args, plant_claim, result, run_with_kubelet
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
needs_mounts = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for private mounts"
)


def in_namespace(*setup: str) -> list[str]:
    """A wrapper running shell `setup` commands in a private mount namespace, then exec'ing the
    daemon."""
    script = " && ".join([*setup, 'exec "$@"'])
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]


def read_only(path: Path) -> str:
    quoted = shlex.quote(str(path))
    return f"mount --bind {quoted} {quoted} && mount -o remount,bind,ro {quoted}"


def tmpfs(path: Path, size: str) -> str:
    return f"mount -t tmpfs -o size={size},mode=0750 tmpfs {shlex.quote(str(path))}"


def seen_by(daemon: DaemonProcess, path: Path) -> Path:
    return Path(f"/proc/{daemon.pid}/root{path}")


def start_failure(daemon: DaemonProcess) -> str:
    """The daemon's exit at start: code 1 and exactly one error line, which is returned."""
    assert daemon.process.wait(30) == 1, daemon.log()
    log = daemon.log()
    assert "Traceback" not in log and "unexpected error" not in log, log
    [line] = [line for line in log.splitlines() if "error:" in line]
    return line


def test_a_directory_in_place_of_the_checkpoint_stops_the_start_clearly(
    workspace: Workspace, launch_daemon: Launcher
) -> None:
    workspace.checkpoint.mkdir()
    line = start_failure(launch_daemon(*dra_args(workspace)))
    assert (
        line == f"npu-plugin serve: error: cannot read the checkpoint: {workspace.checkpoint}: Is a directory (EISDIR)"
    )


@needs_mounts
def test_a_read_only_state_dir_stops_the_start_clearly(workspace: Workspace, launch_daemon: Launcher) -> None:
    line = start_failure(launch_daemon(*dra_args(workspace), wrapper=in_namespace(read_only(workspace.state))))
    lock = workspace.state / "prepare.lock"
    assert line == f"npu-plugin serve: error: cannot open the state lock: {lock}: Read-only file system (EROFS)"


@needs_mounts
def test_a_read_only_cdi_root_holding_a_stale_claim_spec_stops_the_start_clearly(
    workspace: Workspace, launch_daemon: Launcher
) -> None:
    stale = workspace.cdi_file("0a1b2c3d-stale")
    stale.write_text("{}")
    line = start_failure(launch_daemon(*dra_args(workspace), wrapper=in_namespace(read_only(workspace.cdi))))
    assert line == f"npu-plugin serve: error: cannot clean up --cdi-root: {stale}: Read-only file system (EROFS)"
    assert stale.exists()


@needs_mounts
def test_cdi_enabled_with_a_read_only_cdi_root_stops_the_start_clearly(
    workspace: Workspace, launch_daemon: Launcher
) -> None:
    args = [
        *dra_args(workspace),
        "--mode",
        "device-plugin",
        "--cdi-enabled",
        "--device-plugin-path",
        str(workspace.root / "dp"),
    ]
    line = start_failure(launch_daemon(*args, wrapper=in_namespace(read_only(workspace.cdi))))
    spec = workspace.cdi / f"{DRIVER}-device-plugin.json"
    assert line == f"npu-plugin serve: error: cannot write the static CDI spec: {spec}: Read-only file system (EROFS)"


def fill(directory: Path) -> Path:
    """Write into `directory` until its file system is full."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with pytest.raises(OSError) as raised:
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    assert raised.value.errno == errno.ENOSPC
    return filler


@needs_mounts
def test_a_full_state_dir_fails_the_claim_and_keeps_the_state(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace), wrapper=in_namespace(tmpfs(workspace.state, "256k")))
    state = seen_by(daemon, workspace.state)
    first = plant_claim(fake_api, "first", None, [result("npu-1")])
    second = plant_claim(fake_api, "second", None, [result("npu-2")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        assert (await kubelet.prepare([first]))[first.uid].error == ""
        filler = fill(state)
        error = (await kubelet.prepare([second]))[second.uid].error
        expected = f"cannot write the checkpoint: {workspace.checkpoint}: No space left on device (ENOSPC)"
        assert error == f"claim default/second: {expected}"
        assert set(Checkpoint.from_bytes((state / "checkpoint.json").read_bytes()).claims) == {first.uid}
        assert not workspace.cdi_file(second.uid).exists()
        filler.unlink()
        assert (await kubelet.prepare([second]))[second.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)
    assert set(Checkpoint.from_bytes((state / "checkpoint.json").read_bytes()).claims) == {first.uid, second.uid}
    assert daemon.process.poll() is None


def remount(daemon: DaemonProcess, path: Path, option: str) -> None:
    """Remount `path`, a bind mount in the daemon's namespace, read-only or read-write (the daemon
    serves)."""
    command = ["nsenter", "-t", str(daemon.pid), "-m", "mount", "-o", f"remount,bind,{option}", str(path)]
    subprocess.run(command, check=True, capture_output=True, timeout=10)


@needs_mounts
def test_a_cdi_root_turning_read_only_fails_unprepare_clearly_and_keeps_the_claim(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    cdi = shlex.quote(str(workspace.cdi))
    daemon = launch_daemon(*dra_args(workspace), wrapper=in_namespace(f"mount --bind {cdi} {cdi}"))
    claim = plant_claim(fake_api, "held", None, [result("npu-1")])
    spec = workspace.cdi_file(claim.uid)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        remount(daemon, workspace.cdi, "ro")
        expected = f"claim default/held: cannot remove CDI spec {spec}: Read-only file system (EROFS)"
        assert await kubelet.unprepare([claim]) == {claim.uid: expected}
        assert set(Checkpoint.from_bytes(workspace.checkpoint.read_bytes()).claims) == {claim.uid}
        remount(daemon, workspace.cdi, "rw")
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}

    run_with_kubelet(workspace, fake_api, scenario)
    assert Checkpoint.from_bytes(workspace.checkpoint.read_bytes()).claims == {} and not spec.exists()


def test_a_checkpoint_replaced_by_a_directory_while_serving_fails_each_claim_clearly(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    first = plant_claim(fake_api, "first", None, [result("npu-1")])
    second = plant_claim(fake_api, "second", None, [result("npu-2")])
    expected = f"cannot read the checkpoint: {workspace.checkpoint}: Is a directory (EISDIR)"

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        assert (await kubelet.prepare([first]))[first.uid].error == ""
        workspace.checkpoint.unlink()
        workspace.checkpoint.mkdir()
        assert (await kubelet.prepare([second]))[second.uid].error == f"claim default/second: {expected}"
        assert await kubelet.unprepare([first]) == {first.uid: f"claim default/first: {expected}"}
        workspace.checkpoint.rmdir()
        assert (await kubelet.prepare([second]))[second.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)
    # The claim held before the fault is still recorded: the checkpoint came back from memory.
    assert set(Checkpoint.from_bytes(workspace.checkpoint.read_bytes()).claims) == {first.uid, second.uid}
    assert daemon.process.poll() is None


def test_a_checkpoint_garbled_while_serving_gives_no_device_to_two_claims(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    first = plant_claim(fake_api, "a", None, [result("npu-4")])
    second = plant_claim(fake_api, "b", None, [result("npu-4")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        assert (await kubelet.prepare([first]))[first.uid].error == ""
        workspace.checkpoint.write_bytes(b'{"version": 1, "bootId": "x", "claims": {"')
        error = (await kubelet.prepare([second]))[second.uid].error
        assert f"device npu-4: already prepared for claim {first.uid}" in error

    run_with_kubelet(workspace, fake_api, scenario)
    assert set(Checkpoint.from_bytes(workspace.checkpoint.read_bytes()).claims) == {first.uid}
    assert sorted(p.name for p in workspace.cdi.glob("*.json")) == [workspace.cdi_file(first.uid).name]
    [line] = [line for line in daemon.log().splitlines() if "while serving" in line]
    assert " ERROR " in line and "is corrupt" in line
    assert len(list(workspace.state.glob("checkpoint.json.corrupt-*"))) == 1


def test_control_characters_of_a_claim_name_come_back_escaped(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    hostile = plant_claim(fake_api, "x", "0a1b2c3d-hostile", [result("npu-1")])
    hostile = type(hostile)(hostile.namespace, "evil\x00name\nINFO forged line\x1b[31m", hostile.uid)

    async def scenario(kubelet: DraKubeletSimulator) -> tuple[str, str]:
        await kubelet.wait_for_plugin(DRIVER)
        prepared = (await kubelet.prepare([hostile]))[hostile.uid].error
        return prepared, (await kubelet.unprepare([hostile]))[hostile.uid]

    prepared, unprepared = run_with_kubelet(workspace, fake_api, scenario)
    for error in (prepared, unprepared):
        assert error and not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in error), repr(error)
    assert "default/evil\\x00name\\nINFO forged line\\x1b[31m: invalid claim namespace/name" in prepared


def test_a_symlink_planted_at_the_state_lock_is_not_followed(
    workspace: Workspace, launch_daemon: Launcher, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere" / "created-by-the-daemon"
    target.parent.mkdir()
    (workspace.state / "prepare.lock").symlink_to(target)
    line = start_failure(launch_daemon(*dra_args(workspace)))
    lock = workspace.state / "prepare.lock"
    assert (
        line
        == f"npu-plugin serve: error: cannot open the state lock: {lock}: Too many levels of symbolic links (ELOOP)"
    )
    assert not target.exists()


def modes(paths: Sequence[Path]) -> dict[str, str]:
    return {path.name: oct(stat.S_IMODE(path.lstat().st_mode)) for path in paths}


def test_under_umask_000_every_file_the_daemon_creates_has_its_own_mode(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    shutil.rmtree(workspace.state)
    shutil.rmtree(workspace.cdi)
    daemon = launch_daemon(*dra_args(workspace), wrapper=["sh", "-c", 'umask 000 && exec "$@"', "sh"])
    claim = plant_claim(fake_api, "c", None, [result("npu-1")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)
    assert modes(
        [
            workspace.state,
            workspace.state / "prepare.lock",
            workspace.checkpoint,
            workspace.cdi,
            workspace.cdi_file(claim.uid),
            workspace.dra_socket(),
            workspace.dra_socket().parent,
            workspace.registration_socket(),
        ]
    ) == {
        workspace.state.name: "0o750",
        "prepare.lock": "0o600",
        "checkpoint.json": "0o600",
        workspace.cdi.name: "0o755",
        workspace.cdi_file(claim.uid).name: "0o644",
        workspace.dra_socket().name: "0o600",
        workspace.dra_socket().parent.name: "0o750",
        workspace.registration_socket().name: "0o600",
    }
    assert json.loads(workspace.checkpoint.read_bytes())["claims"], "the claim was recorded"
    assert daemon.process.poll() is None
