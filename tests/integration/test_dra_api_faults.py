"""The DRA daemon under API faults: errors, conflict storms, outages, latency — it stays up and
converges."""

from __future__ import annotations

from typing import Any

import pytest

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.daemon import DaemonProcess, Launcher, wait_until, write_inventory
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    allocate,
    dra_args,
    node_slices,
    pool_settled,
    published_names,
    run_with_kubelet,
    with_health,
)
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
A2 = profile_devices("atlas-800t-a2")
EVERYTHING = [f"npu-{i}" for i in range(8)]
WITHOUT_3 = [n for n in EVERYTHING if n != "npu-3"]
CONVERGE = 20.0  # the publisher's back-off reaches 10 s between attempts


def converged(api: FakeKubeAPI, names: list[str]) -> list[dict[str, Any]]:
    wait_until(lambda: pool_settled(api) and published_names(api) == names, CONVERGE, f"slices with {names}")
    return node_slices(api)


def alive(daemon: DaemonProcess) -> None:
    assert daemon.process.poll() is None, f"the daemon exited:\n{daemon.log()}"


def test_server_errors_at_start_are_retried(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    # Twice each: a retry after a retry. More LIST failures only waited out the informer's growing
    # pauses (0.5 s, 1 s, 2 s, 4 s: the 3rd and 4th cost 6 s and proved nothing more).
    fake_api.fail_next(3, 500, path_contains="/nodes/")
    fake_api.fail_next(2, 500, path_contains="resourceslices")
    daemon = launch_daemon(*dra_args(workspace))
    converged(fake_api, EVERYTHING)
    alive(daemon)
    assert "reading Node node-a failed (attempt 3)" in daemon.log()
    failed = [r for r in fake_api.requests if r.status == 500]
    assert len(failed) == 5


def test_a_conflict_storm_ends_in_the_right_slices(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    converged(fake_api, EVERYTHING)
    fake_api.force_conflicts(12)
    write_inventory(workspace.inventory, with_health(A2, {3}))
    converged(fake_api, WITHOUT_3)
    alive(daemon)
    assert len([r for r in fake_api.requests if r.status == 409]) == 12


@pytest.mark.parametrize("refuse", [True, False], ids=["refused", "503"])
def test_an_outage_is_ridden_out(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, refuse: bool
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    converged(fake_api, EVERYTHING)
    fake_api.set_down(True, refuse=refuse)
    write_inventory(workspace.inventory, with_health(A2, {3}))
    daemon.wait_for_log("publishing ResourceSlices failed (attempt 2)")
    fake_api.set_down(False, refuse=refuse)
    converged(fake_api, WITHOUT_3)
    alive(daemon)


def test_a_slow_api_still_serves_and_publishes(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_latency(0.3)
    launch_daemon(*dra_args(workspace))
    converged(fake_api, EVERYTHING)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "slow")
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_node_created_late_is_found(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    fake_api.delete_object("Node", NODE)
    daemon = launch_daemon(*dra_args(workspace))
    daemon.wait_for_log("reading Node node-a failed (attempt 2)")
    uid = fake_api.add_node(NODE)["metadata"]["uid"]
    [published] = converged(fake_api, EVERYTHING)
    assert published["metadata"]["ownerReferences"][0]["uid"] == uid
