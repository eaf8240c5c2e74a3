"""A node switched from dra to device-plugin while a claim's pod still runs (the dra pod is gone, the
kubelet keeps the pod and its prepared claim): the device plugin must not hand that NPU to a second pod.
The real daemon in device-plugin mode against the device-plugin kubelet simulator and the PodResources
simulator, whose running container holds the claim's device."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.support.both import RESOURCE, both_args, node
from tests.support.daemon import Launcher
from tests.support.dra import DRIVER, NODE, Workspace, async_wait_until
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]


def test_the_device_plugin_offers_an_npu_a_claims_container_holds_only_once_it_ends(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            sim.pod_resources.hold_claim("default", "trainer", "main", driver=DRIVER, pool=NODE, device="npu-3")
            daemon = launch_daemon(*both_args(workspace, None), "--mode", "device-plugin")
            await async_wait_until(lambda: len(sim.listed()) == 7, what="seven NPUs listed")
            assert "Ascend910-3" not in sim.listed()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await sim.kubelet.allocate(RESOURCE, ["Ascend910-3"])
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            daemon.wait_for_log("device npu-3 is still held by a container of a DRA claim")

            sim.pod_resources.release("default", "trainer")
            await async_wait_until(lambda: sim.listed().get("Ascend910-3") == "Healthy", what="npu-3 offered")
            daemon.wait_for_log("device npu-3 released by dra, now served by device-plugin")

    asyncio.run(scenario())
