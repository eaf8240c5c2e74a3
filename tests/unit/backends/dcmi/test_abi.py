"""The pure DCMI decoders and struct layouts in npu_plugin.backends.dcmi.abi."""

from __future__ import annotations

import ctypes
import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npu_plugin.ascend.device import Health, LinkState
from npu_plugin.backends.dcmi import abi


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (0, Health.OK),
        (1, Health.WARNING),
        (2, Health.ALARM),
        (3, Health.CRITICAL),
        (0xFFFFFFFF, Health.UNKNOWN),
        (4, Health.UNKNOWN),
        (7, Health.UNKNOWN),
        (-1, Health.UNKNOWN),
    ],
)
def test_health_from_code(code: int, expected: Health) -> None:
    assert abi.health_from_code(code) is expected


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ((0, 0xC1, 0, 0), "0000:c1:00.0"),
        ((0, 0x01, 0, 0), "0000:01:00.0"),
        ((0, 0x9D, 0x1F, 7), "0000:9d:1f.7"),
        ((0x1A, 0x3B, 0x02, 1), "001a:3b:02.1"),
        ((0x10000, 0x00, 0x00, 0), "10000:00:00.0"),
    ],
)
def test_format_bus_id(parts: tuple[int, int, int, int], expected: str) -> None:
    assert abi.format_bus_id(*parts) == expected


@pytest.mark.parametrize(
    ("parts", "part"),
    [
        ((-1, 0xC1, 0, 0), "domain"),
        ((0, 0x100, 0, 0), "bus"),
        ((0, 0, 0x20, 0), "device"),
        ((0, 0, 0, 8), "function"),
    ],
)
def test_format_bus_id_rejects_out_of_range(parts: tuple[int, int, int, int], part: str) -> None:
    with pytest.raises(ValueError, match=part):
        abi.format_bus_id(*parts)


@given(
    domain=st.integers(0, 0xFFFF),
    bus=st.integers(0, 0xFF),
    device=st.integers(0, 0x1F),
    function=st.integers(0, 7),
)
def test_format_bus_id_round_trips(domain: int, bus: int, device: int, function: int) -> None:
    text = abi.format_bus_id(domain, bus, device, function)
    match = re.fullmatch(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", text)
    assert match is not None
    assert tuple(int(group, 16) for group in match.groups()) == (domain, bus, device, function)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"910B3\0\0\0", "910B3"),
        (b"910B3\0garbage", "910B3"),
        (b" 24.1.rc2 \0", "24.1.rc2"),
        (b"\0" * 32, ""),
        (b"no-terminator", "no-terminator"),
        (b"\xff\xfe\0", "\ufffd\ufffd"),
    ],
)
def test_decode_c_string(raw: bytes, expected: str) -> None:
    assert abi.decode_c_string(raw) == expected


@pytest.mark.parametrize(
    ("chip_type", "chip_name", "expected"),
    [
        (b"Ascend\0", b"910B3\0", "910B3"),
        (b"Ascend\0", b"Ascend910B3\0", "910B3"),
        (b"Ascend\0", b"910_9392\0", "910_9392"),
        (b"\0", b"Ascend310P3\0", "310P3"),
        (b"Ascend\0", b"310P3\0", "310P3"),
        (b"Ascend\0", b"\0", ""),
    ],
)
def test_chip_name_from(chip_type: bytes, chip_name: bytes, expected: str) -> None:
    assert abi.chip_name_from(chip_type, chip_name) == expected


