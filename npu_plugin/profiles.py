"""Built-in fake inventories for demos and tests; real hosts vary."""

from __future__ import annotations

from npu_plugin.device import Device, Health

GiB = 2**30
_A2_BUSES = (0xC1, 0x01, 0x41, 0x81, 0xC2, 0x02, 0x42, 0x82)
_9000_BUSES = (0x1A, 0x3B, 0x5C, 0x7D, 0x9E, 0xBF, 0xD0, 0xE1)


def _atlas_800t_a2() -> list[Device]:
    return [
        Device(
            physical_id=i,
            chip_name="910B3",
            device_type="Ascend910B",
            logic_id=i,
            card_id=i,
            memory=64 * GiB,
            ai_core=20,
            numa_node=i // 2,
            pci_bus_id=f"0000:{_A2_BUSES[i]:02x}:00.0",
            topology_group="ring-0",
            driver_version="24.1.rc1",
            health=Health.OK,
        )
        for i in range(8)
    ]


def _atlas_800_9000() -> list[Device]:
    return [
        Device(
            physical_id=i,
            chip_name="910",
            device_type="Ascend910",
            logic_id=i,
            card_id=i,
            memory=32 * GiB,
            ai_core=32,
            numa_node=i // 4,
            pci_bus_id=f"0000:{_9000_BUSES[i]:02x}:00.0",
            topology_group=f"ring-{i // 4}",
            driver_version="22.0.3.1",
            health=Health.OK,
        )
        for i in range(8)
    ]


def _atlas_300i_duo() -> list[Device]:
    return [
        Device(
            physical_id=i,
            chip_name="310P3",
            device_type="Ascend310P",
            logic_id=i,
            card_id=i // 2,
            chip_id=i % 2,
            memory=24 * GiB,
            ai_core=8,
            numa_node=0,
            pci_bus_id=f"0000:{0x01 + (i // 2) * 0x80:02x}:00.{i % 2}",
            topology_group=f"card-{i // 2}",
            driver_version="24.1.rc1",
            health=Health.OK,
        )
        for i in range(4)
    ]


PROFILES = {
    "atlas-800t-a2": _atlas_800t_a2,
    "atlas-800-9000": _atlas_800_9000,
    "atlas-300i-duo": _atlas_300i_duo,
}


def profile_devices(name: str) -> list[Device]:
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(f"unknown fake profile {name!r} (allowed: {', '.join(PROFILES)})") from None
