"""DRA mode against the kubelet simulator: registration, both DRA services, the health stream."""

from __future__ import annotations

import asyncio
import shutil
import stat
from collections.abc import Callable

import pytest

from npu_plugin.ascend.container_edits import HostLayout, Injection
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.plugin import DraPaths, DraPlugin
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from npu_plugin.kubeapi.client import KubeClient, connect
from npu_plugin.sim.dra_kubelet import KUBELET_SERVICES, DraKubeletSimulator
from tests.support.daemon import Launcher
from tests.support.dra import (
    DRIVER,
    NODE,
    CheckedKubelet,
    Workspace,
    allocate,
    async_wait_until,
    dra_args,
    published_names,
    run_with_kubelet,
    with_health,
    write_inventory,
)
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI
from tests.support.timerloop import TimerLoop, run_counting_timers

pytest_plugins = ["tests.support.dra_fixtures"]


def in_process_plugin(workspace: Workspace, on_registered: Callable[[bool], None]) -> DraPlugin:
    """A DRA plugin in this process serving every device of `workspace`'s inventory, against its
    fake API."""
    paths = DraPaths.of(
        registrar_dir=workspace.reg,
        plugins_dir=workspace.plugins,
        driver=DRIVER,
        pod_uid=None,
        cdi_root=workspace.cdi,
        state_dir=workspace.state,
    )
    inventory = Inventory(profile_devices("atlas-800t-a2"), failure_threshold=1, recovery_threshold=1, owners=Owner.DRA)
    return DraPlugin(
        paths=paths,
        driver=DRIVER,
        node_name=NODE,
        inventory=inventory,
        layout=HostLayout(str(workspace.dev), Injection.NODES, (), ()),
        client=KubeClient(connect(workspace.kubeconfig)),
        unhealthy_policy=UnhealthyPolicy.REMOVE,
        health_timeout_seconds=30,
        on_registered=on_registered,
    )


def test_registration_answers_like_the_seed_expects(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        plugin = await kubelet.wait_for_plugin(DRIVER)
        assert plugin.socket == workspace.reg / f"{DRIVER}-reg.sock"
        assert plugin.endpoint == str(workspace.plugins.absolute() / DRIVER / "dra.sock")
        assert plugin.supported == (
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        )
        assert (plugin.service, plugin.health_service) == ("v1.DRAPlugin", "v1.DRAResourceHealth")
        assert [a.registered for a in kubelet.attempts] == [True]

    run_with_kubelet(workspace, fake_api, scenario)
    daemon.wait_for_log("registered with the kubelet as DRA driver npu.huawei.com")
    for socket in (workspace.registration_socket(), workspace.dra_socket()):
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600


def test_pod_uid_goes_into_both_socket_names(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace, pod_uid="0f1e2d3c"))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        plugin = await kubelet.wait_for_plugin(DRIVER)
        assert plugin.socket.name == f"{DRIVER}-0f1e2d3c-reg.sock"
        assert plugin.endpoint.endswith(f"/{DRIVER}/dra-0f1e2d3c.sock")

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_rejected_registration_leaves_the_daemon_serving(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for(lambda: any(not a.registered for a in kubelet.attempts))
        assert "none of services supported by the plugin" in kubelet.attempts[0].error
        await asyncio.to_thread(daemon.wait_for_log, "the kubelet rejected the registration")
        assert daemon.process.poll() is None
        kubelet.services = KUBELET_SERVICES  # an upgraded kubelet retries and succeeds
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "after-rejection")
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario, services=("v2.DRAPlugin",), retry_interval=0.1)


