"""Built-in fake inventories for demos and tests; real hosts vary.

The 910 profiles carry device IPs the way /etc/hccn.conf numbers them in Huawei's guides
(`address_<i>=192.168.100.10<i+1>`, one subnet per box); 310P cards have no RoCE port, hence none.

The vNPU tables are the driver's own, as `npu-smi info -t template-info` prints them (memory: the
"show" figure), from Huawei's open-sourced driver (verylucky01/driver@e29d066f,
src/custom/dev_prod/user/dcmi/dcmi_inner/src/dcmi_inner_info_get.c: g_910B_bin1_show_template,
g_910_32G_template, g_310p_24G_template). Chip totals: 910B3 from `npu-smi info -t info-vnpu` in
Project-HAMi/ascend-device-plugin#135; 310P3 from Huawei's MindX DL user guide (mxdlug_021), which
equal the all-DVPP template vir04_4c_dvpp. Which products may create vNPUs on demand follows
mind-cluster's support matrix (virtual_instance_with_hdk/01_description.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from npu_plugin.ascend.device import Device, Health
from npu_plugin.ascend.vnpu import (
    TEMPLATE_RESOURCES,
    ChipMode,
    ChipVnpu,
    VnpuTemplate,
    default_id_range,
    static_only_reason,
)

GiB = 2**30
MiB = 2**20


@dataclass(frozen=True, slots=True)
class FakeHost:
    """What the fake backend serves, from a profile or an inventory file: devices and, for chips
    with vNPU facts (an inventory file's `vnpu:` block), those facts."""

    devices: list[Device]
    vnpu: Mapping[int, ChipVnpu] = field(default_factory=dict)


def _templates(rows: tuple[tuple[str, int, int, tuple[float, ...]], ...]) -> tuple[VnpuTemplate, ...]:
    """Rows of (name, AI cores, memory MiB, (AICPU, VPC, VENC, VDEC, JPEGD, JPEGE, PNGD)), as the
    driver's tables."""
    return tuple(
        VnpuTemplate(
            name,
            aicore,
            memory_mib * MiB,
            {use: Decimal(str(amount)) for use, amount in zip(TEMPLATE_RESOURCES, amounts, strict=True) if amount > 0},
        )
        for name, aicore, memory_mib, amounts in rows
    )


_910B_BIN1 = _templates(
    (
        ("vir05_1c_16g", 5, 16384, (1, 2, 0, 0, 6, 1, 0)),
        ("vir10_3c_32g", 10, 32768, (3, 4, 0, 1, 12, 2, 0)),
    )
)
_910B3_TOTALS = {"aicore": 20, "aicpu": 7, "vpc": 9, "venc": 0, "vdec": 2, "jpegd": 24, "jpege": 4}  # PNGD: NA
_910_32G = _templates(
    (
        ("vir02", 2, 2048, (1, 1, 0, 1, 1, 0, 1.5)),
        ("vir04", 4, 4096, (1, 2, 0, 2, 2, 1, 3)),
        ("vir08", 8, 8192, (3, 4, 0, 4, 4, 2, 6)),
        ("vir16", 16, 16384, (7, 8, 0, 8, 8, 4, 12)),
    )
)
_910_TOTALS = {"aicore": 32}  # AICPU and the media units: NA
_310P_24G = _templates(
    (
        ("vir01", 1, 3072, (1, 1, 0, 1, 2, 1, 0)),
        ("vir02", 2, 6144, (2, 3, 1, 3, 4, 2, 0)),
        ("vir02_1c", 2, 6144, (1, 3, 0, 3, 4, 2, 0)),
        ("vir04", 4, 12288, (4, 6, 2, 6, 8, 4, 0)),
        ("vir04_3c", 4, 12288, (3, 6, 1, 6, 8, 4, 0)),
        ("vir04_3c_ndvpp", 4, 12288, (3, 0, 0, 0, 0, 0, 0)),
        ("vir04_4c_dvpp", 4, 12288, (4, 12, 3, 12, 16, 8, 0)),
    )
)
_310P3_TOTALS = {"aicore": 8, "aicpu": 7, "vpc": 12, "venc": 3, "vdec": 12, "jpegd": 16, "jpege": 8}  # PNGD: NA


def _with_vnpus(devices: list[Device], templates: tuple[VnpuTemplate, ...], totals: dict[str, int]) -> FakeHost:
    """The devices, each chip empty of vNPUs, in container mode, dynamic where the support matrix
    allows it."""
    vnpu = {}
    for device in devices:
        chips_on_card = sum(1 for d in devices if d.card_id == device.card_id)
        vnpu[device.physical_id] = ChipVnpu(
            physical_id=device.physical_id,
            mode=ChipMode.CONTAINER,
            totals={name: Decimal(value) for name, value in totals.items()},
            templates=templates,
            id_range=default_id_range(device.physical_id, device.device_type),
            dynamic_supported=static_only_reason(device.device_type, chips_on_card) is None,
        )
    return FakeHost(devices, vnpu)


_A2_BUSES = (0xC1, 0x01, 0x41, 0x81, 0xC2, 0x02, 0x42, 0x82)
_9000_BUSES = (0x1A, 0x3B, 0x5C, 0x7D, 0x9E, 0xBF, 0xD0, 0xE1)


def _atlas_800t_a2() -> FakeHost:
    devices = [
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
            device_ip=f"192.168.100.{101 + i}",
        )
        for i in range(8)
    ]
    return _with_vnpus(devices, _910B_BIN1, _910B3_TOTALS)


def _atlas_800_9000() -> FakeHost:
    devices = [
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
            device_ip=f"192.168.10.{101 + i}",
        )
        for i in range(8)
    ]
    return _with_vnpus(devices, _910_32G, _910_TOTALS)


def _310p3_cards(chips: int, chips_per_card: int, bus_stride: int) -> list[Device]:
    return [
        Device(
            physical_id=i,
            chip_name="310P3",
            device_type="Ascend310P",
            logic_id=i,
            card_id=i // chips_per_card,
            chip_id=i % chips_per_card,
            memory=24 * GiB,
            ai_core=8,
            numa_node=0,
            pci_bus_id=f"0000:{0x01 + (i // chips_per_card) * bus_stride:02x}:00.{i % chips_per_card}",
            topology_group=f"card-{i // chips_per_card}",
            driver_version="24.1.rc1",
            health=Health.OK,
        )
        for i in range(chips)
    ]


def _atlas_300i_duo() -> FakeHost:
    return _with_vnpus(_310p3_cards(4, chips_per_card=2, bus_stride=0x80), _310P_24G, _310P3_TOTALS)


def _atlas_300i_pro() -> FakeHost:
    return _with_vnpus(_310p3_cards(4, chips_per_card=1, bus_stride=0x40), _310P_24G, _310P3_TOTALS)


PROFILES: dict[str, Callable[[], FakeHost]] = {
    "atlas-800t-a2": _atlas_800t_a2,
    "atlas-800-9000": _atlas_800_9000,
    "atlas-300i-duo": _atlas_300i_duo,
    "atlas-300i-pro": _atlas_300i_pro,
}


def profile_inventory(name: str) -> FakeHost:
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(f"unknown fake profile {name!r} (allowed: {', '.join(PROFILES)})") from None
