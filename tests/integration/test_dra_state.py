"""Prepared-claim state across crashes, corrupt checkpoints and two overlapping daemons (the state
lock)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
from pathlib import Path
from typing import Any

import grpc

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.daemon import Launcher
from tests.support.dra import (
    DRIVER,
    Workspace,
    allocate,
    async_wait_until,
    claims_in_checkpoint,
    dra_args,
    retry_prepare,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]


def test_a_corrupt_checkpoint_is_moved_aside_and_the_daemon_starts_empty(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    workspace.checkpoint.write_bytes(b'{"version": 1, "claims": {"x": {"state": "Nonsense"')
    daemon = launch_daemon(*dra_args(workspace))
    daemon.wait_for_log("is corrupt")
    [aside] = workspace.state.glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes().startswith(b'{"version": 1')

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "after-corruption")
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        assert set(claims_in_checkpoint(workspace)) == {claim.uid}

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_checkpoint_of_another_version_is_moved_aside(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    workspace.checkpoint.write_text('{"version": 2, "bootId": "b", "claims": {}}')
    launch_daemon(*dra_args(workspace)).wait_for_log("unsupported checkpoint version 2")
    assert len(list(workspace.state.glob("checkpoint.json.corrupt-*"))) == 1


def test_kill_9_during_prepare_then_restart_converges(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    args = dra_args(workspace)
    first = launch_daemon(*args)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "interrupted")
        fake_api.set_latency(2.0)  # the daemon's GET of the claim is in flight when it dies
        pending = asyncio.create_task(kubelet.prepare([claim]))
        await asyncio.sleep(0.5)
        first.kill()
        with contextlib.suppress(grpc.aio.AioRpcError):
            await pending
        fake_api.set_latency(0)
        launch_daemon(*args)
        await async_wait_until(lambda: workspace.registration_socket().exists(), what="the new daemon's socket")
        answer = (await retry_prepare(kubelet, [claim]))[claim.uid]
        assert answer.error == "" and workspace.cdi_file(claim.uid).exists()
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
        assert not workspace.cdi_file(claim.uid).exists()
        assert claims_in_checkpoint(workspace) == {}

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_crash_between_steps_is_cleaned_up_at_start(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """State a kill -9 can leave: a PrepareStarted entry with its CDI file, and a CDI file nobody
    records."""
    started_uid, orphan_uid = "44444444-2222-4333-8444-555555555555", "55555555-2222-4333-8444-555555555555"
    device = {"requestNames": ["npu"], "poolName": "node-a", "deviceName": "npu-0", "cdiDeviceIds": []}
    workspace.checkpoint.write_text(
        json.dumps(
            {
                "version": 1,
                "bootId": "b",
                "claims": {
                    started_uid: {"namespace": "default", "name": "s", "state": "PrepareStarted", "devices": [device]}
                },
            }
        )
    )
    for uid in (started_uid, orphan_uid):
        workspace.cdi_file(uid).write_text("{}")
    launch_daemon(*dra_args(workspace)).wait_for_log("DRA plugin serving")
    assert claims_in_checkpoint(workspace) == {}
    assert not list(workspace.cdi.iterdir())

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "takes-npu-0")
        answer = (await kubelet.prepare([claim]))[claim.uid]
        assert answer.error == "" and answer.devices[0].device_name == "npu-0"

    run_with_kubelet(workspace, fake_api, scenario)


@contextlib.contextmanager
def holding_state_lock(workspace: Workspace) -> Any:
    with (workspace.state / "prepare.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def test_two_daemons_sharing_a_state_dir_take_turns_and_lose_nothing(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace, pod_uid="old"))
    launch_daemon(*dra_args(workspace, pod_uid="new"))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        old = await kubelet.wait_for_plugin(DRIVER, endpoint=str(workspace.dra_socket("old").absolute()))
        new = await kubelet.wait_for_plugin(DRIVER, endpoint=str(workspace.dra_socket("new").absolute()))
        blocked = await allocate(fake_api, "blocked")
        with holding_state_lock(workspace):
            pending = asyncio.create_task(kubelet.prepare([blocked], plugin=old))
            await async_wait_until(lambda: any(r.path.endswith("/resourceclaims/blocked") for r in fake_api.requests))
            await asyncio.sleep(0.3)
            assert not pending.done() and not workspace.cdi_file(blocked.uid).exists()
        assert (await pending)[blocked.uid].error == ""

        claims = [await allocate(fake_api, f"c{i}") for i in range(7)]
        plugins = [old, new] * 4
        answers = await asyncio.gather(*(kubelet.prepare([c], plugin=p) for c, p in zip(claims, plugins, strict=False)))
        assert all(a[c.uid].error == "" for a, c in zip(answers, claims, strict=True))
        assert set(claims_in_checkpoint(workspace)) == {c.uid for c in [blocked, *claims]}
        await asyncio.gather(*(kubelet.unprepare([c], plugin=p) for c, p in zip(claims[:4], plugins, strict=False)))
        assert set(claims_in_checkpoint(workspace)) == {c.uid for c in [blocked, *claims[4:]]}
        assert {p.name for p in workspace.cdi.iterdir()} == {
            Path(workspace.cdi_file(c.uid)).name for c in [blocked, *claims[4:]]
        }

    run_with_kubelet(workspace, fake_api, scenario)
