"""A rolling update under load: the old and the new pod (different --pod-uid, same --state-dir and
--cdi-root) serve together while the kubelet prepares and unprepares through both, then the old one
stops mid-stream.

Their Prepares must never interleave (the flock in --state-dir): two read-modify-write rounds of the
one checkpoint running at once would lose one side's claims, so "every claim prepared through either
is in the checkpoint" is what serialisation guarantees. test_dra_state shows one daemon waiting on
the lock."""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Sequence

import grpc

from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator, PluginConnection
from tests.support.daemon import Launcher, write_inventory
from tests.support.dra import (
    DRIVER,
    Workspace,
    checked_state,
    dra_args,
    plant_claim,
    result,
    run_with_kubelet,
)
from tests.support.fake_devices import many_devices
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
DEVICES = 32


async def through(
    kubelet: DraKubeletSimulator,
    method: str,
    claims: Sequence[Claim],
    plugins: Sequence[PluginConnection],
    rng: random.Random,
) -> dict[str, str]:
    """One call per claim, all at once, each through a plugin picked at random; the error by claim
    UID (a call the plugin did not answer, e.g. because it stopped, reads as its gRPC status)."""

    async def one(claim: Claim) -> str:
        plugin = rng.choice(plugins)
        try:
            if method == "prepare":
                return (await kubelet.prepare([claim], plugin=plugin))[claim.uid].error
            return (await kubelet.unprepare([claim], plugin=plugin))[claim.uid]
        except grpc.aio.AioRpcError as error:
            return error.code().name

    errors = await asyncio.gather(*(one(c) for c in claims))
    return dict(zip([c.uid for c in claims], errors, strict=True))


def test_two_overlapping_pods_serialise_and_lose_no_claim(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    write_inventory(workspace.inventory, many_devices(DEVICES))
    old = launch_daemon(*dra_args(workspace, pod_uid="old"))
    launch_daemon(*dra_args(workspace, pod_uid="new"))
    claims = [plant_claim(fake_api, f"c{i}", None, [result(f"npu-{i}")]) for i in range(DEVICES)]
    rng = random.Random(4)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        pods = [
            await kubelet.wait_for_plugin(DRIVER, endpoint=str(workspace.dra_socket(uid).absolute()))
            for uid in ("old", "new")
        ]
        assert set((await through(kubelet, "prepare", claims, pods, rng)).values()) == {""}
        assert set(checked_state(workspace).claims) == {c.uid for c in claims}
        first_answers = await kubelet.prepare(claims, plugin=pods[1])

        # Half are unprepared through both while the old pod is told to stop: the kubelet retries
        # what the stopping pod did not answer through the new one.
        leaving, staying = claims[::2], claims[1::2]
        stopping = asyncio.ensure_future(asyncio.to_thread(old.signal, signal.SIGTERM, 10))
        errors = await through(kubelet, "unprepare", leaving, pods, rng)
        assert (await stopping)[0] == 0
        retried = [c for c in leaving if errors[c.uid]]
        assert await kubelet.unprepare(retried, plugin=pods[1]) == {c.uid: "" for c in retried}

        assert set(checked_state(workspace).claims) == {c.uid for c in staying}
        assert {p.name for p in workspace.cdi.iterdir()} == {workspace.cdi_file(c.uid).name for c in staying}
        again = await kubelet.prepare(staying, plugin=pods[1])
        assert again == {c.uid: first_answers[c.uid] for c in staying}

    run_with_kubelet(workspace, fake_api, scenario)
