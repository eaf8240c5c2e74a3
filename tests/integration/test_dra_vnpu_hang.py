"""A vNPU create that hangs, against a real daemon (`serve --mode dra --vnpu dynamic`, the fake
backend's simulated hardware with `hangCreate`), the fake API and the DRA kubelet simulator: the
hung claim gets its own error before the kubelet's deadline, and the daemon keeps serving meanwhile
(other claims, slices, retries); after `kill -9` start-up destroys the vNPU, and when the create
returns while serving, the claim is released."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

import yaml

from npu_plugin.ascend.device import Device
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.integration.test_dra_vnpu_prepare import V05, hardware, hw_path, live, vnpu_claim, write_hardware
from tests.support.daemon import DaemonProcess, Launcher
from tests.support.dra import (
    Workspace,
    async_wait_until,
    claims_in_checkpoint,
    dra_args,
    plant_claim,
    published_names,
    result,
    retry_prepare,
    run_with_kubelet,
    with_health,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
PROFILE = profile_inventory("atlas-800t-a2")
# The test client's gRPC deadline, short so the test is quick; the daemon answers MARGIN_SECONDS
# before it.
DEADLINE_SECONDS = 6.0
HUNG = "creating vNPU vir05_1c_16g on npu-0 (id 100): the driver did not answer within"
STILL = "vNPU vir05_1c_16g on npu-0 (id 100) is still being created"


def write_inventory(workspace: Workspace, devices: Sequence[Device]) -> None:
    """The Atlas 800T A2 with its vNPU tables, replaced in one rename."""
    temporary = workspace.inventory.with_name(".inventory.tmp")
    temporary.write_text(yaml.safe_dump(inventory_document(devices, PROFILE.vnpu), sort_keys=False))
    os.replace(temporary, workspace.inventory)


async def start(workspace: Workspace, launch: Launcher, kubelet: DraKubeletSimulator) -> DaemonProcess:
    before = sum(a.registered for a in kubelet.attempts)
    daemon = launch(*dra_args(workspace, "--vnpu", "dynamic", "--fake-vnpu-state", str(hw_path(workspace))))
    await kubelet.wait_for(lambda: sum(a.registered for a in kubelet.attempts) > before, timeout=20)
    return daemon


def test_a_hung_create_fails_its_claim_in_time_and_the_daemon_keeps_serving(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    write_inventory(workspace, PROFILE.devices)
    hung = vnpu_claim(fake_api, "hung", "npu-0-vir05-1c-16g-0")
    whole = plant_claim(fake_api, "whole", None, [result("npu-1")])
    on_four = vnpu_claim(fake_api, "four", "npu-4-vir05-1c-16g-0")
    write_hardware(workspace, faults={"hangCreate": [0]})  # creates on chip 0 hang, the others do not

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        daemon = await start(workspace, launch_daemon, kubelet)
        await async_wait_until(lambda: "npu-3" in published_names(fake_api), what="npu-3 published")
        # (a) The hung claim's own error, before the call's deadline (a late answer would be
        # DeadlineExceeded).
        began = time.monotonic()
        answer = (await kubelet.prepare([hung], timeout=DEADLINE_SECONDS))[hung.uid]
        assert HUNG in answer.error and time.monotonic() - began < DEADLINE_SECONDS
        assert claims_in_checkpoint(workspace)[hung.uid]["state"] == "PrepareStarted"
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        # (b) Meanwhile other chips' claims, a whole NPU and a vNPU, prepare and unprepare.
        answers = await kubelet.prepare([whole, on_four], timeout=DEADLINE_SECONDS)
        assert answers[whole.uid].error == answers[on_four.uid].error == ""
        assert live(workspace)["4"] == [{"vnpuId": 164, "template": V05}]
        assert await kubelet.unprepare([whole, on_four]) == {whole.uid: "", on_four.uid: ""}
        assert "4" not in live(workspace)
        # (c) A health change still reaches the ResourceSlices.
        write_inventory(workspace, with_health(PROFILE.devices, {3}))
        await async_wait_until(lambda: "npu-3" not in published_names(fake_api), what="unhealthy npu-3 withdrawn")
        # (d) The kubelet's retry is told the create is still running; no second create is made.
        again = (await kubelet.prepare([hung], timeout=DEADLINE_SECONDS))[hung.uid]
        assert STILL in again.error
        assert STILL in (await kubelet.unprepare([hung]))[hung.uid]
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        # (e) kill -9 with the create still hung; restarted with the fault cleared, start-up
        # destroys the vNPU before serving, and the claim prepares.
        daemon.kill()
        write_hardware(workspace, vnpus=hardware(workspace)["vnpus"])
        daemon = await start(workspace, launch_daemon, kubelet)
        log = daemon.log()
        assert -1 < log.find("destroyed vNPU 100 on npu-0") < log.find("DRA plugin serving on"), log
        assert hung.uid not in claims_in_checkpoint(workspace)
        assert (await retry_prepare(kubelet, [hung]))[hung.uid].error == ""
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_create_returning_after_its_claim_was_answered_releases_the_claim_while_serving(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    write_inventory(workspace, PROFILE.devices)
    hung = vnpu_claim(fake_api, "hung", "npu-0-vir05-1c-16g-0")
    write_hardware(workspace, faults={"hangCreate": True})

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        daemon = await start(workspace, launch_daemon, kubelet)
        assert HUNG in (await kubelet.prepare([hung], timeout=DEADLINE_SECONDS))[hung.uid].error
        write_hardware(workspace, vnpus=hardware(workspace)["vnpus"])  # the driver answers at last
        await async_wait_until(lambda: hung.uid not in claims_in_checkpoint(workspace), what="the claim released")
        assert live(workspace) == {} and not (workspace.dev / "vdavinci100").exists()
        await asyncio.to_thread(daemon.wait_for_log, "its vNPUs are destroyed and the claim released")
        answer = (await kubelet.prepare([hung], timeout=DEADLINE_SECONDS))[hung.uid]
        assert answer.error == ""
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        assert claims_in_checkpoint(workspace)[hung.uid]["state"] == "PrepareCompleted"

    run_with_kubelet(workspace, fake_api, scenario)
