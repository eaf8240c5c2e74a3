"""API faults while the daemon publishes AND prepares at once: refused connections, 503s, 500s, a 409 storm,
a 2 s slow server. Prepare fails per claim (the kubelet retries) or succeeds; nothing half-done stays
behind; publishing retries with back-off; everything converges when the API recovers.

test_dra_api_faults covers publishing alone (500s at start, a conflict storm, outages, 0.3 s latency)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from npu_plugin.profiles import profile_devices
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from npu_plugin.sim.fakeapi import FakeKubeAPI
from tests.conftest import DaemonProcess, Launcher, write_inventory
from tests.integration.dra_support import (
    DRIVER,
    Workspace,
    allocate,
    async_wait_until,
    checked_state,
    dra_args,
    pool_settled,
    published_names,
    run_with_kubelet,
    with_health,
)

pytest_plugins = ["tests.integration.dra_fixtures"]
A2 = profile_devices("atlas-800t-a2")
EVERYTHING = [f"npu-{i}" for i in range(8)]
WITHOUT_3 = [n for n in EVERYTHING if n != "npu-3"]
CONVERGE = 25.0  # the publisher's back-off reaches 10 s between attempts


@dataclass(frozen=True)
class Fault:
    start: Callable[[FakeKubeAPI], None]
    stop: Callable[[FakeKubeAPI], None]
    prepare_fails_with: str | None  # what a Prepare needing the API reads while the fault lasts
    publishing_reads: str  # the daemon's log line that shows publishing met the fault


def fail_bursts(api: FakeKubeAPI) -> None:
    api.fail_next(3, 500, path_contains="/resourceclaims/")
    api.fail_next(3, 500, path_contains="/resourceslices")


RETRIED = "publishing ResourceSlices failed (attempt 2)"
FAULTS = {
    "refused": Fault(lambda api: api.set_down(True), lambda api: api.set_down(False), "Connection refused", RETRIED),
    "503": Fault(
        lambda api: api.set_down(True, refuse=False), lambda api: api.set_down(False, refuse=False), "HTTP 503", RETRIED
    ),
    "500s": Fault(fail_bursts, lambda api: None, "HTTP 500", RETRIED),
    "409-storm": Fault(lambda api: api.force_conflicts(12), lambda api: None, None, "ResourceSlice update conflicted"),
}


def converged(api: FakeKubeAPI, names: list[str]) -> Callable[[], bool]:
    return lambda: bool(pool_settled(api)) and published_names(api) == names


async def started(kubelet: DraKubeletSimulator, api: FakeKubeAPI) -> tuple[Claim, Claim]:
    """A claim prepared before the fault, and one allocated (not yet prepared) before it."""
    await kubelet.wait_for_plugin(DRIVER)
    await async_wait_until(converged(api, EVERYTHING), CONVERGE, "the first slices")
    held, fresh = allocate(api, "held"), allocate(api, "fresh")
    assert (await kubelet.prepare([held]))[held.uid].error == ""
    return held, fresh


async def retry_until_prepared(kubelet: DraKubeletSimulator, claim: Claim) -> list[str]:
    """Prepare as the kubelet retries it; the errors read on the way."""
    errors = []
    for _ in range(50):
        answer = (await kubelet.prepare([claim]))[claim.uid]
        if not answer.error:
            return errors
        errors.append(answer.error)
        await asyncio.sleep(0.1)
    raise AssertionError(f"Prepare never succeeded: {errors[-3:]}")


def alive(daemon: DaemonProcess) -> None:
    assert daemon.process.poll() is None, f"the daemon exited:\n{daemon.log()}"


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_faults_during_publishing_and_prepare(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, fault: Fault
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        held, fresh = await started(kubelet, fake_api)
        fault.start(fake_api)
        write_inventory(workspace.inventory, with_health(A2, {3}))  # publishing starts under the fault
        # A claim prepared before needs no API: answered from the checkpoint.
        assert (await kubelet.prepare([held]))[held.uid].error == ""
        if fault.prepare_fails_with is not None:
            error = (await kubelet.prepare([fresh]))[fresh.uid].error
            assert error.startswith("claim default/fresh: get resourceclaim default/fresh: "), error
            assert fault.prepare_fails_with in error, error
            assert set(checked_state(workspace).claims) == {held.uid}, "a failed Prepare leaves nothing behind"
            assert not workspace.cdi_file(fresh.uid).exists()
        await asyncio.to_thread(daemon.wait_for_log, fault.publishing_reads)
        alive(daemon)
        fault.stop(fake_api)
        for error in await retry_until_prepared(kubelet, fresh):  # the rest of a burst of 500s
            assert fault.prepare_fails_with is not None and fault.prepare_fails_with in error, error
        await async_wait_until(converged(fake_api, WITHOUT_3), CONVERGE, "slices without npu-3")
        assert set(checked_state(workspace).claims) == {held.uid, fresh.uid}

    run_with_kubelet(workspace, fake_api, scenario)
    alive(daemon)


@pytest.mark.slow
def test_a_2s_slow_api_delays_but_never_fails_publishing_or_prepare(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        held, fresh = await started(kubelet, fake_api)
        fake_api.set_latency(2.0)
        write_inventory(workspace.inventory, with_health(A2, {3}))
        waiting = asyncio.ensure_future(kubelet.prepare([fresh]))
        # The slow GET of the fresh claim happens outside the state lock: a prepared claim is not held up.
        assert (await kubelet.prepare([held]))[held.uid].error == ""
        assert not waiting.done()
        assert (await waiting)[fresh.uid].error == ""
        await async_wait_until(converged(fake_api, WITHOUT_3), CONVERGE, "slices without npu-3 from a slow API")
        assert "failed" not in daemon.log()

    run_with_kubelet(workspace, fake_api, scenario)
    alive(daemon)
