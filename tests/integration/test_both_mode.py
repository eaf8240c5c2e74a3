"""Both mode against the real daemon: one ledger, refusals naming the owner, and handover on
release.

The daemon runs as a subprocess with the device-plugin kubelet simulator, the DRA kubelet simulator,
the PodResources simulator and the fake API server, all on Unix sockets in a temporary directory.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

import grpc
import pytest

from npu_plugin.sim.dra_kubelet import Claim
from tests.support.both import RESOURCE, both_args, node, registered
from tests.support.daemon import Launcher
from tests.support.dra import (
    Workspace,
    async_wait_until,
    plant_claim,
    published_names,
    result,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_each_device_is_served_by_exactly_one_side(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace))
            await registered(sim, daemon)
            await async_wait_until(
                lambda: published_names(fake_api) == ["npu-4", "npu-5", "npu-6", "npu-7"],
                what="the DRA share in the slice",
            )
            assert sim.listed() == {f"Ascend910-{i}": "Healthy" for i in range(4)}

            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await sim.kubelet.allocate(RESOURCE, ["Ascend910-5"])
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "device Ascend910-5 is owned by dra, not the device plugin" in str(refused.value.details())

            claim = plant_claim(fake_api, "wrong-side", None, [result("npu-1")])
            answer = (await sim.dra.prepare([claim]))[claim.uid]
            assert "device npu-1: owned by device-plugin, not DRA" in answer.error
            ok = plant_claim(fake_api, "right-side", None, [result("npu-6")])
            assert (await sim.dra.prepare([ok]))[ok.uid].error == ""

    run(scenario)


def test_a_device_a_container_holds_stays_until_the_pod_ends(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            sim.pod_resources.hold_devices("default", "training", "main", ["Ascend910-5"])
            daemon = launch_daemon(*both_args(workspace))
            await registered(sim, daemon)
            await async_wait_until(
                lambda: published_names(fake_api) == ["npu-4", "npu-6", "npu-7"], what="slice without the held device"
            )
            # Still the device plugin's for the running pod, but offered to no new one.
            assert sim.listed()["Ascend910-5"] == "Unhealthy"
            daemon.wait_for_log("device npu-5 stays with device-plugin until released")

            sim.pod_resources.release("default", "training")
            await async_wait_until(lambda: "npu-5" in published_names(fake_api), what="handover to DRA")
            await async_wait_until(lambda: "Ascend910-5" not in sim.listed(), what="device plugin letting go")
            daemon.wait_for_log("device npu-5 released by device-plugin, now served by dra")

    run(scenario)


def test_without_pod_resources_every_device_stays_with_the_device_plugin(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api, pod_resources_up=False) as sim:
            daemon = launch_daemon(*both_args(workspace))
            await registered(sim, daemon)
            daemon.wait_for_log("cannot read the kubelet PodResources API")
            await async_wait_until(lambda: len(sim.listed()) == 8, what="all eight listed")
            assert [sim.listed()[f"Ascend910-{i}"] for i in range(4, 8)] == ["Unhealthy"] * 4
            await asyncio.sleep(0.5)
            assert published_names(fake_api) == []

            await sim.pod_resources.start()
            await async_wait_until(
                lambda: published_names(fake_api) == ["npu-4", "npu-5", "npu-6", "npu-7"],
                what="handover once PodResources answers",
            )

    run(scenario)


def test_a_prepared_claim_keeps_its_device_across_a_partition_change(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            first = launch_daemon(*both_args(workspace, "0-7"))
            await sim.dra.wait_for_plugin("npu.huawei.com", timeout=10)
            claim = plant_claim(fake_api, "holder", None, [result("npu-2")])
            assert (await sim.dra.prepare([claim]))[claim.uid].error == ""
            assert first.signal(signal.SIGTERM, timeout=10)[0] == 0

            second = launch_daemon(*both_args(workspace, "4-7"))
            await registered(sim, second)
            second.wait_for_log("device npu-2 stays with dra until released")
            await async_wait_until(
                lambda: published_names(fake_api) == ["npu-4", "npu-5", "npu-6", "npu-7"],
                what="slice without the draining device",
            )
            assert "Ascend910-2" not in sim.listed()

            assert await sim.dra.unprepare([Claim(claim.namespace, claim.name, claim.uid)]) == {claim.uid: ""}
            await async_wait_until(
                lambda: sim.listed().get("Ascend910-2") == "Healthy",
                timeout=10,
                what="device 2 handed to the device plugin",
            )
            second.wait_for_log("device npu-2 released by dra, now served by device-plugin")

    run(scenario)


def test_a_bad_partition_exits_2_before_serving(workspace: Workspace, launch_daemon: Launcher) -> None:
    for bad, message in [
        ("4-9", "no device with physical id [8, 9]"),
        ("4-7,5", "repeats device(s) [5]"),
        ("ring-7", "nor a topology group"),
    ]:
        daemon = launch_daemon(*both_args(workspace, bad))
        assert daemon.process.wait(20) == 2
        assert message in daemon.log()
        assert not (workspace.root / "dp").exists() or not any((workspace.root / "dp").glob("*.sock"))
