"""The DeviceClasses that map a name the device plugin advertises, and the line that says so."""

from __future__ import annotations

from typing import Any

import pytest

from npu_plugin.config import Mode
from npu_plugin.deviceplugin.extended_classes import Conflict, conflicts, warning


def a_class(name: str, resource: str | None) -> Any:
    spec = {} if resource is None else {"extendedResourceName": resource}
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


@pytest.mark.parametrize(
    ("classes", "advertised", "found"),
    [
        ([], {"huawei.com/Ascend910"}, set()),
        ([a_class("npu.huawei.com", None)], {"huawei.com/Ascend910"}, set()),  # no mapping
        (
            [a_class("a", "huawei.com/Ascend910"), a_class("b", "huawei.com/Ascend310P")],
            {"huawei.com/Ascend910"},
            {Conflict("a", "huawei.com/Ascend910")},
        ),
        (  # two classes mapping one name: each is told
            [a_class("a", "huawei.com/Ascend910"), a_class("b", "huawei.com/Ascend910")],
            {"huawei.com/Ascend910"},
            {Conflict("a", "huawei.com/Ascend910"), Conflict("b", "huawei.com/Ascend910")},
        ),
        (  # a static vNPU resource the device plugin serves
            [a_class("v", "huawei.com/Ascend910-5c.1cpu.16g")],
            {"huawei.com/Ascend910", "huawei.com/Ascend910-5c.1cpu.16g"},
            {Conflict("v", "huawei.com/Ascend910-5c.1cpu.16g")},
        ),
        ([a_class("a", "huawei.com/Ascend910")], set(), set()),
    ],
)
def test_a_class_conflicts_when_it_maps_an_advertised_name(
    classes: list[Any], advertised: set[str], found: set[Conflict]
) -> None:
    assert conflicts(classes, advertised) == found


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        (Mode.BOTH, "never from this node's DRA devices (KEP-5004); move the node to --mode dra, or delete the class"),
        (Mode.DEVICE_PLUGIN, "not from DRA (KEP-5004); move the node to --mode dra"),
    ],
)
def test_the_warning_names_class_and_resource_and_the_way_out(mode: Mode, says: str) -> None:
    line = warning(Conflict("ascend910.extended.npu.huawei.com", "huawei.com/Ascend910"), mode)
    assert line.startswith(
        "DeviceClass ascend910.extended.npu.huawei.com maps huawei.com/Ascend910, which this node's device plugin "
        "also advertises: the scheduler serves that name here from the device plugin only"
    )
    assert says in line and "\n" not in line
