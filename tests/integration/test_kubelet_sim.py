"""The kubelet simulator keeps the real kubelet's rules: version, resource name, dial-back,
clean-up."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.ascend.container_edits import HostLayout, Injection
from npu_plugin.deviceplugin.listing import DeviceListing
from npu_plugin.deviceplugin.service import DevicePluginService
from npu_plugin.host.sockets import start_unix_server, stop_unix_server
from npu_plugin.inventory.state import Inventory
from npu_plugin.sim.kubelet import CHECKPOINT, KubeletSimulator, is_extended_resource_name, remove_sockets
from tests.support.fake_devices import profile_devices


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("huawei.com/Ascend910", True),
        ("example.com/a_b.c-1", True),
        ("a.b.c/X", True),
        ("Ascend910", False),
        ("kubernetes.io/npu", False),
        ("node.kubernetes.io/npu", False),
        ("requests.huawei.com/npu", False),
        ("Huawei.com/npu", False),
        ("huawei.com/", False),
        ("huawei.com/-npu", False),
        ("huawei.com/a/b", False),
        ("huawei_com/npu", False),
        ("huawei.com/" + "n" * 64, False),
        ("", False),
    ],
)
def test_extended_resource_names(name: str, valid: bool) -> None:
    assert is_extended_resource_name(name) is valid


def test_start_removes_sockets_but_keeps_the_checkpoint_and_other_files(short_dir: Path) -> None:
    (short_dir / CHECKPOINT).write_text("{}")
    (short_dir / "DEPRECATION").touch()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(short_dir / "old-plugin.sock"))
    listener.close()
    remove_sockets(short_dir)
    assert sorted(p.name for p in short_dir.iterdir()) == ["DEPRECATION", CHECKPOINT]


async def register(kubelet: KubeletSimulator, request: pb.RegisterRequest) -> None:
    async with grpc.aio.insecure_channel(f"unix://{kubelet.socket}") as channel:
        await pb_grpc.RegistrationStub(channel).Register(request, timeout=10)


def request(
    version: str = "v1beta1", resource: str = "huawei.com/Ascend910", endpoint: str = "plugin.sock"
) -> pb.RegisterRequest:
    return pb.RegisterRequest(version=version, endpoint=endpoint, resource_name=resource)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (request(version="v1alpha"), "not supported"),
        (request(resource="kubernetes.io/npu"), "invalid name"),
        (request(endpoint="nobody.sock"), "failed to dial"),
    ],
    ids=["version", "resource name", "dial-back"],
)
def test_register_rejections_reach_the_plugin_as_errors(short_dir: Path, bad: pb.RegisterRequest, message: str) -> None:
    async def scenario() -> None:
        kubelet = KubeletSimulator(short_dir, dial_timeout=0.5)
        await kubelet.start()
        try:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await register(kubelet, bad)
            assert raised.value.code() is grpc.StatusCode.UNKNOWN
            assert message in (raised.value.details() or "")
            assert kubelet.plugins == {} and len(kubelet.rejections) == 1
        finally:
            await kubelet.stop()

    asyncio.run(scenario())


def test_register_dials_back_and_keeps_list_and_watch_open(short_dir: Path) -> None:
    async def scenario() -> None:
        inventory = Inventory(profile_devices("atlas-800-9000"), failure_threshold=1, recovery_threshold=1)
        layout = HostLayout("/dev", Injection.NODES, (), ())
        service = DevicePluginService(DeviceListing(inventory), layout, "Ascend910", None)
        plugin_socket = short_dir / "plugin.sock"
        server = await start_unix_server(
            plugin_socket, lambda s: pb_grpc.add_DevicePluginServicer_to_server(service, s)
        )
        kubelet = KubeletSimulator(short_dir)
        await kubelet.start(clean=False)
        try:
            await register(kubelet, request())
            connection = kubelet.plugin("huawei.com/Ascend910")
            assert connection.options.get_preferred_allocation_available, "options were read during Register"
            await kubelet.wait_until(lambda: connection.updates == 1, 5, "first list")
            assert connection.healthy_ids() == [f"Ascend910-{i}" for i in range(8)]
            inventory.set_present(6, False)
            await kubelet.wait_until(lambda: connection.updates == 2, 5, "second list")
            assert "Ascend910-6" not in connection.healthy_ids()
            assert await kubelet.preferred(
                "huawei.com/Ascend910", ["Ascend910-1", "Ascend910-5", "Ascend910-7"], [], 2
            ) == ["Ascend910-5", "Ascend910-7"]
            service.close_streams()
            await kubelet.wait_until(lambda: not kubelet.plugins, 5, "disconnect after the stream ended")
        finally:
            await kubelet.stop()
            await stop_unix_server(server, plugin_socket)

    asyncio.run(scenario())