@pytest.mark.parametrize(
    ("chip_name", "npu_name", "board_id", "expected"),
    [
        ("910", "", 0xB0, "Ascend910C"),  # A3 SuperPoD: the v1 call says plain Ascend910
        ("910", "", 0xB3, "Ascend910C"),  # Atlas 800I A3
        ("910", "9382", 0xB4, "Ascend910C"),
        ("910", "9392", None, "Ascend910C"),  # no board id: the bare A3 model number (DSMI 910_9392) decides
        ("Ascend910", "Ascend9362", None, "Ascend910C"),
        ("910", "Ascend910_9392", None, "Ascend910C"),  # no board id: the v2 model decides
        ("910", "910_9391", 0x21, "Ascend910C"),
        ("910", "", None, "Ascend910"),  # a 910A
        ("910", "9382", None, "Ascend910C"),
        ("910", "9482", None, "Ascend910"),  # not an A3 number: the chip name decides
        ("910B3", "", 0x28, "Ascend910B"),  # A300I A2: not an A3 board
        ("910B3", "Ascend910B3", None, "Ascend910B"),
        ("310P3", "", None, "Ascend310P"),
        ("", "Ascend310P3", None, "Ascend310P"),
    ],
)
def test_device_type_from(chip_name: str, npu_name: str, board_id: int | None, expected: str) -> None:
    assert abi.device_type_from(chip_name, npu_name, board_id) == expected


@pytest.mark.parametrize(("chip_name", "npu_name"), [("", ""), ("950DT", ""), ("Ascend", "93821"), ("", "93")])
def test_device_type_from_rejects_unknown_chips(chip_name: str, npu_name: str) -> None:
    with pytest.raises(ValueError, match="unknown Ascend chip name"):
        abi.device_type_from(chip_name, npu_name, None)


@pytest.mark.parametrize(
    ("megabytes", "expected"),
    [(0, 0), (1, 1 << 20), (65536, 64 << 30), (24576, 24 << 30)],
)
def test_megabytes_to_bytes(megabytes: int, expected: int) -> None:
    assert abi.megabytes_to_bytes(megabytes) == expected


@pytest.mark.parametrize(
    ("topo", "linked"),
    [
        (abi.TOPO_SELF, False),
        (abi.TOPO_SYS, False),
        (abi.TOPO_PHB, False),
        (abi.TOPO_HCCS, True),
        (abi.TOPO_PXB, False),
        (abi.TOPO_PIX, False),
        (abi.TOPO_SIO, True),
        (abi.TOPO_HCCS_SW, True),
        (abi.TOPO_UB, False),
        (abi.TOPO_BUTT, False),
    ],
)
def test_is_hccs_peer(topo: int, linked: bool) -> None:
    assert abi.is_hccs_peer(topo) is linked


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_long) != 8, reason="sizes below are for LP64 Linux")
@pytest.mark.parametrize(
    ("struct", "size"),
    [
        (abi.ChipInfo, 100),
        (abi.ChipInfoV2, 132),
        (abi.BoardInfo, 16),
        (abi.PcieInfoAll, 64),
        (abi.HbmInfo, 32),
        (abi.MemoryInfoV3, 112),
        (abi.IpAddr, 20),
        (abi.SpodInfo, 48),
    ],
)
def test_struct_sizes_match_the_header_on_lp64(struct: type[ctypes.Structure], size: int) -> None:
    assert ctypes.sizeof(struct) == size


def test_every_required_call_has_a_signature() -> None:
    names = {*abi.REQUIRED_CALLS, *abi.CARD_LIST_CALLS, "dcmi_get_driver_version", "dcmi_get_device_chip_info_v2"}
    assert names <= abi.SIGNATURES.keys()


# ---- vNPU decoders


def _pair(aic: float, aicpu: int, media: dict[str, float]) -> tuple[abi.ComputingResource, abi.MediaResource]:
    computing = abi.ComputingResource(aic=aic, device_aicpu=aicpu)
    return computing, abi.MediaResource(**media)


_ALL_NA = dict.fromkeys(("jpegd", "jpege", "vpc", "vdec", "pngd", "venc"), abi.FLOAT_NA)


