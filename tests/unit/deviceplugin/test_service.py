"""Pure parts of the device plugin service: what ListAndWatch lists and which ids Allocate
accepts."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.device import Health
from npu_plugin.deviceplugin.service import allocatable_ids, list_response
from npu_plugin.errors import AllocationError
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.sharing import Sharing
from npu_plugin.inventory.state import Inventory
from tests.support.fake_devices import profile_devices


def inventory() -> Inventory:
    inv = Inventory(
        profile_devices("atlas-800-9000"),
        failure_threshold=1,
        recovery_threshold=1,
        owners={6: Owner.DRA, 7: Owner.DRA},
    )
    inv.observe({i: Health.CRITICAL if i == 2 else Health.OK for i in range(8)})
    return inv


def test_list_leaves_out_dra_devices_and_carries_health_and_numa() -> None:
    response = list_response(inventory().snapshot())
    assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in response.devices] == [
        ("Ascend910-0", "Healthy", [0]),
        ("Ascend910-1", "Healthy", [0]),
        ("Ascend910-2", "Unhealthy", [0]),
        ("Ascend910-3", "Healthy", [0]),
        ("Ascend910-4", "Healthy", [1]),
        ("Ascend910-5", "Healthy", [1]),
    ]


def test_allocatable_ids_in_request_order() -> None:
    assert allocatable_ids(inventory().snapshot(), ["Ascend910-5", "Ascend910-0"], "Ascend910") == [5, 0]


@pytest.mark.parametrize(
    ("device_id", "problem"),
    [
        ("Ascend910-6", "owned by dra"),
        ("Ascend910-2", "unhealthy"),
        ("Ascend910-9", "unknown"),
        ("Ascend310P-1", "unknown"),
        ("npu-1", "unknown"),
        ("", "unknown"),
        ("Ascend910-01", "unknown"),
        ("Ascend910-1\n", "unknown"),
        ("Ascend910-\u0661", "unknown"),
    ],
)
def test_refused_ids_are_named(device_id: str, problem: str) -> None:
    with pytest.raises(AllocationError, match=problem) as raised:
        allocatable_ids(inventory().snapshot(), ["Ascend910-0", device_id], "Ascend910")
    assert repr(device_id) in str(raised.value) or device_id in str(raised.value)


def test_a_huge_id_is_named_without_repeating_it() -> None:
    with pytest.raises(AllocationError, match=r"unknown device id 'xxxx.*\.\.\. \(1048578 characters\)") as raised:
        allocatable_ids(inventory().snapshot(), ["x" * 2**20], "Ascend910")
    assert len(str(raised.value)) < 200


def shared_inventory() -> Inventory:
    inv = Inventory(profile_devices("atlas-300i-duo"), failure_threshold=1, recovery_threshold=1)
    inv.observe({i: Health.CRITICAL if i == 1 else Health.OK for i in range(4)})
    return inv


SHARED = Sharing.of("0-1", 3, profile_devices("atlas-300i-duo"))


def test_a_shared_chip_is_listed_as_its_shares_with_the_chips_health() -> None:
    response = list_response(shared_inventory().snapshot(), (), SHARED)
    assert [(d.ID, d.health) for d in response.devices] == [
        ("Ascend310P-0-share-0", "Healthy"),
        ("Ascend310P-0-share-1", "Healthy"),
        ("Ascend310P-0-share-2", "Healthy"),
        ("Ascend310P-1-share-0", "Unhealthy"),
        ("Ascend310P-1-share-1", "Unhealthy"),
        ("Ascend310P-1-share-2", "Unhealthy"),
        ("Ascend310P-2", "Healthy"),
        ("Ascend310P-3", "Healthy"),
    ]
    assert list_response(shared_inventory().snapshot(), (0,), SHARED).devices[0].ID == "Ascend310P-1-share-0"


def test_several_shares_of_one_chip_give_the_chip_once() -> None:
    ids = ["Ascend310P-0-share-2", "Ascend310P-3", "Ascend310P-0-share-0"]
    assert allocatable_ids(shared_inventory().snapshot(), ids, "Ascend310P", (), SHARED) == [0, 3]


@pytest.mark.parametrize(
    ("device_id", "problem"),
    [
        (
            "Ascend310P-0",
            "device Ascend310P-0 is shared: it is listed as its shares, Ascend310P-0-share-0 to Ascend310P-0-share-2",
        ),
        ("Ascend310P-0-share-3", "unknown device id 'Ascend310P-0-share-3'"),
        ("Ascend310P-2-share-0", "unknown device id 'Ascend310P-2-share-0'"),
        ("Ascend910-0-share-0", "unknown device id 'Ascend910-0-share-0'"),
        ("Ascend310P-1-share-0", "device Ascend310P-1-share-0 is unhealthy"),
        ("Ascend310P-9-share-0", "unknown device id 'Ascend310P-9-share-0'"),
    ],
)
def test_refused_share_ids_are_named(device_id: str, problem: str) -> None:
    with pytest.raises(AllocationError) as raised:
        allocatable_ids(shared_inventory().snapshot(), ["Ascend310P-0-share-1", device_id], "Ascend310P", (), SHARED)
    assert str(raised.value) == problem
