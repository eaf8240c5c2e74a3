"""A device added to the inventory while the daemon serves belongs to the side the mode gives it:
DRA in `--mode dra` (published and preparable), the partition's side in `--mode both`."""

from __future__ import annotations

from dataclasses import replace

from npu_plugin.ascend.device import Device
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.both import both_args
from tests.support.daemon import Launcher, wait_until, write_inventory
from tests.support.dra import (
    DRIVER,
    Workspace,
    dra_args,
    make_char_device,
    plant_claim,
    published_names,
    result,
    run_with_kubelet,
)
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
RINGS = profile_devices("atlas-800-9000")  # ring-0: 0-3, ring-1: 4-7


def add_devices(workspace: Workspace, api: FakeKubeAPI, devices: list[Device], *added: Device) -> None:
    """Add devices to the inventory file until the first of them is published. The file is rewritten
    while waiting: a daemon still starting may not watch it yet, and the test is about ownership,
    not the watch."""
    for device in added:
        make_char_device(workspace.dev / device.device_node)

    def published() -> bool:
        write_inventory(workspace.inventory, [*devices, *added])
        return added[0].dra_name in published_names(api)

    wait_until(published, 30, f"{added[0].dra_name} published", interval=0.5)


def test_in_dra_mode_a_new_device_is_published_and_preparable(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    devices = profile_devices("atlas-800t-a2")
    daemon = launch_daemon(*dra_args(workspace))
    wait_until(lambda: len(published_names(fake_api)) == 8, 30, "the first slices")
    add_devices(workspace, fake_api, devices, replace(devices[7], physical_id=8, pci_bus_id="0000:ff:00.0"))
    claim = plant_claim(fake_api, "on-the-new-one", None, [result("npu-8")])

    async def scenario(kubelet: DraKubeletSimulator) -> str:
        await kubelet.wait_for_plugin(DRIVER)
        return (await kubelet.prepare([claim]))[claim.uid].error

    assert run_with_kubelet(workspace, fake_api, scenario) == ""
    assert "new device npu-8, served by dra" in daemon.log()


def test_in_both_mode_a_new_device_follows_the_partition(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    write_inventory(workspace.inventory, RINGS)
    daemon = launch_daemon(*both_args(workspace, "ring-1"))
    # No PodResources here: devices whose holders cannot be read stay with the device plugin at
    # start.
    daemon.wait_for_log("cannot read the kubelet PodResources API")
    in_ring_1 = replace(RINGS[7], physical_id=8, pci_bus_id="0000:fe:00.0")
    in_ring_0 = replace(RINGS[0], physical_id=9, pci_bus_id="0000:fd:00.0")
    add_devices(workspace, fake_api, RINGS, in_ring_1, in_ring_0)
    assert "npu-9" not in published_names(fake_api)
    daemon.wait_for_log("new device npu-9, served by device-plugin")
    assert "new device npu-8, served by dra" in daemon.log()