@pytest.mark.parametrize(
    ("aic", "aicpu", "media", "expected"),
    [
        # ascend-device-plugin#135's 910B3: PNGD not reported
        (
            20.0,
            7,
            {"vpc": 9, "venc": 0, "vdec": 2, "jpegd": 24, "jpege": 4, "pngd": abi.FLOAT_NA},
            {"aicore": "20", "aicpu": "7", "vpc": "9", "venc": "0", "vdec": "2", "jpegd": "24", "jpege": "4"},
        ),
        (32.0, abi.AICPU_NA, _ALL_NA, {"aicore": "32"}),  # 910A: AI cores only
        (abi.FLOAT_NA, abi.AICPU_NA, _ALL_NA, {}),
        (2.0, 1, _ALL_NA | {"pngd": 1.5}, {"aicore": "2", "aicpu": "1", "pngd": "1.5"}),  # a float, as %g prints it
    ],
)
def test_resources_leave_out_the_na_sentinels(
    aic: float, aicpu: int, media: dict[str, float], expected: dict[str, str]
) -> None:
    computing, media_resource = _pair(aic, aicpu, media)

    assert abi.resources(computing, media_resource) == {name: Decimal(value) for name, value in expected.items()}


def test_template_uses_drop_the_cores_and_zeros() -> None:
    found = {"aicore": Decimal(5), "aicpu": Decimal(1), "venc": Decimal(0), "jpegd": Decimal(6)}

    assert abi.template_uses(found) == {"aicpu": Decimal(1), "jpegd": Decimal(6)}


@pytest.mark.parametrize(("count", "ids"), [(0, []), (2, [164, 165]), (32, list(range(100, 132)))])
def test_vdev_ids_are_the_first_vdev_num(count: int, ids: list[int]) -> None:
    total = abi.SocTotalResource(vdev_num=count)
    for index, vnpu_id in enumerate(ids):
        total.vdev_id[index] = vnpu_id

    assert abi.vdev_ids(total) == ids


def test_a_vdev_num_beyond_the_array_is_refused() -> None:
    with pytest.raises(ValueError, match=r"vdev_num 33 is outside 0\.\.32"):
        abi.vdev_ids(abi.SocTotalResource(vdev_num=33))


@pytest.mark.parametrize(("megabytes", "expected"), [(15360, 15360 << 20), (0, 0), (abi.MEMORY_NA, 0)])
def test_vnpu_memory_na_is_zero(megabytes: int, expected: int) -> None:
    assert abi.vnpu_memory_bytes(megabytes) == expected


def _address(ip_type: int, raw: bytes) -> abi.IpAddr:
    address = abi.IpAddr(ip_type=ip_type)
    ctypes.memmove(address.u_addr, raw, len(raw))
    return address


@pytest.mark.parametrize(
    ("ip_type", "raw", "expected"),
    [
        (abi.IPADDR_TYPE_V4, bytes([192, 168, 100, 101]), "192.168.100.101"),
        (abi.IPADDR_TYPE_V4, bytes([10, 0, 0, 1, 9, 9, 9, 9]), "10.0.0.1"),  # bytes past the 4th are the union's
        (abi.IPADDR_TYPE_V4, bytes(4), None),
        (abi.IPADDR_TYPE_V6, bytes.fromhex("fd000000000000000000000000010002"), "fd00::1:2"),
        (abi.IPADDR_TYPE_V6, bytes(16), None),
        (2, bytes([1, 2, 3, 4]), None),  # DCMI_IPADDR_TYPE_ANY is a request, never an answer
    ],
)
def test_ip_from(ip_type: int, raw: bytes, expected: str | None) -> None:
    assert abi.ip_from(_address(ip_type, raw)) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ((7, 3, 0), (7, 3, None)),
        ((7, 3, 12), (7, 3, 12)),
        ((0, 0, 0), (0, 0, None)),
        ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (None, None, None)),
    ],
)
def test_spod_identity(fields: tuple[int, int, int], expected: tuple[int | None, ...]) -> None:
    info = abi.SpodInfo(super_pod_id=fields[0], server_index=fields[1], chassis_id=fields[2])
    assert abi.spod_identity(info) == expected


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (0, LinkState.UP),
        (6, LinkState.UP),
        *((r, LinkState.DOWN) for r in (1, 2, 3, 4, 5)),
        (7, LinkState.UNKNOWN),
        (8, LinkState.UNKNOWN),
        (0xFF, LinkState.UNKNOWN),
    ],
)
def test_link_from_network_health(result: int, expected: LinkState) -> None:
    assert abi.link_from_network_health(result) == expected
