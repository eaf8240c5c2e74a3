"""Health flapping every 100 ms for 5 s, one device on each side of a both-mode daemon: slice
writes stay coalesced, ListAndWatch sends only real verdict changes, and the end state is right.

The daemon runs with the fastest health settings (0.1 s polls, one sample to fall or to rise), so
nearly every flip of the file becomes a verdict change: the worst case for both APIs."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.both import RESOURCE, Node, both_args, node, registered
from tests.support.daemon import DaemonProcess, Launcher, write_inventory
from tests.support.dra import Workspace, async_wait_until, pool_settled, published_names, with_health
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
A2 = profile_devices("atlas-800t-a2")
DP_DEVICE, DRA_DEVICE = 1, 5  # both mode with --dra-devices 4-7
# 50 flips: ten times more than coalescing lets through, as 100 in 10 s were, in half the time.
FLAP_SECONDS, FLAP_PERIOD = 5.0, 0.1
MAX_SLICE_WRITES = 15  # one burst per 500 ms at most: 10 in 5 s, and a few to settle


def slice_writes(api: FakeKubeAPI) -> int:
    return sum(r.method in ("PUT", "POST") and "/resourceslices" in r.path for r in api.requests)


def verdict_changes(daemon: DaemonProcess, device: int) -> int:
    """How often the daemon says the device's verdict flipped (one log line per flip)."""
    lines = daemon.log().splitlines()
    return sum(
        f"device npu-{device} turned unhealthy" in line or f"device npu-{device} is healthy again" in line
        for line in lines
    )


async def flap(workspace: Workspace) -> None:
    deadline, bad = time.monotonic() + FLAP_SECONDS, False
    while time.monotonic() < deadline:
        bad = not bad
        write_inventory(workspace.inventory, with_health(A2, {DP_DEVICE, DRA_DEVICE} if bad else set()))
        await asyncio.sleep(FLAP_PERIOD)
    write_inventory(workspace.inventory, A2)


def settled(sim: Node, api: FakeKubeAPI) -> bool:
    healthy = sim.listed() == {f"Ascend910-{i}": "Healthy" for i in range(4)}
    return healthy and bool(pool_settled(api)) and published_names(api) == [f"npu-{i}" for i in range(4, 8)]


@pytest.mark.slow
def test_flapping_health_is_coalesced_on_both_sides(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace))
            await registered(sim, daemon)
            await async_wait_until(lambda: settled(sim, fake_api), what="the first list and slices")
            writes, updates = slice_writes(fake_api), sim.kubelet.plugin(RESOURCE).updates
            await flap(workspace)
            await async_wait_until(lambda: settled(sim, fake_api), what="the healthy end state")
            await asyncio.sleep(1.0)  # anything still queued would be written now
            assert settled(sim, fake_api) and daemon.process.poll() is None

            flips = verdict_changes(daemon, DP_DEVICE)
            assert flips > 0 and verdict_changes(daemon, DRA_DEVICE) > 0, "the flapping reached the verdicts"
            assert slice_writes(fake_api) - writes <= MAX_SLICE_WRITES
            # DRA's device is not in the device plugin's list: its flips must not reach ListAndWatch
            # at all.
            assert sim.kubelet.plugin(RESOURCE).updates - updates <= flips

    asyncio.run(scenario())
