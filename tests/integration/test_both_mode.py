"""Both mode against the real daemon: one ledger, refusals naming the owner, and handover on
release.

The daemon runs as a subprocess with the device-plugin kubelet simulator, the DRA kubelet simulator,
the PodResources simulator and the fake API server, all on Unix sockets in a temporary directory.
"""

from __future__ import annotations

import asyncio
import re
import signal
import urllib.request
from collections.abc import Awaitable, Callable

import grpc
import pytest

from npu_plugin.sim.dra_kubelet import Claim
from tests.support.both import RESOURCE, both_args, node, registered
from tests.support.daemon import DaemonProcess, Launcher
from tests.support.dra import (
    NODE,
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
            await asyncio.to_thread(daemon.wait_for_log, "device npu-5 stays with device-plugin until released")

            sim.pod_resources.release("default", "training")
            await async_wait_until(lambda: "npu-5" in published_names(fake_api), what="handover to DRA")
            await async_wait_until(lambda: "Ascend910-5" not in sim.listed(), what="device plugin letting go")
            await asyncio.to_thread(daemon.wait_for_log, "device npu-5 released by device-plugin, now served by dra")

    run(scenario)


def test_without_pod_resources_every_device_stays_with_the_device_plugin(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with node(workspace, fake_api, pod_resources_up=False) as sim:
            daemon = launch_daemon(*both_args(workspace))
            await registered(sim, daemon)
            await asyncio.to_thread(daemon.wait_for_log, "cannot read the kubelet PodResources API")
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


@pytest.mark.parametrize("via", ["--dra-devices", "the Node's annotation"])
def test_a_prepared_claim_keeps_its_device_across_a_partition_change(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, via: str
) -> None:
    """The node's split is read at start too: an operator changes it, then restarts the pod (a
    rollout); what is in use stays with its side until released."""

    def launch(split: str) -> DaemonProcess:
        if via == "--dra-devices":
            return launch_daemon(*both_args(workspace, split))
        annotate(fake_api, split)
        return launch_daemon(*both_args(workspace, None))

    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            first = launch("0-7")
            await sim.dra.wait_for_plugin("npu.huawei.com", timeout=10)
            claim = plant_claim(fake_api, "holder", None, [result("npu-2")])
            assert (await sim.dra.prepare([claim]))[claim.uid].error == ""
            assert (await asyncio.to_thread(first.signal, signal.SIGTERM, 10))[0] == 0

            second = launch("4-7")
            await registered(sim, second)
            await asyncio.to_thread(second.wait_for_log, "device npu-2 stays with dra until released")
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
            await asyncio.to_thread(second.wait_for_log, "device npu-2 released by dra, now served by device-plugin")

    run(scenario)


def test_a_bad_partition_exits_2_before_serving(workspace: Workspace, launch_daemon: Launcher) -> None:
    for bad, message in [
        ("7-4", "range '7-4' runs backwards"),
        ("4-7,5", "repeats device(s) [5]"),
        ("4-x", "is neither an id, a range like 4-7, a topology group"),
    ]:
        daemon = launch_daemon(*both_args(workspace, bad))
        assert daemon.process.wait(20) == 2
        assert message in daemon.log()
        assert not (workspace.root / "dp").exists() or not any((workspace.root / "dp").glob("*.sock"))


def annotate(api: FakeKubeAPI, value: str | None, *, label: str | None = None) -> None:
    """Give this node's Node the split annotation (and label) of the driver, or none."""
    node = api.get_object("Node", NODE)
    assert node is not None
    node["metadata"]["annotations"] = {SPLIT_KEY: value} if value is not None else {}
    node["metadata"]["labels"] = {SPLIT_KEY: label} if label is not None else {}
    api.put_object("Node", node)


SPLIT_KEY = "npu.huawei.com/dra-devices"


def test_the_nodes_split_wins_over_the_flag(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    annotate(fake_api, "0-1,ring-0x", label="6_7")  # the annotation wins over the label too

    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace, "4-7"))
            await registered(sim, daemon)
            await async_wait_until(lambda: published_names(fake_api) == ["npu-0", "npu-1"], what="the Node's share")
            assert sim.listed() == {f"Ascend910-{i}": "Healthy" for i in range(2, 8)}
            log = daemon.log()
            assert (
                f"DRA split from the Node's annotation {SPLIT_KEY}: '0-1,ring-0x' (instead of --dra-devices '4-7')"
                in log
            )
            # A group this node lacks: one warning, never an exit.
            assert log.count("name no device on this node") == 1
            assert f"the Node's annotation {SPLIT_KEY}: ring-0x name no device on this node and are ignored" in log

    run(scenario)


def test_a_split_naming_nothing_here_leaves_every_device_to_the_device_plugin(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    annotate(fake_api, None, label="8-15")  # the label alone, on a node with eight NPUs

    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace, None, "--metrics-port", "0", "--bind-address", "127.0.0.1"))
            await registered(sim, daemon)
            await async_wait_until(lambda: len(sim.listed()) == 8, what="every device with the device plugin")
            await async_wait_until(lambda: published_names(fake_api) == [], what="an empty DRA pool")
            await asyncio.to_thread(
                daemon.wait_for_log,
                "8-15 name no device on this node and are ignored; every device is served by the device plugin",
            )
            port = int(re.search(r"metrics listening on http://127\.0\.0\.1:(\d+)/", daemon.log()).group(1))  # type: ignore[union-attr]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                assert "npu_plugin_dra_devices_ignored 1.0" in response.read().decode()

    run(scenario)


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (
            None,
            "--mode both needs a split: --dra-devices LIST, or the annotation (or label) npu.huawei.com/dra-devices",
        ),
        ("4-x", f"the Node's annotation {SPLIT_KEY}: '4-x' is neither an id"),
        ("", f"the Node's annotation {SPLIT_KEY} is empty"),
    ],
)
def test_both_mode_without_a_usable_split_exits_2(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, annotation: str | None, message: str
) -> None:
    annotate(fake_api, annotation)
    daemon = launch_daemon(*both_args(workspace, None))
    assert daemon.process.wait(20) == 2
    assert message in daemon.log()
    assert not (workspace.root / "dp").exists() or not any((workspace.root / "dp").glob("*.sock"))


def test_an_unreadable_node_falls_back_on_the_flag_else_stops_the_start(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.forbid("get", "nodes")
    stopped = launch_daemon(*both_args(workspace, None))
    assert stopped.process.wait(20) == 1
    assert f"--mode both without --dra-devices: cannot read Node {NODE} for its split" in stopped.log()

    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace, "4-7"))
            await asyncio.to_thread(
                daemon.wait_for_log, f"cannot read Node {NODE} for its DRA split, using --dra-devices"
            )
            await async_wait_until(lambda: len(sim.listed()) == 4, what="the device plugin's share")
            assert set(sim.listed()) == {f"Ascend910-{i}" for i in range(4)}

    run(scenario)
