"""Devices of the fake backend's inputs, for tests and benchmarks that need only the device list."""

from npu_plugin.ascend.device import Device
from npu_plugin.backends.fake.inventory_file import parse_inventory_file
from npu_plugin.backends.fake.profiles import profile_inventory


def profile_devices(name: str) -> list[Device]:
    """The devices of a built-in fake profile (`atlas-800t-a2`, ...)."""
    return profile_inventory(name).devices


def parse_inventory(text: str, source: str) -> list[Device]:
    """Devices of an inventory file; InventoryFileError names `source`, the line and the field."""
    return parse_inventory_file(text, source).devices


def many_devices(count: int) -> list[Device]:
    """`count` 910B3 dies, eight per NUMA node and per HCCS group (a large node, as far as the fake
    goes); PCI addresses stay distinct up to 65,536 dies (`0000:BB:DD.F`, eight functions a device,
    32 devices a bus)."""
    return [
        Device(
            physical_id=i,
            chip_name="910B3",
            device_type="Ascend910B",
            logic_id=i,
            card_id=i // 2,
            chip_id=i % 2,
            memory=64 * 2**30,
            ai_core=20,
            numa_node=i // 8,
            pci_bus_id=f"0000:{i // 256:02x}:{i % 256 // 8:02x}.{i % 8}",
            topology_group=f"ring-{i // 8}",
            driver_version="24.1.rc1",
        )
        for i in range(count)
    ]
