"""Helpers of the tests that drive a daemon in both mode: the node's kubelet side and the daemon
arguments."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from npu_plugin.sim.kubelet import KubeletSimulator
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support.daemon import DaemonProcess
from tests.support.dra import DRIVER, NODE, Workspace, async_wait_until, dra_args
from tests.support.fakeapi import FakeKubeAPI

RESOURCE = "huawei.com/Ascend910"


@dataclass
class Node:
    """The kubelet side of one node: device-plugin kubelet, DRA kubelet and PodResources."""

    kubelet: KubeletSimulator
    dra: DraKubeletSimulator
    pod_resources: PodResourcesSimulator

    def listed(self) -> dict[str, str]:
        plugin = self.kubelet.plugins.get(RESOURCE)
        return {} if plugin is None else {i: d.health for i, d in plugin.devices.items()}


def both_args(workspace: Workspace, dra_devices: str | None = "4-7", *extra: str) -> list[str]:
    """A both-mode daemon's arguments; `dra_devices` None leaves --dra-devices out."""
    return [
        *dra_args(workspace, *extra),
        "--mode",
        "both",
        *(("--dra-devices", dra_devices) if dra_devices is not None else ()),
        "--device-plugin-path",
        str(workspace.root / "dp"),
    ]


@asynccontextmanager
async def node(workspace: Workspace, api: FakeKubeAPI, *, pod_resources_up: bool = True) -> AsyncIterator[Node]:
    kubelet = KubeletSimulator(workspace.root / "dp")
    pod_resources = PodResourcesSimulator(workspace.root / "pr" / "kubelet.sock", RESOURCE)
    await kubelet.start()
    if pod_resources_up:
        await pod_resources.start()
    async with DraKubeletSimulator(workspace.reg, node_name=NODE, api_url=api.url) as dra:
        try:
            yield Node(kubelet, dra, pod_resources)
        finally:
            await pod_resources.stop()
            await kubelet.stop()


async def registered(sim: Node, daemon: DaemonProcess) -> None:
    await async_wait_until(lambda: RESOURCE in sim.kubelet.plugins and sim.listed(), what="device plugin list")
    await sim.dra.wait_for_plugin(DRIVER, timeout=10)
    assert daemon.process.poll() is None
