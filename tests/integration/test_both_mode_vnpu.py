"""Both mode with vNPUs, the device-plugin side: the chip stays the unit of ownership, the device
plugin serves the vNPUs of its own chips, and a vNPU a container holds keeps its chip on the device
plugin (A30)."""

from __future__ import annotations

import asyncio
import json
import signal
from dataclasses import replace

import yaml

from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.handover.podresources import dra_chip
from npu_plugin.sim.dra_kubelet import Claim
from tests.integration.test_device_plugin_vnpu import replace_vnpus, state_reads
from tests.integration.test_observability import OBSERVED, endpoints_of, until_metric
from tests.support.both import both_args, node, registered
from tests.support.daemon import Launcher
from tests.support.dra import (
    Workspace,
    async_wait_until,
    node_slices,
    plant_claim,
    published_names,
    result,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
LARGE = "huawei.com/Ascend910-10c.3cpu.32g"
VNPU_180 = "Ascend910-10c.3cpu.32g-180-5"


def write_inventory_with_vnpu_180(workspace: Workspace) -> None:
    """The Atlas 800T A2 with a static vNPU 180 (vir10_3c_32g) on chip 5."""
    profile = profile_inventory("atlas-800t-a2")
    chips = {p: replace(c, vnpus=(Vnpu(5, 180, "vir10_3c_32g"),) if p == 5 else ()) for p, c in profile.vnpu.items()}
    workspace.inventory.write_text(yaml.safe_dump(inventory_document(profile.devices, chips), sort_keys=False))


def args(workspace: Workspace, dra_devices: str) -> list[str]:
    state = workspace.root / "hw.json"
    return [*both_args(workspace, dra_devices), "--vnpu", "dynamic", "--fake-vnpu-state", str(state)]


def test_a30_the_device_plugin_serves_its_chips_vnpus_and_never_a_split_chip_whole(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(35, partitionable_devices=True)

    async def scenario() -> None:
        write_inventory_with_vnpu_180(workspace)
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*args(workspace, "0-3"))
            await registered(sim, daemon)
            await async_wait_until(lambda: LARGE in sim.kubelet.plugins, what="the vNPU resource")
            large = sim.kubelet.plugins[LARGE]
            await async_wait_until(lambda: bool(large.devices), what="vNPU 180 listed")
            assert sorted(large.devices) == [VNPU_180]
            assert sorted(sim.listed()) == ["Ascend910-4", "Ascend910-6", "Ascend910-7"]
            await async_wait_until(lambda: "npu-0-vir05-1c-16g-0" in published_names(fake_api), what="candidates")
            chips = {dra_chip(name) for name in published_names(fake_api)}
            assert chips == {0, 1, 2, 3}, "DRA publishes candidates and whole NPUs of its own chips only"
            counter_sets = {c["name"] for s in node_slices(fake_api) for c in s["spec"].get("sharedCounters") or []}
            assert counter_sets == {f"npu-{p}-counters" for p in range(4)}

            claim = plant_claim(fake_api, "dp-vnpu", None, [result("npu-5-vnpu-180")])
            answer = (await sim.dra.prepare([claim]))[claim.uid]
            assert "owned by device-plugin" in answer.error

    asyncio.run(scenario())


def test_a_vnpu_a_container_holds_keeps_its_chip_with_the_device_plugin_until_the_pod_ends(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        write_inventory_with_vnpu_180(workspace)
        async with node(workspace, fake_api) as sim:
            sim.pod_resources.hold_devices("default", "infer", "main", [VNPU_180], resource=LARGE)
            daemon = launch_daemon(*args(workspace, "4-7"))
            await registered(sim, daemon)
            await async_wait_until(lambda: LARGE in sim.kubelet.plugins, what="the vNPU resource")
            large = sim.kubelet.plugins[LARGE]
            await async_wait_until(lambda: bool(large.devices), what="vNPU 180 listed")
            # Still the device plugin's for the running pod, but offered to no new one.
            assert large.devices[VNPU_180].health == "Unhealthy"
            await asyncio.to_thread(daemon.wait_for_log, "device npu-5 stays with device-plugin until released")
            assert "npu-5" not in published_names(fake_api) and "npu-5-vnpu-180" not in published_names(fake_api)

            sim.pod_resources.release("default", "infer")
            await async_wait_until(lambda: not large.devices, what="the device plugin letting vNPU 180 go")
            await asyncio.to_thread(daemon.wait_for_log, "device npu-5 released by device-plugin, now served by dra")

    asyncio.run(scenario())


def test_the_vnpu_metric_names_a_vnpu_npu_plugin_did_not_make_foreign(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        write_inventory_with_vnpu_180(workspace)
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*args(workspace, "0-3"), *OBSERVED)
            port = (await endpoints_of(daemon)).metrics
            await registered(sim, daemon)
            labels = {"physical_id": "5", "template": "vir10_3c_32g", "origin": "foreign"}
            await until_metric(port, "npu_plugin_vnpus", 1, daemon, **labels)

    asyncio.run(scenario())


def test_one_read_per_health_interval_brings_a_vnpu_change_to_both_sides(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """An administrator adds a vNPU on a DRA chip (1) and on a device-plugin chip (6) in one write.
    Counted in the daemon's reads of the simulated hardware (see test_device_plugin_vnpu's A27), one
    read of every chip per health interval serves both sides: between the write and both showing it,
    the read under way (at most 7 more opens), the next one, which finds the change, and the read of
    the slices' rebuild it triggers (8 each), plus the fake backend's one check of the changed file:
    at most 3 x 8. Two reads after the start let the rebuilds it may have left pending read
    first."""
    fake_api.set_kubernetes_version(35, partitionable_devices=True)
    chips = len(profile_inventory("atlas-800t-a2").devices)
    small, made = "huawei.com/Ascend910-5c.1cpu.16g", "Ascend910-5c.1cpu.16g-196-6"

    async def scenario() -> None:
        write_inventory_with_vnpu_180(workspace)
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*args(workspace, "0-3"), "--health-interval", "1")
            await registered(sim, daemon)
            await async_wait_until(lambda: "npu-1-vir05-1c-16g-0" in published_names(fake_api), what="candidates")
            with state_reads(workspace.root / "hw.json") as reads:
                await asyncio.to_thread(reads.wait_for_reads, 2 * chips)
                template = "vir05_1c_16g"
                replace_vnpus(
                    workspace.root / "hw.json",
                    {1: [{"vnpuId": 116, "template": template}], 6: [{"vnpuId": 196, "template": template}]},
                )

                def both_show_it() -> bool:
                    names = published_names(fake_api)
                    listed = sim.kubelet.plugins.get(small)
                    return (
                        "npu-1-vnpu-116" in names
                        and "npu-1" not in names
                        and listed is not None
                        and made in listed.devices
                    )

                await async_wait_until(both_show_it, what="npu-1-vnpu-116 published and vNPU 196 listed")
                reads.mark()
                opens = await asyncio.to_thread(reads.between_replacement_and_marker)
            assert 1 <= opens <= 3 * chips, f"{opens} opens of the state file: more than 3 reads of {chips} chips"
            assert "Ascend910-6" not in sim.listed()
            assert daemon.process.poll() is None

    asyncio.run(scenario())


def test_a30_a_chip_with_a_prepared_vnpu_stays_dra_until_unprepare_then_moves_with_no_vnpu_left(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(35, partitionable_devices=True)

    async def scenario() -> None:
        write_inventory_with_vnpu_180(workspace)
        async with node(workspace, fake_api) as sim:
            first = launch_daemon(*args(workspace, "0-3"))
            await registered(sim, first)
            await async_wait_until(lambda: "npu-0-vir05-1c-16g-0" in published_names(fake_api), what="candidates")
            claim = plant_claim(fake_api, "infer", None, [result("npu-0-vir05-1c-16g-0")])
            assert (await sim.dra.prepare([claim]))[claim.uid].error == ""
            state = json.loads((workspace.root / "hw.json").read_text())
            assert [v["vnpuId"] for v in state["vnpus"]["0"]] == [100]
            assert (await asyncio.to_thread(first.signal, signal.SIGTERM, 10))[0] == 0

            second = launch_daemon(*args(workspace, "4-7"))
            await registered(sim, second)
            await asyncio.to_thread(second.wait_for_log, "device npu-0 stays with dra until released")
            await async_wait_until(lambda: "npu-4-vir05-1c-16g-0" in published_names(fake_api), what="4-7 split")
            assert not [n for n in published_names(fake_api) if dra_chip(n) == 0], "draining: chip 0 offers nothing"
            assert "Ascend910-0" not in sim.listed()

            assert await sim.dra.unprepare([Claim(claim.namespace, claim.name, claim.uid)]) == {claim.uid: ""}
            await async_wait_until(
                lambda: sim.listed().get("Ascend910-0") == "Healthy", timeout=10, what="chip 0 whole on the DP side"
            )
            state = json.loads((workspace.root / "hw.json").read_text())
            assert not state["vnpus"].get("0"), "Unprepare destroyed the vNPU"

    asyncio.run(scenario())
