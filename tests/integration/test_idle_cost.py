"""At rest nothing is re-announced: health passes over an unchanged node notify no server, and one
pass is one backend call for every device. Events are counted, never time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.container_edits import Injection, probe_host
from npu_plugin.ascend.device import Device, Health, LinkState
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.backends.npusmi.backend import NpuSmiBackend
from npu_plugin.deviceplugin.listing import DeviceListing
from npu_plugin.deviceplugin.service import DevicePluginService
from npu_plugin.inventory.health_feed import HealthMonitor
from npu_plugin.inventory.state import Inventory
from tests.support.daemon import populate_dev_root, write_inventory
from tests.support.fake_devices import profile_devices
from tests.support.fake_hardware import NO_HCCN_TOOL, fake_hccn_tool, fake_npu_smi, script

DEVICES = profile_devices("atlas-800t-a2")
PASSES = 20
# Counts its runs in a file beside it, then answers as the fixture-driven fake does.
COUNTING_NPU_SMI = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/runs"
exec "$(dirname "$0")/fixture/npu-smi" "$@"
"""


def critical(physical_id: int) -> list[Device]:
    return [replace(d, health=Health.CRITICAL) if d.physical_id == physical_id else d for d in DEVICES]


async def settle() -> None:
    """Let every task woken by the last step run (a few loop turns, not a clock)."""
    for _ in range(10):
        await asyncio.sleep(0)


class FakeContext:
    """The one thing ListAndWatch asks of its gRPC context: nothing; it only streams."""


def test_health_passes_over_an_unchanged_node_notify_no_server(tmp_path: Path) -> None:
    async def scenario() -> None:
        inventory_file = tmp_path / "inventory.yaml"
        write_inventory(inventory_file, DEVICES)
        dev_root = populate_dev_root(tmp_path / "dev")
        backend = FakeBackend(inventory_path=inventory_file)
        inventory = Inventory(backend.discover(), failure_threshold=2, recovery_threshold=3)
        monitor = HealthMonitor(backend, inventory, dev_root, interval=3600)
        service = DevicePluginService(
            DeviceListing(inventory), probe_host(dev_root, Injection.NODES, False), "Ascend910B", None
        )
        snapshots: list[int] = []
        messages: list[pb.ListAndWatchResponse] = []

        async def follow_inventory() -> None:
            async for snapshot in inventory.watch():
                snapshots.append(snapshot.version)

        async def follow_list_and_watch() -> None:
            async for message in service.ListAndWatch(pb.Empty(), FakeContext()):  # type: ignore[arg-type]
                messages.append(message)

        followers = [asyncio.create_task(follow_inventory()), asyncio.create_task(follow_list_and_watch())]
        await settle()
        for _ in range(PASSES):
            await monitor.sample_once()
            await settle()
        assert (snapshots, len(messages)) == ([0], 1), "only the first snapshot and the first ListAndWatch message"
        write_inventory(inventory_file, critical(3))
        inventory.update_devices(backend.reload())  # what the daemon's watch of the file does on a change
        for _ in range(2):  # the failure threshold
            await monitor.sample_once()
            await settle()
        # The first bad sample changes the device's last level (a new snapshot), the second its
        # verdict; the kubelet hears about the verdict only.
        assert (snapshots, len(messages)) == ([0, 1, 2], 2)
        assert [d.health for d in messages[-1].devices if d.ID == "Ascend910-3"] == ["Unhealthy"]
        service.close_streams()
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)

    asyncio.run(scenario())


def test_one_npu_smi_health_pass_is_one_run_for_every_device(tmp_path: Path) -> None:
    fake_npu_smi(tmp_path / "fixture", "910b3-x8.info.txt", "910b3-x8.mapping.txt", "910b3-x8.topo.txt")
    backend = NpuSmiBackend(str(script(tmp_path / "npu-smi", COUNTING_NPU_SMI)), hccn_tool=NO_HCCN_TOOL)
    devices = backend.discover()
    runs = tmp_path / "runs"
    before = runs.read_text().splitlines()
    for _ in range(3):
        assert len(backend.sample()) == len(devices) == 8
    assert runs.read_text().splitlines()[len(before) :] == ["info"] * 3


def test_link_health_rides_the_health_pass_and_skips_devices_without_roce(tmp_path: Path) -> None:
    """One pass asks each RoCE die's link once, in the same pass (no wake-up of its own); a 310P
    node is never asked; with npu-smi that is one hccn_tool run per 910 die per pass."""

    class Counting(FakeBackend):
        asked: list[list[int]]

        def link_states(self, physical_ids: Iterable[int]) -> dict[int, LinkState]:
            self.asked.append(sorted(physical_ids))
            return super().link_states(physical_ids)

    async def passes(profile: str) -> list[list[int]]:
        backend = Counting(profile=profile)
        backend.asked = []
        inventory = Inventory(backend.discover(), failure_threshold=2, recovery_threshold=3)
        monitor = HealthMonitor(backend, inventory, tmp_path, interval=3600)
        for _ in range(3):
            await monitor.sample_once()
        return backend.asked

    assert asyncio.run(passes("atlas-800t-a2")) == [list(range(8))] * 3
    assert asyncio.run(passes("atlas-300i-duo")) == []

    fake_npu_smi(tmp_path / "fixture", "910b3-x8.info.txt", "910b3-x8.mapping.txt", "910b3-x8.topo.txt")
    hccn = fake_hccn_tool(tmp_path / "hccn")
    for physical_id in range(8):
        (hccn.parent / f"net_health-{physical_id}.txt").write_text("net health status: Success\n")
    npu_smi = NpuSmiBackend(str(script(tmp_path / "npu-smi", COUNTING_NPU_SMI)), hccn_tool=str(hccn))
    inventory = Inventory(npu_smi.discover(), failure_threshold=2, recovery_threshold=3)
    (hccn.parent / "runs.log").unlink()
    runs_before = (tmp_path / "runs").read_text().splitlines()
    asyncio.run(HealthMonitor(npu_smi, inventory, tmp_path, interval=3600).sample_once())
    assert (tmp_path / "runs").read_text().splitlines()[len(runs_before) :] == ["info"]
    assert (hccn.parent / "runs.log").read_text().splitlines() == [f"-i {i} -net_health -g" for i in range(8)]
