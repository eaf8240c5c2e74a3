"""Twenty kubelet restarts in a row against a daemon in both mode: the device plugin registers again
every time, and the DRA plugin registers again and republishes the slices each restart wiped."""

from __future__ import annotations

import asyncio

import pytest

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.both import Node, both_args, node, registered
from tests.support.daemon import Launcher
from tests.support.dra import Workspace, async_wait_until, pool_settled, published_names
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
RESTARTS = 20
DP_SHARE = {f"Ascend910-{i}": "Healthy" for i in range(4)}
DRA_SHARE = [f"npu-{i}" for i in range(4, 8)]


def dra_registrations(kubelet: DraKubeletSimulator) -> int:
    return sum(attempt.registered for attempt in kubelet.attempts)


def slice_wipes(api: FakeKubeAPI) -> int:
    return sum(r.method == "DELETE" and r.path.endswith("/resourceslices") for r in api.requests)


def republished(api: FakeKubeAPI) -> bool:
    return bool(pool_settled(api)) and published_names(api) == DRA_SHARE


async def restart_and_check(sim: Node, api: FakeKubeAPI, round_: int) -> None:
    dp_before, dra_before, wipes_before = len(sim.kubelet.registrations), dra_registrations(sim.dra), slice_wipes(api)
    # One kubelet restart restarts its device manager and its DRA manager together.
    await asyncio.gather(sim.kubelet.restart(), sim.dra.restart())
    assert slice_wipes(api) == wipes_before + 1, f"restart {round_}: the kubelet wiped the node's slices"
    await async_wait_until(
        lambda: len(sim.kubelet.registrations) == dp_before + 1 and sim.listed() == DP_SHARE,
        what=f"restart {round_}: the device plugin registered and listed again",
    )
    await async_wait_until(
        lambda: dra_registrations(sim.dra) == dra_before + 1, what=f"restart {round_}: the DRA plugin registered again"
    )
    await async_wait_until(lambda: republished(api), what=f"restart {round_}: the slices republished")


@pytest.mark.slow
def test_twenty_kubelet_restarts_in_a_row(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace))
            await registered(sim, daemon)
            await async_wait_until(lambda: republished(fake_api), what="the first slices")
            for round_ in range(RESTARTS):
                await restart_and_check(sim, fake_api, round_)
            assert daemon.process.poll() is None, daemon.log()
            assert len(sim.kubelet.registrations) == RESTARTS + 1, "one registration per kubelet start"
            assert dra_registrations(sim.dra) == RESTARTS + 1

    asyncio.run(scenario())
