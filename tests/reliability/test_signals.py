"""Real signals to a real daemon: every catchable signal that would end it stops it in order and
leaves no socket behind; SIGHUP is logged and ignored."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from npu_plugin.daemon import STOP_SIGNALS
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.daemon import DaemonProcess, Launcher, wait_until
from tests.support.dra import DRIVER, Workspace, dra_args, plant_claim, result, run_with_kubelet
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]


def sockets(workspace: Workspace) -> list[Path]:
    """Every socket the DRA daemon of `workspace` serves."""
    return sorted(p for folder in (workspace.reg, workspace.plugins) for p in folder.rglob("*.sock"))


def serving(daemon: DaemonProcess, workspace: Workspace, expected: int) -> list[Path]:
    wait_until(lambda: len(sockets(workspace)) == expected or daemon.process.poll() is not None, 30, "sockets")
    assert daemon.process.poll() is None, daemon.log()
    return sockets(workspace)


@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: s.name)
def test_a_signal_that_would_end_the_daemon_stops_it_in_order(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, sig: signal.Signals
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    assert {p.name for p in serving(daemon, workspace, 2)} == {f"{DRIVER}-reg.sock", "dra.sock"}
    code, _ = daemon.signal(sig, timeout=15)
    assert code == 0, daemon.log()
    assert sockets(workspace) == []
    assert f"received {sig.name}, shutting down" in daemon.log()
    assert "Traceback" not in daemon.log()


def test_sighup_is_logged_and_ignored(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    before = serving(daemon, workspace, 2)
    daemon.process.send_signal(signal.SIGHUP)
    daemon.wait_for_log("received SIGHUP; ignored")
    claim = plant_claim(fake_api, "after-hup", None, [result("npu-4")])

    async def scenario(kubelet: DraKubeletSimulator) -> str:
        await kubelet.wait_for_plugin(DRIVER)
        return (await kubelet.prepare([claim]))[claim.uid].error

    assert run_with_kubelet(workspace, fake_api, scenario) == "", "still serving after SIGHUP"
    assert sockets(workspace) == before
    assert daemon.signal(signal.SIGQUIT, timeout=15)[0] == 0
    assert sockets(workspace) == []
