"""Device node names under /dev: one spelling, one parser (`ascend/device.py`)."""

import pytest

from npu_plugin.ascend.device import device_node, parse_device_node, vnpu_node


def test_names() -> None:
    assert (device_node(3), vnpu_node(100)) == ("davinci3", "vdavinci100")


@pytest.mark.parametrize(
    ("name", "physical_id"),
    [
        ("davinci0", 0),
        ("davinci15", 15),
        ("davinci_manager", None),
        ("vdavinci100", None),
        ("davinci3\n", None),
        ("davinci\u0663", None),  # an Arabic-Indic three is not a kernel name
        ("davinci1234567", None),
        ("", None),
    ],
)
def test_parse_device_node(name: str, physical_id: int | None) -> None:
    assert parse_device_node(name) == physical_id
