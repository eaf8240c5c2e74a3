"""The handover component against a real PodResources endpoint on a Unix socket."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from npu_plugin.config import Mode
from npu_plugin.handover.workflow import Handover
from npu_plugin.inventory.ownership import Owner, Partition
from npu_plugin.inventory.state import Inventory
from npu_plugin.observability.metrics import Metrics
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support.fake_devices import profile_devices

DEVICES = profile_devices("atlas-800t-a2")
RESOURCE, DRIVER = "huawei.com/Ascend910", "npu.huawei.com"


def _setup(socket: Path, *, dra_held: set[int], mode: Mode = Mode.BOTH) -> tuple[Inventory, Handover]:
    desired = Partition(mode, frozenset({4, 5, 6, 7} if mode is Mode.BOTH else ())).owners(DEVICES)
    inventory = Inventory(DEVICES, failure_threshold=1, recovery_threshold=1, owners=desired, desired=desired)
    handover = Handover(
        inventory=inventory,
        pod_resources_socket=socket,
        resource_name=RESOURCE,
        driver=DRIVER,
        dra_held=lambda: set(dra_held),
        mode=mode,
        poll_seconds=0.01,
    )
    return inventory, handover


def test_a_held_device_stays_until_released_then_moves(tmp_path: Path) -> None:
    socket = tmp_path / "pod-resources" / "kubelet.sock"

    async def scenario() -> tuple[Owner, bool, Owner, bool]:
        kubelet = PodResourcesSimulator(socket, RESOURCE)
        await kubelet.start()
        try:
            kubelet.hold_devices("default", "trainer", "main", ["Ascend910-4"])
            inventory, handover = _setup(socket, dra_held=set())
            await handover.take_ownership()
            before = inventory.snapshot().get(4)
            assert before is not None
            kubelet.release("default", "trainer")
            stop = asyncio.Event()
            # run ends by itself once no device drains any more
            await asyncio.wait_for(handover.run(stop), timeout=30)
            after = inventory.snapshot().get(4)
            assert after is not None
            return before.owner, before.draining, after.owner, after.draining
        finally:
            await kubelet.stop()

    assert asyncio.run(scenario()) == (Owner.DEVICE_PLUGIN, True, Owner.DRA, False)


@pytest.mark.parametrize(("mode", "owner_of_4"), [(Mode.BOTH, Owner.DEVICE_PLUGIN), (Mode.DRA, Owner.DRA)])
def test_an_unreadable_podresources_warns_once_and_picks_the_safe_side(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: Mode, owner_of_4: Owner
) -> None:
    inventory, handover = _setup(tmp_path / "absent.sock", dra_held={5}, mode=mode)

    async def scenario() -> None:
        await handover.take_ownership()
        await handover.holders()

    with caplog.at_level(logging.WARNING, logger="npu_plugin.handover.workflow"):
        asyncio.run(scenario())
    assert sum("cannot read the kubelet PodResources API" in r.getMessage() for r in caplog.records) == 1
    snapshot = inventory.snapshot()
    assert [snapshot.get(4).owner, snapshot.get(5).owner] == [owner_of_4, Owner.DRA]  # type: ignore[union-attr]


def test_dra_mode_keeps_a_device_a_device_plugin_pod_holds_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Pure DRA mode reads PodResources too: a device the device plugin handed out before the switch is not
    published until its pod releases it, and the log says that in DRA's terms; the metric counts it waiting."""
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    inventory, handover = _setup(socket, dra_held=set(), mode=Mode.DRA)

    async def scenario() -> None:
        kubelet = PodResourcesSimulator(socket, RESOURCE)
        await kubelet.start()
        try:
            kubelet.hold_devices("default", "trainer", "main", ["Ascend910-2"])
            await handover.take_ownership()
        finally:
            await kubelet.stop()

    with caplog.at_level(logging.INFO, logger="npu_plugin.handover"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records] == [
        "device npu-2 is still held by a container the device plugin gave it to: DRA publishes it once released"
    ]
    view = inventory.snapshot().get(2)
    assert view is not None and (view.owner, view.draining) == (Owner.DEVICE_PLUGIN, True)
    metrics = Metrics()
    metrics.record_devices(inventory.snapshot())
    pending = {
        to.value: metrics.registry.get_sample_value("npu_plugin_device_handovers_pending", {"to": to.value})
        for to in Owner
    }
    assert pending == {"dra": 1.0, "device-plugin": 0.0}


def test_both_mode_names_the_side_a_held_device_stays_with(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    socket = tmp_path / "pod-resources" / "kubelet.sock"

    async def scenario() -> None:
        kubelet = PodResourcesSimulator(socket, RESOURCE)
        await kubelet.start()
        try:
            kubelet.hold_devices("default", "trainer", "main", ["Ascend910-4"])
            _, handover = _setup(socket, dra_held={1})
            await handover.take_ownership()
        finally:
            await kubelet.stop()

    with caplog.at_level(logging.INFO, logger="npu_plugin.handover"):
        asyncio.run(scenario())
    assert sorted(r.getMessage() for r in caplog.records) == [
        "device npu-1 stays with dra until released (--dra-devices gives it to device-plugin)",
        "device npu-4 stays with device-plugin until released (--dra-devices gives it to dra)",
    ]


def test_device_plugin_mode_keeps_an_npu_a_claims_container_holds_until_it_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A node switched from dra to device-plugin while a claim's pod still runs: its NPU is not the
    device plugin's to offer until that container ends (never one NPU to two pods)."""
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    inventory, handover = _setup(socket, dra_held=set(), mode=Mode.DEVICE_PLUGIN)

    async def scenario() -> tuple[tuple[Owner, bool], tuple[Owner, bool]]:
        kubelet = PodResourcesSimulator(socket, RESOURCE)
        await kubelet.start()
        try:
            kubelet.hold_claim("default", "trainer", "main", driver=DRIVER, pool="node-a", device="npu-3")
            await handover.take_ownership()
            before = inventory.snapshot().get(3)
            assert before is not None
            kubelet.release("default", "trainer")
            await asyncio.wait_for(handover.run(asyncio.Event()), timeout=30)
            after = inventory.snapshot().get(3)
            assert after is not None
            return (before.owner, before.draining), (after.owner, after.draining)
        finally:
            await kubelet.stop()

    with caplog.at_level(logging.INFO, logger="npu_plugin.handover"):
        before, after = asyncio.run(scenario())
    assert before == (Owner.DRA, True)  # the device plugin neither lists nor allocates it
    assert after == (Owner.DEVICE_PLUGIN, False)
    assert [r.getMessage() for r in caplog.records] == [
        "device npu-3 is still held by a container of a DRA claim (the node was switched from dra with claims "
        "prepared): the device plugin offers it once that container ends",
        "device npu-3 released by dra, now served by device-plugin",
    ]
