"""The DCMI C ABI (libdcmi.so): struct layouts, function signatures, codes, and pure decoders.

Layouts and signatures follow Huawei's `dcmi_interface_api.h` as vendored in Ascend/mind-cluster
(component/ascend-common/devmanager/dcmi/) and shipped in the CANN driver (src/custom/include/).
Nothing here loads the library; the decoders are pure functions.
"""

from __future__ import annotations

import ctypes
import ipaddress
from collections.abc import Mapping
from decimal import Decimal

from npu_plugin.ascend.device import Health, LinkState, device_type_for_chip

MAX_CHIP_NAME_LEN = 32
MAX_CARD_NUM = 64
VERSION_BUFFER_LEN = 64


# Values of the anonymous topology enum in dcmi_interface_api.h (DCMI_TOPO_TYPE_SELF = 0, ...).
TOPO_SELF = 0
TOPO_SYS = 1
TOPO_PHB = 2
TOPO_HCCS = 3
TOPO_PXB = 4
TOPO_PIX = 5
TOPO_SIO = 6
TOPO_HCCS_SW = 7
TOPO_UB = 8
TOPO_BUTT = 9

_PEER_LINKS = frozenset({TOPO_HCCS, TOPO_HCCS_SW, TOPO_SIO})

# dcmi_board_info.board_id of Atlas A3 (910C) boards: A900/A9000 A3 SuperPoD bins 1-3 (0xb0-0xb2)
# and Atlas 800I A3 (0xb3, 0xb4), as mind-cluster's devmanager lists them. Their dies answer the v1
# chip call with plain `Ascend910`, like a 910A.
A3_BOARD_IDS = frozenset({0xB0, 0xB1, 0xB2, 0xB3, 0xB4})

_HEALTH_CODES = {0: Health.OK, 1: Health.WARNING, 2: Health.ALARM, 3: Health.CRITICAL}


