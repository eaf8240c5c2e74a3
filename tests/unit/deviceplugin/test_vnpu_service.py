"""Pure parts of the device plugin's vNPU resources: Ascend's names and ids, what each resource
lists, which chips leave the whole-NPU list, and which ids Allocate accepts."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from npu_plugin.ascend.device import Health
from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.deviceplugin.listing import Listing, virtual_devices, vnpu_resource_name
from npu_plugin.deviceplugin.service import allocatable_ids, list_response
from npu_plugin.deviceplugin.vnpu_service import allocatable_vnpu, vnpu_list_response
from npu_plugin.errors import AllocationError
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from tests.support.fake_devices import profile_devices

SMALL = "huawei.com/Ascend910-5c.1cpu.16g"
VNPUS = {
    0: (Vnpu(0, 100, "vir05_1c_16g"), Vnpu(0, 101, "vir05_1c_16g")),
    5: (Vnpu(5, 180, "vir10_3c_32g"),),
    6: (Vnpu(6, 196, "vir05_1c_16g"),),  # a DRA chip
    7: (Vnpu(7, 212, "vir05_1c_16g_x"),),  # no suffix for this name
}


def listing(vnpus: Mapping[int, tuple[Vnpu, ...]] = VNPUS) -> Listing:
    devices = profile_devices("atlas-800t-a2")
    inventory = Inventory(devices, failure_threshold=1, recovery_threshold=1, owners={6: Owner.DRA})
    inventory.observe({i: Health.CRITICAL if i == 5 else Health.OK for i in range(8)})
    return Listing(inventory.snapshot(), vnpus, tuple(virtual_devices("huawei.com", devices, vnpus)))


@pytest.mark.parametrize(
    ("device_type", "template", "resource"),
    [
        ("Ascend910B", "vir05_1c_16g", "huawei.com/Ascend910-5c.1cpu.16g"),
        ("Ascend910", "vir16", "huawei.com/Ascend910-16c"),
        ("Ascend910C", "vir10_3c_16g_nm", "huawei.com/Ascend910-10c.3cpu.16g.ndvpp"),
        ("Ascend310P", "vir04_4c_dvpp", "huawei.com/Ascend310P-4c.4cpu.dvpp"),
        ("Ascend310P", "vir02", "huawei.com/Ascend310P-2c"),
        ("Ascend910B", "vir05_1c_16g_x", None),
    ],
)
def test_resource_names_follow_ascends_rule(device_type: str, template: str, resource: str | None) -> None:
    assert vnpu_resource_name("huawei.com", device_type, template) == resource


def test_ids_are_ascends_and_a_template_without_a_suffix_is_not_offered() -> None:
    assert [(d.device_id, d.resource_name) for d in listing().virtual] == [
        ("Ascend910-5c.1cpu.16g-100-0", SMALL),
        ("Ascend910-5c.1cpu.16g-101-0", SMALL),
        ("Ascend910-10c.3cpu.32g-180-5", "huawei.com/Ascend910-10c.3cpu.32g"),
        ("Ascend910-5c.1cpu.16g-196-6", SMALL),
    ]


def test_a_resource_lists_its_vnpus_on_device_plugin_chips_with_the_chips_health() -> None:
    assert [(d.ID, d.health) for d in vnpu_list_response(listing(), SMALL).devices] == [
        ("Ascend910-5c.1cpu.16g-100-0", "Healthy"),
        ("Ascend910-5c.1cpu.16g-101-0", "Healthy"),
    ]
    large = vnpu_list_response(listing(), "huawei.com/Ascend910-10c.3cpu.32g").devices
    assert [(d.ID, d.health) for d in large] == [("Ascend910-10c.3cpu.32g-180-5", "Unhealthy")]
    assert listing().resources() == {SMALL, "huawei.com/Ascend910-10c.3cpu.32g"}, "chip 6 is DRA's"


def test_a_chip_with_any_vnpu_leaves_the_whole_list_and_is_refused_whole() -> None:
    current = listing()
    ids = [d.ID for d in list_response(current.snapshot, current.vnpus.keys()).devices]
    assert ids == [f"Ascend910-{i}" for i in (1, 2, 3, 4)], "0, 5 and 7 split; 6 is DRA's"
    with pytest.raises(AllocationError, match="Ascend910-7 is split into vNPUs"):
        allocatable_ids(current.snapshot, ["Ascend910-7"], "Ascend910", current.vnpus.keys())
    assert allocatable_ids(current.snapshot, ["Ascend910-7"], "Ascend910") == [7], "without vNPUs it is whole"


def test_allocate_grants_the_vnpu_id_and_its_chip() -> None:
    grant = allocatable_vnpu(listing(), SMALL, ["Ascend910-5c.1cpu.16g-101-0"])
    assert (grant.ids, grant.physical_ids) == ((101,), (0,))


@pytest.mark.parametrize(
    ("device_ids", "error"),
    [
        (["Ascend910-5c.1cpu.16g-100-0", "Ascend910-5c.1cpu.16g-101-0"], "Ascend supports one vNPU per container"),
        (["Ascend910-5c.1cpu.16g-102-0"], "unknown device id 'Ascend910-5c.1cpu.16g-102-0'"),
        (["Ascend910-10c.3cpu.32g-180-5"], "unknown device id .* for huawei.com/Ascend910-5c.1cpu.16g"),
        (["Ascend910-5c.1cpu.16g-196-6"], "owned by dra"),
        (["Ascend910-0"], "unknown device id"),
    ],
)
def test_allocate_refuses(device_ids: list[str], error: str) -> None:
    with pytest.raises(AllocationError, match=error):
        allocatable_vnpu(listing(), SMALL, device_ids)


def test_an_unhealthy_chips_vnpu_is_refused() -> None:
    with pytest.raises(AllocationError, match="unhealthy"):
        allocatable_vnpu(listing(), "huawei.com/Ascend910-10c.3cpu.32g", ["Ascend910-10c.3cpu.32g-180-5"])
