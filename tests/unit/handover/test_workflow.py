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
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support.fake_devices import profile_devices

DEVICES = profile_devices("atlas-800t-a2")
RESOURCE, DRIVER = "huawei.com/Ascend910", "npu.huawei.com"


def _setup(socket: Path, *, keeps_device_plugin_side: bool, dra_held: set[int]) -> tuple[Inventory, Handover]:
    desired = Partition(Mode.BOTH, frozenset({4, 5, 6, 7})).owners(DEVICES)
    inventory = Inventory(DEVICES, failure_threshold=1, recovery_threshold=1, owners=desired, desired=desired)
    handover = Handover(
        inventory=inventory,
        pod_resources_socket=socket,
        resource_name=RESOURCE,
        driver=DRIVER,
        dra_held=lambda: set(dra_held),
        keeps_device_plugin_side=keeps_device_plugin_side,
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
            inventory, handover = _setup(socket, keeps_device_plugin_side=True, dra_held=set())
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


@pytest.mark.parametrize(
    ("keeps_device_plugin_side", "owner_of_4"),
    [(True, Owner.DEVICE_PLUGIN), (False, Owner.DRA)],
)
def test_an_unreadable_podresources_warns_once_and_picks_the_safe_side(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, keeps_device_plugin_side: bool, owner_of_4: Owner
) -> None:
    inventory, handover = _setup(
        tmp_path / "absent.sock", keeps_device_plugin_side=keeps_device_plugin_side, dra_held={5}
    )

    async def scenario() -> None:
        await handover.take_ownership()
        await handover.holders()

    with caplog.at_level(logging.WARNING, logger="npu_plugin.handover.workflow"):
        asyncio.run(scenario())
    assert sum("cannot read the kubelet PodResources API" in r.getMessage() for r in caplog.records) == 1
    snapshot = inventory.snapshot()
    assert [snapshot.get(4).owner, snapshot.get(5).owner] == [owner_of_4, Owner.DRA]  # type: ignore[union-attr]