class ChipInfo(ctypes.Structure):
    """struct dcmi_chip_info."""

    _fields_ = [
        ("chip_type", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_name", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_ver", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", ctypes.c_uint),
    ]


class ChipInfoV2(ctypes.Structure):
    """struct dcmi_chip_info_v2: dcmi_chip_info plus npu_name, the model on the module."""

    _fields_ = [
        ("chip_type", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_name", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_ver", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", ctypes.c_uint),
        ("npu_name", ctypes.c_ubyte * MAX_CHIP_NAME_LEN),
    ]


class BoardInfo(ctypes.Structure):
    """struct dcmi_board_info."""

    _fields_ = [
        ("board_id", ctypes.c_uint),
        ("pcb_id", ctypes.c_uint),
        ("bom_id", ctypes.c_uint),
        ("slot_id", ctypes.c_uint),
    ]


class PcieInfoAll(ctypes.Structure):
    """struct dcmi_pcie_info_all (64 bytes), filled by dcmi_get_device_pcie_info_v2."""

    _fields_ = [
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    ]


class HbmInfo(ctypes.Structure):
    """struct dcmi_hbm_info; memory_size in MB."""

    _fields_ = [
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    ]


class MemoryInfoV3(ctypes.Structure):
    """struct dcmi_get_memory_info_stru (DDR), filled by dcmi_get_device_memory_info_v3; sizes in
    MB."""

    _fields_ = [
        ("memory_size", ctypes.c_ulonglong),
        ("memory_available", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 60),
    ]


# ---- vNPUs: dcmi_get_device_info(card, device, DCMI_MAIN_CMD_VDEV_MNG, <sub command>, buffer,
# &size)

MAIN_CMD_VDEV_MNG = 52
VDEV_SUB_CMD_ONE = 0  # one vNPU: the caller sets dcmi_vdev_query_stru.vdev_id
VDEV_SUB_CMD_TOTAL = 1  # dcmi_soc_total_resource
VDEV_SUB_CMD_FREE = 2  # dcmi_soc_free_resource
VDEV_NAME_LEN = 16
VDEV_RESERVE = 32
SOC_SPLIT_MAX = 32
VFG_ID_ANY = 0xFFFFFFFF  # "the driver picks the vGroup", as mind-cluster creates
VDEVICE_MODE_CONTAINER = 0
VDEVICE_MODE_VM = 1
# "Not available" sentinels (npu-smi prints NA for them): AICPU 0xFFFF, media and AI cores -1.0.
AICPU_NA = 0xFFFF
FLOAT_NA = -1.0
MEMORY_NA = 0xFFFFFFFFFFFFFFFF


class CreateVdevRes(ctypes.Structure):
    """struct dcmi_create_vdev_res_stru: what dcmi_create_vdevice makes."""

    _fields_ = [
        ("vdev_id", ctypes.c_uint),
        ("vfg_id", ctypes.c_uint),
        ("template_name", ctypes.c_char * 32),
        ("reserved", ctypes.c_ubyte * 64),
    ]


class CreateVdevOut(ctypes.Structure):
    """struct dcmi_create_vdev_out: what dcmi_create_vdevice made."""

    _fields_ = [
        ("vdev_id", ctypes.c_uint),
        ("pcie_bus", ctypes.c_uint),
        ("pcie_device", ctypes.c_uint),
        ("pcie_func", ctypes.c_uint),
        ("vfg_id", ctypes.c_uint),
        ("reserved", ctypes.c_ubyte * VDEV_RESERVE),
    ]


class BaseResource(ctypes.Structure):
    """struct dcmi_base_resource."""

    _fields_ = [
        ("token", ctypes.c_ulonglong),
        ("token_max", ctypes.c_ulonglong),
        ("task_timeout", ctypes.c_ulonglong),
        ("vfg_id", ctypes.c_uint),
        ("vip_mode", ctypes.c_ubyte),
        ("reserved", ctypes.c_ubyte * (VDEV_RESERVE - 1)),
    ]


class ComputingResource(ctypes.Structure):
    """struct dcmi_computing_resource; memory_size and vdev_memory_* in MB."""

    _fields_ = [
        ("aic", ctypes.c_float),
        ("aiv", ctypes.c_float),
        *((name, ctypes.c_ushort) for name in ("dsa", "rtsq", "acsq", "cdqm", "c_core", "ffts", "sdma", "pcie_dma")),
        ("memory_size", ctypes.c_ulonglong),
        *((name, ctypes.c_uint) for name in ("event_id", "notify_id", "stream_id", "model_id")),
        *(
            (name, ctypes.c_ushort)
            for name in ("topic_schedule_aicpu", "host_ctrl_cpu", "host_aicpu", "device_aicpu", "topic_ctrl_cpu_slot")
        ),
        ("vdev_aicore_utilization", ctypes.c_uint),
        ("vdev_memory_total", ctypes.c_ulonglong),
        ("vdev_memory_free", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ubyte * 12),
    ]


class MediaResource(ctypes.Structure):
    """struct dcmi_media_resource: the DVPP units."""

    _fields_ = [
        *((name, ctypes.c_float) for name in ("jpegd", "jpege", "vpc", "vdec", "pngd", "venc")),
        ("reserved", ctypes.c_ubyte * VDEV_RESERVE),
    ]


class VdevQueryInfo(ctypes.Structure):
    """struct dcmi_vdev_query_info: one existing vNPU."""

    _fields_ = [
        ("name", ctypes.c_char * VDEV_NAME_LEN),
        ("status", ctypes.c_uint),
        ("is_container_used", ctypes.c_uint),
        ("vfid", ctypes.c_uint),
        ("vfg_id", ctypes.c_uint),
        ("container_id", ctypes.c_ulonglong),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    ]


class VdevQuery(ctypes.Structure):
    """struct dcmi_vdev_query_stru: sub-command 0's buffer."""

    _fields_ = [("vdev_id", ctypes.c_uint), ("query_info", VdevQueryInfo)]


class SocFreeResource(ctypes.Structure):
    """struct dcmi_soc_free_resource: sub-command 2's buffer."""

    _fields_ = [
        ("vfg_num", ctypes.c_uint),
        ("vfg_bitmap", ctypes.c_uint),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    ]


class SocTotalResource(ctypes.Structure):
    """struct dcmi_soc_total_resource: sub-command 1's buffer, the chip's totals and its vNPU
    ids."""

    _fields_ = [
        ("vdev_num", ctypes.c_uint),
        ("vdev_id", ctypes.c_uint * SOC_SPLIT_MAX),
        ("vfg_num", ctypes.c_uint),
        ("vfg_bitmap", ctypes.c_uint),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    ]


# ---- network identity: dcmi_get_device_ip and the super-pod query

IPADDR_TYPE_V4 = 0  # enum dcmi_ip_addr_type
IPADDR_TYPE_V6 = 1
ROCE_PORT = 1  # enum dcmi_port_type: DCMI_VNIC_PORT = 0, DCMI_ROCE_PORT = 1
# dcmi_get_device_info(card, device, DCMI_MAIN_CMD_CHIP_INF, DCMI_CHIP_INF_SUB_CMD_SPOD_INFO, ...):
# the vendor's values (mind-cluster devmanager MainCmdChipInf = 12, CinfSubCmdGetSPodInfo = 1), which
# the vendored header's enum does not list.
MAIN_CMD_CHIP_INF = 12
CHIP_INF_SUB_CMD_SPOD_INFO = 1
SPOD_UNSET = 0xFFFFFFFF  # a super-pod field the driver does not know
# enum dcmi_rdfx_detect_result. OK and INIT (detection not finished yet) are a healthy network, as
# mind-cluster counts them; SOCK_FAIL, RECV_TIMEOUT, UNREACH, TIME_EXCEEDED and FAULT a link that
# does not carry traffic. THREAD_ERR (7), IP_SET (8: no detection address configured) and anything
# undocumented say nothing about the link.
NETWORK_HEALTH_UP = frozenset({0, 6})
NETWORK_HEALTH_DOWN = frozenset({1, 2, 3, 4, 5})


class IpAddr(ctypes.Structure):
    """struct dcmi_ip_addr: a union of ip6[16] / ip4[4], then the enum dcmi_ip_addr_type."""

    _fields_ = [("u_addr", ctypes.c_ubyte * 16), ("ip_type", ctypes.c_int)]


class SpodInfo(ctypes.Structure):
    """struct dcmi_spod_info (48 bytes): chassis_id is the rack, which drivers fill on super pods
    that have racks (mind-cluster reads RackId from it); super_pod_type and reserve are unused."""

    _fields_ = [
        ("sdid", ctypes.c_uint),
        ("super_pod_size", ctypes.c_uint),
        ("super_pod_id", ctypes.c_uint),
        ("server_index", ctypes.c_uint),
        ("chassis_id", ctypes.c_uint),
        ("super_pod_type", ctypes.c_uint),
        ("reserve", ctypes.c_uint * 6),
    ]


_INT_P = ctypes.POINTER(ctypes.c_int)
_UINT_P = ctypes.POINTER(ctypes.c_uint)
_INT = ctypes.c_int

# Every entry point returns int (`driver_codes.OK` or a negative driver code).
SIGNATURES: dict[str, list[type]] = {
    "dcmi_init": [],
    "dcmi_get_card_list": [_INT_P, _INT_P, _INT],
    "dcmi_get_card_num_list": [_INT_P, _INT_P, _INT],
    "dcmi_get_device_num_in_card": [_INT, _INT_P],
    "dcmi_get_device_logic_id": [_INT_P, _INT, _INT],
    "dcmi_get_device_phyid_from_logicid": [ctypes.c_uint, _UINT_P],
    "dcmi_get_device_health": [_INT, _INT, _UINT_P],
    "dcmi_get_device_errorcode_v2": [_INT, _INT, _INT_P, _UINT_P, ctypes.c_uint],
    "dcmi_get_device_chip_info": [_INT, _INT, ctypes.POINTER(ChipInfo)],
    "dcmi_get_device_chip_info_v2": [_INT, _INT, ctypes.POINTER(ChipInfoV2)],
    "dcmi_get_device_board_info": [_INT, _INT, ctypes.POINTER(BoardInfo)],
    "dcmi_get_device_hbm_info": [_INT, _INT, ctypes.POINTER(HbmInfo)],
    "dcmi_get_device_memory_info_v3": [_INT, _INT, ctypes.POINTER(MemoryInfoV3)],
    "dcmi_get_device_pcie_info_v2": [_INT, _INT, ctypes.POINTER(PcieInfoAll)],
    "dcmi_get_topo_info_by_device_id": [_INT, _INT, _INT, _INT, _INT_P],
    "dcmi_get_driver_version": [ctypes.c_char_p, ctypes.c_uint],
    "dcmi_get_device_info": [_INT, _INT, _INT, ctypes.c_uint, ctypes.c_void_p, _UINT_P],
    "dcmi_create_vdevice": [_INT, _INT, ctypes.POINTER(CreateVdevRes), ctypes.POINTER(CreateVdevOut)],
    "dcmi_set_destroy_vdevice": [_INT, _INT, ctypes.c_uint],
    "dcmi_get_vdevice_mode": [_INT_P],
    "dcmi_get_device_ip": [_INT, _INT, _INT, _INT, ctypes.POINTER(IpAddr), ctypes.POINTER(IpAddr)],
    "dcmi_get_device_network_health": [_INT, _INT, _UINT_P],
}

# Older drivers export only dcmi_get_card_num_list; current ones both (mind-cluster calls either).
CARD_LIST_CALLS = ("dcmi_get_card_list", "dcmi_get_card_num_list")
REQUIRED_CALLS = (
    "dcmi_init",
    "dcmi_get_device_num_in_card",
    "dcmi_get_device_logic_id",
    "dcmi_get_device_phyid_from_logicid",
    "dcmi_get_device_health",
)


# The driver keeps at most 128 fault codes per device (DCMI_ERROR_CODE_MAX_COUNT).
ERROR_CODE_MAX_COUNT = 128


def health_from_code(code: int) -> Health:
    """Pure: DCMI health word → level; 0xFFFFFFFF and anything undocumented are Unknown."""
    return _HEALTH_CODES.get(code, Health.UNKNOWN)


def format_bus_id(domain: int, bus: int, device: int, function: int) -> str:
    """Pure: PCI address as sysfs spells it, `0000:c1:00.0`; ValueError when a part is out of
    range."""
    limits = (("domain", domain, 0xFFFFFFFF), ("bus", bus, 0xFF), ("device", device, 0x1F))
    for name, value, top in (*limits, ("function", function, 0x7)):
        if not 0 <= value <= top:
            raise ValueError(f"PCI {name} {value:#x} out of range 0..{top:#x}")
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def decode_c_string(raw: bytes) -> str:
    """Pure: a fixed-size C char array → text up to the first NUL, surrounding blanks removed."""
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


def chip_name_from(chip_type: bytes, chip_name: bytes) -> str:
    """Pure: npu-smi's chip name (`910B3`) from dcmi_chip_info's chip_type/chip_name arrays.

    Drivers fill chip_type with `Ascend` and chip_name with `910B3`; some put the whole
    `Ascend910B3` in chip_name. Empty when the driver left chip_name blank.
    """
    name = decode_c_string(chip_name)
    prefix = decode_c_string(chip_type) or "Ascend"
    return name[len(prefix) :] if name.lower().startswith(prefix.lower()) else name


def device_type_from(chip_name: str, npu_name: str, board_id: int | None) -> str:
    """Pure: a die's family, the way mind-cluster's devmanager tells it.

    An A3 board id means Ascend910C whatever the chip call said; otherwise the v2 call's npu_name
    (the real model) when it names a known chip, else the chip name. ValueError when neither is
    known.
    """
    if board_id in A3_BOARD_IDS:
        return "Ascend910C"
    for name in (npu_name, chip_name):
        try:
            return device_type_for_chip(name)
        except ValueError:
            continue  # e.g. an empty npu_name, or a product code that names no known chip
    raise ValueError(f"unknown Ascend chip name {chip_name!r} (npu_name {npu_name!r})")


def megabytes_to_bytes(megabytes: int) -> int:
    """Pure: DCMI reports memory in MB (MiB); the inventory wants bytes."""
    return megabytes * 1024 * 1024


def is_hccs_peer(topo_type: int) -> bool:
    """Pure: whether a dcmi_get_topo_info_by_device_id answer makes two devices HCCS peers.

    HCCS, HCCS through a switch (910C boxes), and SIO, the on-package link between a 910C card's
    dies.
    """
    return topo_type in _PEER_LINKS


def _amount(value: float) -> Decimal:
    """A driver float as the decimal npu-smi prints with %g: 1.5, not 1.5000000000000002."""
    return Decimal(f"{value:g}")


def resources(computing: ComputingResource, media: MediaResource) -> dict[str, Decimal]:
    """Pure: AI cores, AI CPUs and DVPP units a resource pair reports, by the vNPU model's names; NA
    ones left out."""
    found: dict[str, Decimal] = {}
    if computing.aic >= 0:
        found["aicore"] = _amount(computing.aic)
    if computing.device_aicpu != AICPU_NA:
        found["aicpu"] = Decimal(computing.device_aicpu)
    for name in ("vpc", "venc", "vdec", "jpegd", "jpege", "pngd"):
        if (value := getattr(media, name)) >= 0:
            found[name] = _amount(value)
    return found


def vdev_ids(total: SocTotalResource) -> list[int]:
    """Pure: the vNPU ids of a chip; ValueError when the driver counts more than the array holds."""
    if not 0 <= total.vdev_num <= SOC_SPLIT_MAX:
        raise ValueError(f"vdev_num {total.vdev_num} is outside 0..{SOC_SPLIT_MAX}")
    return list(total.vdev_id[: total.vdev_num])


def vnpu_memory_bytes(megabytes: int) -> int:
    """Pure: a vNPU's memory in bytes from DCMI's MB; 0 for the NA sentinel."""
    return 0 if megabytes == MEMORY_NA else megabytes_to_bytes(megabytes)


def template_uses(found: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Pure: what a vNPU uses besides its AI cores, as a template lists it (0 left out)."""
    return {name: amount for name, amount in found.items() if name != "aicore" and amount}


def ip_from(address: IpAddr) -> str | None:
    """Pure: the text of a dcmi_ip_addr (IPv4 from the first 4 bytes, IPv6 from all 16); None for
    the unspecified address (the port has none) and an unknown address type."""
    raw = bytes(address.u_addr)
    if address.ip_type == IPADDR_TYPE_V4:
        parsed: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(raw[:4])
    elif address.ip_type == IPADDR_TYPE_V6:
        parsed = ipaddress.IPv6Address(raw)
    else:
        return None
    return None if parsed.is_unspecified else str(parsed)


def spod_identity(info: SpodInfo) -> tuple[int | None, int | None, int | None]:
    """Pure: (super pod id, server index, rack id) of a dcmi_spod_info; a field the driver left
    unset (0xFFFFFFFF) is None, and so is a zero chassis id (drivers of super pods without racks
    leave that word zero)."""

    def known(value: int) -> int | None:
        return None if value == SPOD_UNSET else value

    rack = known(info.chassis_id)
    return known(info.super_pod_id), known(info.server_index), rack or None


def link_from_network_health(result: int) -> LinkState:
    """Pure: a dcmi_get_device_network_health result as the link's state."""
    if result in NETWORK_HEALTH_UP:
        return LinkState.UP
    return LinkState.DOWN if result in NETWORK_HEALTH_DOWN else LinkState.UNKNOWN
