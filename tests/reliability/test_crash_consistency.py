"""`kill -9` at random points of Prepare and Unprepare, fifty times in a row: what is on disk is
always consistent, a restart cleans up what a crash left half done, and the kubelet's retries
converge."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest

from npu_plugin.dra.checkpoint import PREPARE_COMPLETED, Checkpoint
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator, PreparedDevice, PrepareResult
from tests.support.daemon import DaemonProcess, Launcher
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    checked_state,
    dra_args,
    plant_claim,
    result,
    retry_prepare,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
ITERATIONS = 50
SEED = 9  # the kill points are random, but the same on every run
CLAIMS = 6
# A batch of Prepares and Unprepares takes a few to a few tens of milliseconds (mostly fsyncs). Kill
# points spread over 20 ms land before the call is read, in the middle of it (about a third of the
# iterations: PrepareStarted entries, CDI files without a record, temporary files, records without a
# file), or after it.
KILL_WITHIN = 0.02


def expected_answer(claim: Claim, index: int) -> PrepareResult:
    return PrepareResult((PreparedDevice(("npu",), NODE, f"npu-{index}", (f"{DRIVER}/npu={claim.uid}-npu",)),))


def registrations(kubelet: DraKubeletSimulator) -> int:
    return sum(attempt.registered for attempt in kubelet.attempts)


def interrupted_cdi_files(workspace: Workspace, checkpoint: Checkpoint) -> set[str]:
    """Claim UIDs whose CDI file a crash left without a completed checkpoint entry."""
    prefix = f"{DRIVER}-claim_"
    on_disk = {p.name.removeprefix(prefix).removesuffix(".json") for p in workspace.cdi.glob(f"{prefix}*.json")}
    return {uid for uid in on_disk if getattr(checkpoint.claims.get(uid), "state", None) != PREPARE_COMPLETED}


class CrashLoop:
    """One daemon at a time, killed with SIGKILL while the kubelet's calls are in flight."""

    def __init__(self, workspace: Workspace, launch: Launcher, kubelet: DraKubeletSimulator) -> None:
        self.workspace, self.launch, self.kubelet = workspace, launch, kubelet
        self.daemon: DaemonProcess | None = None

    async def start(self) -> None:
        before = registrations(self.kubelet)
        self.daemon = self.launch(*dra_args(self.workspace))
        await self.kubelet.wait_for(lambda: registrations(self.kubelet) > before, timeout=15)

    async def kill_during(self, calls: Sequence[Awaitable[Any]], after: float) -> None:
        assert self.daemon is not None
        pending = [asyncio.ensure_future(call) for call in calls]
        await asyncio.sleep(after)
        self.daemon.kill()
        await asyncio.gather(*pending, return_exceptions=True)


def choose(rng: random.Random, claims: list[Claim], prepared: set[str]) -> tuple[list[Claim], list[Claim]]:
    unprepare = [c for c in claims if c.uid in prepared and rng.random() < 0.5]
    prepare = [c for c in claims if c.uid not in prepared and rng.random() < 0.6]
    return prepare, unprepare


def check_restart_cleaned_up(workspace: Workspace, doomed: set[str], iteration: int) -> Checkpoint:
    state = checked_state(workspace)
    left = {p.name for p in [*workspace.cdi.iterdir(), *workspace.state.iterdir()]}
    assert not left & {workspace.cdi_file(uid).name for uid in doomed}, f"iteration {iteration}: orphans survived"
    assert not interrupted_cdi_files(workspace, state), f"iteration {iteration}: a CDI file without a claim"
    assert not [n for n in left if n.endswith(".tmp")], f"iteration {iteration}: a half-written file survived"
    return state


@pytest.mark.slow
def test_kill_9_at_random_points_never_leaves_inconsistent_state(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    claims = [plant_claim(fake_api, f"c{i}", None, [result(f"npu-{i}")]) for i in range(CLAIMS)]
    rival = plant_claim(fake_api, "rival", None, [result("npu-0")])  # wants the device of claims[0]
    rng = random.Random(SEED)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        loop = CrashLoop(workspace, launch_daemon, kubelet)
        await loop.start()
        prepared: set[str] = set()
        for iteration in range(ITERATIONS):
            prepare, unprepare = choose(rng, claims, prepared)
            # The rival comes along only while claims[0] surely holds npu-0: its answer is always a
            # refusal.
            rivalry = [rival] if claims[0].uid in prepared and claims[0] not in unprepare else []
            calls = [kubelet.prepare([*prepare, *rivalry])] if prepare or rivalry else []
            calls += [kubelet.unprepare(unprepare)] if unprepare else []
            await loop.kill_during(calls, rng.uniform(0, KILL_WITHIN))

            doomed = interrupted_cdi_files(workspace, checked_state(workspace))
            await loop.start()
            assert rival.uid not in check_restart_cleaned_up(workspace, doomed, iteration).claims

            # The kubelet never heard back, so it asks again: the same answers, and Unprepare
            # finishes.
            answers = await retry_prepare(kubelet, [*prepare, *rivalry]) if prepare or rivalry else {}
            for claim in prepare:
                assert answers[claim.uid] == expected_answer(claim, claims.index(claim)), f"iteration {iteration}"
            for claim in rivalry:
                assert f"already prepared for claim {claims[0].uid}" in answers[claim.uid].error
            if unprepare:
                assert await kubelet.unprepare(unprepare) == {c.uid: "" for c in unprepare}
            prepared = (prepared | {c.uid for c in prepare}) - {c.uid for c in unprepare}
            assert set(checked_state(workspace).claims) == prepared, f"iteration {iteration}"
            assert {p.name for p in workspace.cdi.iterdir()} == {workspace.cdi_file(u).name for u in prepared}

    run_with_kubelet(workspace, fake_api, scenario)
