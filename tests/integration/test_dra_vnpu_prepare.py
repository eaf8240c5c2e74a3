"""Prepare and Unprepare of vNPUs against a real daemon (`serve --mode dra --vnpu dynamic`, fake
backend with its simulated hardware in hw.json), the fake API and the DRA kubelet simulator,
including `kill -9` at each point of the crash table: an interrupted Prepare's vNPU is destroyed
before the DRA socket answers, a prepared claim's vNPU is kept, and the kubelet's retries
converge."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from npu_plugin.host.boot import read_boot_id
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from npu_plugin.sim.scheduler import DeviceRequest
from tests.support.daemon import DaemonProcess, Launcher
from tests.support.dra import (
    DRIVER,
    Workspace,
    allocate,
    async_wait_until,
    claims_in_checkpoint,
    dra_args,
    node_slices,
    plant_claim,
    published_names,
    result,
    retry_prepare,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
V05 = "vir05_1c_16g"


def hw_path(workspace: Workspace) -> Path:
    return workspace.root / "hw.json"


def vnpu_args(workspace: Workspace) -> list[str]:
    """The workspace's DRA daemon on the atlas-800t-a2 profile (which carries the vNPU tables),
    --vnpu dynamic."""
    args = dra_args(workspace, "--vnpu", "dynamic", "--fake-vnpu-state", str(hw_path(workspace)))
    at = args.index("--fake-inventory")
    return [*args[:at], "--fake-profile", "atlas-800t-a2", *args[at + 2 :]]


def hardware(workspace: Workspace) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(hw_path(workspace).read_text())
    return document


def write_hardware(workspace: Workspace, **fields: Any) -> None:
    document = {"bootId": read_boot_id(), "recover": True, "vnpus": {}, "faults": {}} | fields
    hw_path(workspace).write_text(json.dumps(document))


def live(workspace: Workspace) -> dict[str, list[dict[str, Any]]]:
    return {chip: held for chip, held in hardware(workspace)["vnpus"].items() if held}


def vnpu_claim(api: FakeKubeAPI, name: str, device: str) -> Claim:
    return plant_claim(api, name, None, [result(device, "vnpu")])


class Node:
    """One daemon at a time in the workspace, started and stopped (or killed) by its pid."""

    def __init__(self, workspace: Workspace, launch: Launcher, kubelet: DraKubeletSimulator) -> None:
        self.workspace, self.launch, self.kubelet = workspace, launch, kubelet
        self.daemon: DaemonProcess | None = None

    async def start(self, crash_at: str | None = None) -> None:
        """`crash_at` names the point where the daemon kills itself (see
        tests/support/crash_point.py)."""
        before = sum(a.registered for a in self.kubelet.attempts)
        wrapper = [sys.executable, "-m", "tests.support.crash_point", crash_at] if crash_at else []
        self.daemon = self.launch(*vnpu_args(self.workspace), wrapper=wrapper)
        await self.kubelet.wait_for(lambda: sum(a.registered for a in self.kubelet.attempts) > before, timeout=20)

    def kill(self) -> None:
        assert self.daemon is not None
        self.daemon.kill()


def test_prepare_creates_and_unprepare_destroys_a_vnpu(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    first = vnpu_claim(fake_api, "first", "npu-0-vir05-1c-16g-0")
    second = vnpu_claim(fake_api, "second", "npu-0-vir05-1c-16g-1")
    on_four = vnpu_claim(fake_api, "four", "npu-4-vir05-1c-16g-0")
    failing = vnpu_claim(fake_api, "failing", "npu-2-vir05-1c-16g-0")
    whole = plant_claim(fake_api, "whole", None, [result("npu-0")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        # A16: the vNPU, its node, its CDI spec and its record.
        answer = (await kubelet.prepare([first]))[first.uid]
        assert answer.error == ""
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        assert (workspace.dev / "vdavinci100").exists()
        edits = workspace.cdi_spec(first.uid)["devices"][0]["containerEdits"]
        assert edits["env"] == ["ASCEND_VISIBLE_DEVICES=100", "ASCEND_RUNTIME_OPTIONS=VIRTUAL"]
        assert edits["deviceNodes"][0] == {
            "path": "/dev/davinci100",
            "hostPath": f"{workspace.dev}/vdavinci100",
            "permissions": "rw",
        }
        assert "ASCEND_VNPU_SPECS" not in workspace.cdi_file(first.uid).read_text()
        entry = claims_in_checkpoint(workspace)[first.uid]
        assert entry["state"] == "PrepareCompleted"
        assert entry["devices"][0]["vnpu"] == {"physicalId": 0, "template": V05, "vnpuId": 100, "origin": "dynamic"}
        # A17: the same answer again, and no second vNPU.
        assert (await kubelet.prepare([first]))[first.uid] == answer
        # A18: the next id of chip 0; chip 4's range starts at 164.
        answers = await kubelet.prepare([second, on_four])
        assert answers[second.uid].error == answers[on_four.uid].error == ""
        assert [v["vnpuId"] for v in live(workspace)["0"]] == [100, 101]
        assert [v["vnpuId"] for v in live(workspace)["4"]] == [164]
        # A25: the whole chip while its vNPUs are prepared.
        refused = (await kubelet.prepare([whole]))[whole.uid].error
        assert "overlapping allocation on npu-0" in refused and "DRAPartitionableDevices" in refused
        # A20: a refused create fails that claim alone and leaves nothing.
        hardware_now = hardware(workspace)
        write_hardware(workspace, vnpus=hardware_now["vnpus"], faults={"createError": -8005})
        answers = await kubelet.prepare([failing])
        assert "-8005" in answers[failing.uid].error and "npu-2" in answers[failing.uid].error
        assert "2" not in live(workspace) and failing.uid not in claims_in_checkpoint(workspace)
        assert not workspace.cdi_file(failing.uid).exists()
        # A19: Unprepare destroys the vNPU and its node, then forgets the claim; again is fine.
        assert await kubelet.unprepare([first]) == {first.uid: ""}
        assert [v["vnpuId"] for v in live(workspace)["0"]] == [101]
        assert not (workspace.dev / "vdavinci100").exists()
        assert not workspace.cdi_file(first.uid).exists() and first.uid not in claims_in_checkpoint(workspace)
        assert await kubelet.unprepare([first]) == {first.uid: ""}

    run_with_kubelet(workspace, fake_api, scenario)


@pytest.mark.parametrize(
    ("faults", "made"),
    [({"createDelaySeconds": 30}, False), ({"hangCreate": True}, True), ({"nodeDelaySeconds": 30}, True)],
    ids=["after-started-before-create", "after-create-before-cdi", "waiting-for-the-node"],
)
def test_kill_9_during_prepare_destroys_the_vnpu_before_serving_and_the_retry_creates_it_again(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, faults: dict[str, Any], made: bool
) -> None:
    claim = vnpu_claim(fake_api, "c", "npu-0-vir05-1c-16g-0")
    write_hardware(workspace, faults=faults)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        call = asyncio.ensure_future(kubelet.prepare([claim]))
        await async_wait_until(
            lambda: workspace.checkpoint.exists() and claim.uid in claims_in_checkpoint(workspace),
            what="the PrepareStarted record",
        )
        if made:
            await async_wait_until(lambda: "0" in live(workspace), what="the vNPU")
        assert claims_in_checkpoint(workspace)[claim.uid]["state"] == "PrepareStarted"
        node.kill()
        await asyncio.gather(call, return_exceptions=True)
        write_hardware(workspace, vnpus=hardware(workspace)["vnpus"])  # the fault cleared
        await node.start()
        # Start-up reconciliation ran before the DRA socket was served.
        assert live(workspace) == {} and not (workspace.dev / "vdavinci100").exists()
        assert claim.uid not in claims_in_checkpoint(workspace)
        assert node.daemon is not None
        log = node.daemon.log()
        destroyed = "destroyed vNPU 100 on npu-0" if made else "vNPU 100 on npu-0 is already gone"
        assert -1 < log.find(destroyed) < log.find("DRA plugin serving on"), log
        answer = (await retry_prepare(kubelet, [claim]))[claim.uid]
        assert answer.error == ""
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        assert claims_in_checkpoint(workspace)[claim.uid]["state"] == "PrepareCompleted"

    run_with_kubelet(workspace, fake_api, scenario)


def test_kill_9_after_the_cdi_file_before_completion_destroys_the_vnpu_and_removes_the_file(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    claim = vnpu_claim(fake_api, "c", "npu-0-vir05-1c-16g-0")

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        # The daemon dies by SIGKILL in the write that would record PrepareCompleted.
        await node.start(crash_at="prepare-completed")
        with pytest.raises(grpc.aio.AioRpcError):  # the connection drops: no answer
            await kubelet.prepare([claim])
        assert node.daemon is not None and node.daemon.process.wait(10) == -signal.SIGKILL
        assert claims_in_checkpoint(workspace)[claim.uid]["state"] == "PrepareStarted"
        assert workspace.cdi_file(claim.uid).exists() and live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        await node.start()
        assert live(workspace) == {} and not (workspace.dev / "vdavinci100").exists()
        assert not workspace.cdi_file(claim.uid).exists() and claim.uid not in claims_in_checkpoint(workspace)
        log = node.daemon.log()
        cleaned = [log.find(line) for line in ("destroyed vNPU 100 on npu-0", "removing orphaned CDI spec")]
        assert -1 < max(cleaned) < log.find("DRA plugin serving on"), log
        assert (await retry_prepare(kubelet, [claim]))[claim.uid].error == ""
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]} and workspace.cdi_file(claim.uid).exists()
        assert claims_in_checkpoint(workspace)[claim.uid]["state"] == "PrepareCompleted"

    run_with_kubelet(workspace, fake_api, scenario)


def test_kill_9_after_prepare_keeps_the_vnpu_and_a_destroyed_one_unprepares_fine(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    claim = vnpu_claim(fake_api, "c", "npu-0-vir05-1c-16g-0")

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        answer = (await kubelet.prepare([claim]))[claim.uid]
        node.kill()
        # The daemon dies by SIGKILL in Unprepare's write that would drop the entry, after the
        # destroy.
        await node.start(crash_at="unprepare-removed")
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        assert (await retry_prepare(kubelet, [claim]))[claim.uid] == answer
        with pytest.raises(grpc.aio.AioRpcError):
            await kubelet.unprepare([claim])
        assert node.daemon is not None and node.daemon.process.wait(10) == -signal.SIGKILL
        assert live(workspace) == {} and claims_in_checkpoint(workspace)[claim.uid]["state"] == "PrepareCompleted"
        await node.start()
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
        assert claim.uid not in claims_in_checkpoint(workspace) and live(workspace) == {}

    run_with_kubelet(workspace, fake_api, scenario)


@pytest.mark.parametrize("recover", [True, False], ids=["recover-on", "recover-off"])
def test_after_a_reboot_the_vnpu_is_kept_or_created_again_with_its_id(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, recover: bool
) -> None:
    claim = vnpu_claim(fake_api, "c", "npu-0-vir05-1c-16g-0")

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        answer = (await kubelet.prepare([claim]))[claim.uid]
        node.kill()
        write_hardware(workspace, bootId="before", recover=recover, vnpus=hardware(workspace)["vnpus"])
        checkpoint = json.loads(workspace.checkpoint.read_text()) | {"bootId": "before"}
        workspace.checkpoint.write_text(json.dumps(checkpoint))
        if not recover:
            workspace.cdi_file(claim.uid).unlink()  # the spec must be written again with the re-created vNPU
        await node.start()
        assert live(workspace) == ({"0": [{"vnpuId": 100, "template": V05}]} if recover else {})
        assert (await retry_prepare(kubelet, [claim]))[claim.uid] == answer
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        assert (workspace.dev / "vdavinci100").exists() and workspace.cdi_file(claim.uid).exists()

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_foreign_vnpu_survives_start_up_and_is_served_by_its_id(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(36)  # DRAPartitionableDevices on: the other chips publish candidates
    write_hardware(workspace, vnpus={"0": [{"vnpuId": 102, "template": V05}]})
    (workspace.dev / "vdavinci102").touch()
    candidate = vnpu_claim(fake_api, "candidate", "npu-0-vir05-1c-16g-0")
    static = vnpu_claim(fake_api, "static", "npu-0-vnpu-102")

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        assert node.daemon is not None
        await asyncio.to_thread(node.daemon.wait_for_log, "npu-0 holds vNPUs not created by npu-plugin (102)")
        # Chip 0 is served statically: its vNPU by id, neither whole nor split on demand; chip 1 is
        # split.
        await async_wait_until(lambda: "npu-1-vir05-1c-16g-0" in published_names(fake_api), what="the pool")
        chip0 = [n for n in published_names(fake_api) if n == "npu-0" or n.startswith("npu-0-")]
        assert chip0 == ["npu-0-vnpu-102"]
        counter_sets = [c["name"] for s in node_slices(fake_api) for c in s["spec"].get("sharedCounters", [])]
        assert "npu-0-counters" not in counter_sets and "npu-1-counters" in counter_sets
        answers = await kubelet.prepare([candidate, static])
        assert "npu-0 is not split on demand" in answers[candidate.uid].error
        assert answers[static.uid].error == ""
        assert workspace.cdi_spec(static.uid)["devices"][0]["containerEdits"]["env"][0] == "ASCEND_VISIBLE_DEVICES=102"
        assert await kubelet.unprepare([static]) == {static.uid: ""}
        assert live(workspace) == {"0": [{"vnpuId": 102, "template": V05}]}

    run_with_kubelet(workspace, fake_api, scenario)


def test_vnpus_the_scheduler_allocates_from_the_published_slices_are_created_where_it_packed_them(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:  # A12 through the scheduler stand-in, then A16/A18 on its results
    fake_api.set_kubernetes_version(36)  # DRAPartitionableDevices on by default
    template = f'device.attributes["{DRIVER}"].vnpuTemplate'
    small = DeviceRequest("vnpu", selectors=(f'has({template}) && {template} == "{V05}"',))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        claims = [await allocate(fake_api, f"small-{i}", small) for i in range(5)]
        answers = await kubelet.prepare(claims)
        devices = [answers[c.uid].devices[0].device_name for c in claims]
        assert devices == [*(f"npu-0-vir05-1c-16g-{k}" for k in range(4)), "npu-1-vir05-1c-16g-0"]
        assert [v["vnpuId"] for v in live(workspace)["0"]] == [100, 101, 102, 103]
        assert [v["vnpuId"] for v in live(workspace)["1"]] == [116]
        assert await kubelet.unprepare(claims) == {c.uid: "" for c in claims}
        assert live(workspace) == {}

    run_with_kubelet(workspace, fake_api, scenario)


def test_refusals_and_a_busy_vnpu_reach_the_kubelet_per_claim(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """A25: each refusal is a per-claim error naming the device. A21: a busy vNPU fails Unprepare
    twice and the third succeeds. Unprepare tries each destroy three times (1 s apart) within one
    call, so "busy for two Unprepares" is `destroyBusy: 6`, six failing destroy calls; with 2 the
    first Unprepare would succeed."""
    shared_body = {
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": {"devices": {}},
        "status": {
            "allocation": {"devices": {"results": [result("npu-3-vir05-1c-16g-0", "vnpu")]}},
            "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"pod-{i}"} for i in range(2)],
        },
    }
    shared = Claim("default", "shared", fake_api.put_object("ResourceClaim", shared_body)["metadata"]["uid"])
    refused = {
        "two": (
            plant_claim(
                fake_api, "two", None, [result("npu-2-vir05-1c-16g-0", "v"), result("npu-2-vir05-1c-16g-1", "v")]
            ),
            "request 'v' holds more than one vNPU",
        ),
        "mixed": (
            plant_claim(fake_api, "mixed", None, [result("npu-2-vir05-1c-16g-0", "v"), result("npu-1", "v")]),
            "a vNPU together with whole NPUs",
        ),
        "k": (vnpu_claim(fake_api, "k", "npu-0-vir05-1c-16g-4"), "npu-0-vir05-1c-16g-4: chip npu-0 holds 4"),
        "template": (vnpu_claim(fake_api, "template", "npu-0-vir07-0"), "npu-0-vir07-0: chip npu-0 offers no"),
        "shared": (shared, "device npu-3-vir05-1c-16g-0 (a vNPU of npu-3) is reserved for 2 consumers"),
    }
    busy = vnpu_claim(fake_api, "busy", "npu-0-vir05-1c-16g-0")
    whole = plant_claim(fake_api, "whole", None, [result("npu-0")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        answers = await kubelet.prepare([claim for claim, _ in refused.values()])
        for claim, reason in refused.values():
            assert reason in answers[claim.uid].error, answers[claim.uid].error
        assert live(workspace) == {} and not workspace.checkpoint.exists()  # nothing recorded, nothing made
        assert (await kubelet.prepare([busy]))[busy.uid].error == ""
        write_hardware(workspace, vnpus=hardware(workspace)["vnpus"], faults={"destroyBusy": 6})
        for _ in range(2):
            error = (await kubelet.unprepare([busy]))[busy.uid]
            assert "vNPU 100" in error and "-8020" in error
            assert busy.uid in claims_in_checkpoint(workspace)
            assert "overlapping allocation on npu-0" in (await kubelet.prepare([whole]))[whole.uid].error
        assert await kubelet.unprepare([busy]) == {busy.uid: ""}
        assert (await kubelet.prepare([whole]))[whole.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_corrupt_hardware_state_fails_the_claim_naming_the_file_and_the_daemon_keeps_serving(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    claim = vnpu_claim(fake_api, "c", "npu-0-vir05-1c-16g-0")
    write_hardware(workspace)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        node = Node(workspace, launch_daemon, kubelet)
        await node.start()
        good = hw_path(workspace).read_text()
        hw_path(workspace).write_text("{not json")
        error = (await kubelet.prepare([claim]))[claim.uid].error
        assert f"fake vNPU state {hw_path(workspace)} is corrupt" in error, error
        assert claim.uid not in (claims_in_checkpoint(workspace) if workspace.checkpoint.exists() else {})
        assert not workspace.cdi_file(claim.uid).exists() and not (workspace.dev / "vdavinci100").exists()
        hw_path(workspace).write_text(good)
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        assert live(workspace) == {"0": [{"vnpuId": 100, "template": V05}]}
        assert node.daemon is not None and "Traceback" not in node.daemon.log()

    run_with_kubelet(workspace, fake_api, scenario)
