"""The checkpoint under faults: every kind of corrupt file at start, and a reboot (new boot id,
empty CDI dir)."""

from __future__ import annotations

import json
import re
import shutil
import signal

import pytest

from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator, PrepareResult
from npu_plugin.sim.scheduler import DeviceRequest
from tests.support.daemon import Launcher
from tests.support.dra import (
    DRIVER,
    Workspace,
    allocate,
    claims_in_checkpoint,
    dra_args,
    plant_claim,
    result,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
DEVICE = {"requestNames": ["npu"], "poolName": "node-a", "deviceName": "npu-0", "cdiDeviceIds": []}
ENTRY = {"namespace": "default", "name": "c", "state": "PrepareCompleted", "devices": [DEVICE]}
UID = "44444444-2222-4333-8444-555555555555"


def document(claims: object, version: object = 1) -> bytes:
    return json.dumps({"version": version, "bootId": "b", "claims": claims}).encode()


# test_dra_state covers a truncated file and version 2; these are the other ways a file goes bad.
CORRUPT = {
    "garbage": bytes(range(256)) * 4,
    "empty": b"",
    "not-utf8": b'{"version": 1, "bootId": "\xff\xfe", "claims": {}}',
    "truncated-mid-entry": document({UID: ENTRY})[:-40],
    "top-level-array": b"[1, 2, 3]",
    "version-as-string": document({}, version="1"),
    "claims-as-list": document([ENTRY]),
    "entry-of-wrong-type": document({UID: "PrepareCompleted"}),
    "device-of-wrong-type": document({UID: {**ENTRY, "devices": ["npu-0"]}}),
    "device-name-of-wrong-type": document({UID: {**ENTRY, "devices": [{**DEVICE, "deviceName": 0}]}}),
}


@pytest.mark.parametrize("content", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_checkpoint_is_moved_aside_loudly_and_the_daemon_serves_empty(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, content: bytes
) -> None:
    workspace.checkpoint.write_bytes(content)
    daemon = launch_daemon(*dra_args(workspace))
    daemon.wait_for_log("is corrupt")
    [line] = [line for line in daemon.log().splitlines() if "is corrupt" in line]
    assert " ERROR " in line and "starting with no prepared claims" in line
    [aside] = workspace.state.glob("checkpoint.json.corrupt-*")
    assert re.fullmatch(r"checkpoint\.json\.corrupt-\d{8}T\d{6}", aside.name)
    assert aside.read_bytes() == content, "the evidence is kept as it was"

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        # npu-0 was held in some of the corrupt files; starting empty means it is free.
        claim = plant_claim(fake_api, "after", None, [result("npu-0")])
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        assert set(claims_in_checkpoint(workspace)) == {claim.uid}

    run_with_kubelet(workspace, fake_api, scenario)
    assert daemon.process.poll() is None


def reboot(workspace: Workspace) -> None:
    """What a reboot does to the node: a new boot id, and /var/run/cdi (a tmpfs) comes back
    empty."""
    stored = json.loads(workspace.checkpoint.read_text())
    workspace.checkpoint.write_text(json.dumps({**stored, "bootId": "the-boot-before"}))
    shutil.rmtree(workspace.cdi)
    workspace.cdi.mkdir()


def test_after_a_reboot_the_kubelet_prepares_again_and_gets_the_same_answers(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    first = launch_daemon(*dra_args(workspace))

    async def before_reboot(kubelet: DraKubeletSimulator) -> tuple[list[Claim], dict[str, PrepareResult]]:
        await kubelet.wait_for_plugin(DRIVER)
        claims = [
            await allocate(fake_api, "train", DeviceRequest("npu", count=2), DeviceRequest("aux")),
            await allocate(fake_api, "infer"),
        ]
        answers = await kubelet.prepare(claims)
        assert all(a.error == "" for a in answers.values())
        return claims, answers

    claims, answers = run_with_kubelet(workspace, fake_api, before_reboot)
    files = {c.uid: workspace.cdi_file(c.uid).read_bytes() for c in claims}
    assert first.signal(signal.SIGTERM, timeout=10)[0] == 0
    reboot(workspace)
    second = launch_daemon(*dra_args(workspace))

    async def after_reboot(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        # Until the kubelet prepares them again, the claims of the earlier boot keep their devices.
        rival = plant_claim(fake_api, "rival", None, [result("npu-0")])
        assert "already prepared for claim" in (await kubelet.prepare([rival]))[rival.uid].error
        assert await kubelet.prepare(claims) == answers
        assert {c.uid: workspace.cdi_file(c.uid).read_bytes() for c in claims} == files

    run_with_kubelet(workspace, fake_api, after_reboot)
    second.wait_for_log("checkpoint is from an earlier boot")
    assert json.loads(workspace.checkpoint.read_text())["bootId"] != "the-boot-before"
