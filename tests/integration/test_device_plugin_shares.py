"""Device Plugin mode with `--share-devices`: the real daemon lists each shared chip N times, its
shares follow the chip's health, several shares of a chip give the chip once, and
GetPreferredAllocation spreads or packs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.device import Health
from tests.integration import test_device_plugin
from tests.integration.test_device_plugin import Node, health, kubelet_at, rpc_error, run, until
from tests.support.daemon import Launcher, write_inventory
from tests.support.fake_devices import profile_devices

RESOURCE = "huawei.com/Ascend310P"
DUO = profile_devices("atlas-300i-duo")
node = test_device_plugin.node


@pytest.fixture
def duo(node: Node) -> Node:
    write_inventory(node.inventory, DUO)
    return node


def shares(chip: int, count: int = 3) -> list[str]:
    return [f"Ascend310P-{chip}-share-{k}" for k in range(count)]


def test_shares_are_listed_allocated_and_preferred(duo: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(duo.plugin_dir) as kubelet:
            daemon = launch_daemon(
                *duo.args("--share-devices", "0-1", "--share-count", "3", "--share-allocation", "pack")
            )
            await until(
                lambda: RESOURCE in kubelet.plugins and kubelet.plugins[RESOURCE].updates > 0, 15, "list", daemon
            )
            connection = kubelet.plugins[RESOURCE]
            assert sorted(connection.devices) == [*shares(0), *shares(1), "Ascend310P-2", "Ascend310P-3"]
            response = await kubelet.allocate(RESOURCE, ["Ascend310P-0-share-2", "Ascend310P-0-share-0"])
            assert dict(response.envs) == {"ASCEND_VISIBLE_DEVICES": "0"}
            assert response.devices[0].container_path == "/dev/davinci0"
            free = [*shares(0)[1:], *shares(1)]
            assert await kubelet.preferred(RESOURCE, free, [], 2) == ["Ascend310P-0-share-1", "Ascend310P-0-share-2"]
            error = await rpc_error(kubelet.allocate(RESOURCE, ["Ascend310P-0"]))
            assert "Ascend310P-0 is shared" in (error.details() or "")
            sick = [replace(d, health=Health.CRITICAL) if d.physical_id == 1 else d for d in DUO]
            write_inventory(duo.inventory, sick)
            await until(
                lambda: health(connection)["Ascend310P-1-share-2"] == "Unhealthy", 15, "shares unhealthy", daemon
            )
            assert {health(connection)[i] for i in shares(1)} == {"Unhealthy"}
            assert {health(connection)[i] for i in shares(0)} == {"Healthy"}

    run(scenario())


def test_spread_is_the_default(duo: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(duo.plugin_dir) as kubelet:
            daemon = launch_daemon(*duo.args("--share-devices", "all", "--share-count", "2"))
            await until(
                lambda: RESOURCE in kubelet.plugins and kubelet.plugins[RESOURCE].updates > 0, 15, "list", daemon
            )
            every = sorted(kubelet.plugins[RESOURCE].devices)
            assert len(every) == 8
            assert await kubelet.preferred(RESOURCE, every, [], 2) == ["Ascend310P-0-share-0", "Ascend310P-1-share-0"]
            two = pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=["Ascend310P-2-share-0"]),
                    pb.ContainerAllocateRequest(devices_ids=["Ascend310P-2-share-1"]),
                ]
            )
            answer = await kubelet.plugin(RESOURCE).stub.Allocate(two)
            assert [dict(r.envs) for r in answer.container_responses] == [{"ASCEND_VISIBLE_DEVICES": "2"}] * 2

    run(scenario())