def test_both_dra_service_versions_prepare_and_unprepare(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        await async_wait_until(lambda: published_names(fake_api), what="published slices")
        for version in ("v1", "v1beta1"):
            claim = await allocate(fake_api, f"claim-{version}")
            prepared = await kubelet.prepare([claim], version=version)
            assert prepared[claim.uid].error == ""
            assert [d.pool_name for d in prepared[claim.uid].devices] == [NODE]
            assert workspace.cdi_file(claim.uid).exists()
            assert await kubelet.unprepare([claim], version=version) == {claim.uid: ""}
            assert not workspace.cdi_file(claim.uid).exists()

    run_with_kubelet(workspace, fake_api, scenario)


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_health_stream_sends_every_device_and_then_changes(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, version: str
) -> None:
    """Both versions of DRAResourceHealth (a 1.37 kubelet takes v1, a 1.34 one v1alpha1) stream the
    same reports: every device with its timeout and a message saying its health level."""
    launch_daemon(*dra_args(workspace))
    devices = profile_devices("atlas-800t-a2")

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        stream = kubelet.watch_health(version=version)
        first = await anext(stream)
        assert [(h.pool, h.device, h.health) for h in first] == [(NODE, f"npu-{i}", "HEALTHY") for i in range(8)]
        assert {(h.timeout_seconds, h.message) for h in first} == {(30, "910B3 health OK")}
        write_inventory(workspace.inventory, with_health(devices, {5}))
        while True:
            update = {h.device: h for h in await anext(stream)}
            if update["npu-5"].health == "UNHEALTHY":
                break
        assert len(update) == 8 and [h.health for h in update.values()].count("UNHEALTHY") == 1
        assert update["npu-5"].message.startswith("910B3 health Critical")
        await stream.aclose()

    run_with_kubelet(workspace, fake_api, scenario)


def test_every_advertised_service_is_served(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """Registration names only what the DRA socket answers: each advertised DRAPlugin version
    unprepares, each advertised health version streams."""
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        plugin = await kubelet.wait_for_plugin(DRIVER)
        for service in plugin.supported:
            version, name = service.split(".")
            if name == "DRAPlugin":
                assert await kubelet.unprepare([], version=version) == {}
            else:
                stream = kubelet.watch_health(version=version)
                assert len(await anext(stream)) == 8
                await stream.aclose()

    run_with_kubelet(workspace, fake_api, scenario)


@pytest.mark.parametrize("how", ["deleted", "renamed away"])
def test_registration_socket_is_recreated_and_registered_again(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, how: str
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    socket = workspace.registration_socket()

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        if how == "deleted":
            socket.unlink()
        else:
            socket.rename(workspace.root / "moved-reg.sock")
        await kubelet.wait_for(lambda: not kubelet.plugins.get(DRIVER))
        await kubelet.wait_for_plugin(DRIVER)
        assert [a.registered for a in kubelet.attempts] == [True, True]

    run_with_kubelet(workspace, fake_api, scenario)
    daemon.wait_for_log(f"registration socket {socket} vanished; re-creating it")


def test_a_removed_registrar_directory_is_waited_for_and_the_socket_made_again_in_it(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        shutil.rmtree(workspace.reg)  # a kubelet reinstall
        await kubelet.wait_for(lambda: not kubelet.plugins.get(DRIVER))
        await asyncio.to_thread(daemon.wait_for_log, f"waiting for the kubelet to create {workspace.reg}")
        assert not workspace.reg.exists(), "the daemon does not make the kubelet's directory"
        workspace.reg.mkdir()
        await kubelet.wait_for_plugin(DRIVER)
        assert [a.registered for a in kubelet.attempts] == [True, True]

    run_with_kubelet(workspace, fake_api, scenario)
    daemon.wait_for_log(f"{workspace.reg} exists now")
    assert daemon.process.poll() is None


def test_the_registration_socket_is_watched_not_polled(workspace: Workspace, fake_api: FakeKubeAPI) -> None:
    """In process, on a loop that notes who sets timers: until it is told to stop, the plugin's own
    task (serving, registering, keeping the socket, re-creating it) sets none, so nothing of it
    wakes a node at rest."""
    registered: list[bool] = []
    plugin = in_process_plugin(workspace, registered.append)

    async def scenario() -> tuple[list[bool], list[str | None]]:
        stop = asyncio.Event()
        running = asyncio.create_task(plugin.run(stop), name="dra-plugin")
        async with CheckedKubelet(workspace, api_url=fake_api.url) as kubelet:
            await kubelet.wait_for_plugin(DRIVER)
            workspace.registration_socket().unlink()
            await kubelet.wait_for(lambda: len(kubelet.attempts) == 2)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, TimerLoop)
        seen, timers = list(registered), list(loop.timers_by_task)
        stop.set()  # stopping the servers with a grace period is the one timer the task may set
        await running
        return seen, timers

    (seen, timers), _loop = run_counting_timers(scenario)
    assert seen == [True, False, True]
    assert "dra-plugin" not in timers


def test_kubelet_restart_wipes_slices_and_the_plugin_republishes(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        await async_wait_until(lambda: published_names(fake_api), what="published slices")
        deletions_before = len([r for r in fake_api.requests if r.method == "DELETE"])
        await kubelet.restart()
        assert len([r for r in fake_api.requests if r.method == "DELETE"]) == deletions_before + 1
        await kubelet.wait_for_plugin(DRIVER)
        names = await async_wait_until(lambda: published_names(fake_api), 5.0, "slices republished")
        assert names == [f"npu-{i}" for i in range(8)]

    run_with_kubelet(workspace, fake_api, scenario)
