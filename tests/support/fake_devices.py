"""Devices of the fake backend's inputs, for tests that need only the device list."""

from npu_plugin.ascend.device import Device
from npu_plugin.backends.fake.inventory_file import parse_inventory_file
from npu_plugin.backends.fake.profiles import profile_inventory


def profile_devices(name: str) -> list[Device]:
    """The devices of a built-in fake profile (`atlas-800t-a2`, ...)."""
    return profile_inventory(name).devices


def parse_inventory(text: str, source: str) -> list[Device]:
    """Devices of an inventory file; InventoryFileError names `source`, the line and the field."""
    return parse_inventory_file(text, source).devices
