"""DcmiBackend through real ctypes calls into a fake libdcmi.so compiled from
tests/fakedcmi/fake_dcmi.c."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import pytest

from npu_plugin.ascend.device import Device, Health, LinkState
from npu_plugin.backends.dcmi import abi
from npu_plugin.backends.dcmi.backend import DcmiBackend
from npu_plugin.errors import BackendError, DcmiError
from tests.support.fake_hardware import FakeDie, FakeHost

GIB = 1 << 30


class Opener(Protocol):
    def __call__(self, host: FakeHost, variant: str = "current") -> DcmiBackend: ...


def _private_copy(built: Path, directory: Path) -> Path:
    """A copy per test: a new file is a new dlopen, so the fake's init state never leaks between
    tests."""
    directory.mkdir()
    return Path(shutil.copy2(built, directory / "libdcmi.so"))


@pytest.fixture
def open_host(fake_builds: dict[str, Path], config_path: Path, tmp_path: Path) -> Iterator[Opener]:
    opened: list[DcmiBackend] = []

    def opener(host: FakeHost, variant: str = "current") -> DcmiBackend:
        host.write(config_path)
        library = _private_copy(fake_builds[variant], tmp_path / f"lib{len(opened)}")
        # The driver's version file is the test's, absent unless a test writes it.
        opened.append(DcmiBackend(str(library), driver_version_file=tmp_path / "version.info"))
        return opened[-1]

    yield opener
    for backend in opened:
        backend.close()


def atlas_800t_a2() -> FakeHost:
    """Eight 910B3 on eight cards; logic and physical ids deliberately differ from card ids."""
    dies = [
        FakeDie(card=card, dev=0, logic=(card + 2) % 8, phy=(card + 5) % 8, bus=f"0000:{0xC1 + card:02X}:00.0")
        for card in range(8)
    ]
    return FakeHost(dies, topo_groups=[(abi.TOPO_HCCS, [d.phy for d in dies])], topo_default=abi.TOPO_SYS)


def atlas_a3_two_cards() -> FakeHost:
    """Two 910C cards of an A3 SuperPoD (board id 0xb0), two dies each: SIO inside a card, switched
    HCCS between cards. Like the real driver, the v1 chip call says plain `Ascend910`; only the v2
    call's npu_name and the board id tell the A3."""
    slots = [(card, die) for card in (3, 5) for die in (0, 1)]
    dies = [
        FakeDie(
            card=card, dev=die, logic=i, phy=8 + i, chip="Ascend910", npu_name="Ascend910_9392", board=0xB0, aicore=24
        )
        for i, (card, die) in enumerate(slots)
    ]
    groups = [(abi.TOPO_SIO, [8, 9]), (abi.TOPO_SIO, [10, 11])]
    return FakeHost(dies, topo_groups=groups, topo_default=abi.TOPO_HCCS_SW)


def atlas_300i_duo() -> FakeHost:
    """One 310P3 card with two dies and DDR (no HBM); the driver supports no topology query."""
    dies = [FakeDie(card=0, dev=d, logic=d, phy=d, chip="310P3", hbm_mb=None, ddr_mb=24576, aicore=8) for d in (0, 1)]
    return FakeHost(dies)


def test_discovers_an_atlas_800t_a2_host(open_host: Opener) -> None:
    devices = open_host(atlas_800t_a2()).discover()

    expected = [
        Device(
            physical_id=(card + 5) % 8,
            chip_name="910B3",
            device_type="Ascend910B",
            logic_id=(card + 2) % 8,
            card_id=card,
            chip_id=0,
            memory=64 * GIB,
            ai_core=20,
            pci_bus_id=f"0000:{0xC1 + card:02x}:00.0",
            driver_version="24.1.rc2",
        )
        for card in range(8)
    ]
    assert devices == sorted(expected, key=lambda d: d.physical_id)


def test_a2_host_is_one_hccs_mesh(open_host: Opener) -> None:
    peers = open_host(atlas_800t_a2()).hccs_peers()

    assert peers == {phy: frozenset(set(range(8)) - {phy}) for phy in range(8)}


def test_discovers_910c_cards_with_two_dies(open_host: Opener) -> None:
    backend = open_host(atlas_a3_two_cards())
    devices = backend.discover()

    assert [(d.physical_id, d.card_id, d.chip_id, d.logic_id) for d in devices] == [
        (8, 3, 0, 0),
        (9, 3, 1, 1),
        (10, 5, 0, 2),
        (11, 5, 1, 3),
    ]
    assert {d.device_type for d in devices} == {"Ascend910C"}
    assert {d.chip_name for d in devices} == {"910"}
    assert all(d.pci_bus_id is None for d in devices)
    assert backend.hccs_peers() == {phy: frozenset({8, 9, 10, 11} - {phy}) for phy in (8, 9, 10, 11)}


def test_ddr_memory_when_there_is_no_hbm_and_no_topology(open_host: Opener) -> None:
    backend = open_host(atlas_300i_duo())
    devices = backend.discover()

    assert [(d.device_type, d.memory, d.ai_core) for d in devices] == [("Ascend310P", 24 * GIB, 8)] * 2
    assert backend.hccs_peers() == {}


def test_sample_picks_up_health_changes(open_host: Opener, config_path: Path) -> None:
    host = atlas_800t_a2()
    backend = open_host(host)
    backend.discover()
    assert backend.sample() == dict.fromkeys(range(8), Health.OK)

    host.die(phy=3).health = 2
    host.die(phy=5).health = 0xFFFFFFFF
    host.die(phy=6).health = 1
    host.die(phy=7).health = 3
    host.write(config_path)

    expected = dict.fromkeys(range(8), Health.OK)
    expected |= {3: Health.ALARM, 5: Health.UNKNOWN, 6: Health.WARNING, 7: Health.CRITICAL}
    assert backend.sample() == expected


def test_sample_before_discover_enumerates_first(open_host: Opener) -> None:
    assert open_host(atlas_a3_two_cards()).sample() == dict.fromkeys((8, 9, 10, 11), Health.OK)


def test_dcmi_init_failure_is_a_clear_backend_error(open_host: Opener) -> None:
    host = atlas_800t_a2()
    host.fails.append("dcmi_init -8005")
    backend = open_host(host)

    with pytest.raises(BackendError, match=r"dcmi_init .* -8005") as caught:
        backend.discover()
    assert isinstance(caught.value, DcmiError)
    assert (caught.value.call, caught.value.code) == ("dcmi_init", -8005)


def test_init_is_retried_after_a_failure(open_host: Opener, config_path: Path) -> None:
    host = atlas_800t_a2()
    host.fails.append("dcmi_init -8005")
    backend = open_host(host)
    with pytest.raises(DcmiError):
        backend.discover()

    host.fails.clear()
    host.write(config_path)
    assert len(backend.discover()) == 8


def test_health_failure_makes_only_that_device_unknown(open_host: Opener, caplog: pytest.LogCaptureFixture) -> None:
    host = atlas_800t_a2()
    host.fails.append("dcmi_get_device_health card 0 dev 0 -8001")
    backend = open_host(host)

    devices = backend.discover()
    with caplog.at_level(logging.WARNING, logger="npu_plugin.backends.dcmi.backend"):
        first, second = backend.sample(), backend.sample()

    physical = (0 + 5) % 8
    assert {d.physical_id: d.health for d in devices} == first == second
    assert first == dict.fromkeys(range(8), Health.OK) | {physical: Health.UNKNOWN}
    assert len([r for r in caplog.records if "-8001" in r.getMessage()]) == 1


def test_sample_never_raises_when_the_driver_breaks(open_host: Opener, config_path: Path) -> None:
    backend = open_host(atlas_800t_a2())
    backend.discover()

    config_path.unlink()

    assert backend.sample() == dict.fromkeys(range(8), Health.UNKNOWN)


def test_failing_optional_info_leaves_defaults(open_host: Opener, caplog: pytest.LogCaptureFixture) -> None:
    host = atlas_800t_a2()
    host.fails += [
        "dcmi_get_device_pcie_info_v2 card 2 dev 0 -8005",
        "dcmi_get_device_hbm_info card 3 dev 0 -8001",
        "dcmi_get_device_chip_info_v2 card 4 dev 0 -8001",
        "dcmi_get_device_chip_info card 4 dev 0 -8001",
    ]
    with caplog.at_level(logging.WARNING, logger="npu_plugin.backends.dcmi.backend"):
        devices = {d.card_id: d for d in open_host(host).discover()}

    assert len(devices) == 8
    assert devices[2].pci_bus_id is None
    assert devices[3].memory == 0
    assert (devices[4].chip_name, devices[4].device_type, devices[4].ai_core) == ("910B3", "Ascend910B", None)
    assert devices[5] == Device(
        physical_id=2,
        chip_name="910B3",
        device_type="Ascend910B",
        logic_id=7,
        card_id=5,
        memory=64 * GIB,
        ai_core=20,
        pci_bus_id="0000:c6:00.0",
        driver_version="24.1.rc2",
    )
    warned = " ".join(r.getMessage() for r in caplog.records)
    for call in ("dcmi_get_device_pcie_info_v2", "dcmi_get_device_hbm_info", "dcmi_get_device_chip_info"):
        assert call in warned


def test_no_chip_name_anywhere_is_an_error(open_host: Opener) -> None:
    host = atlas_800t_a2()
    host.fails += ["dcmi_get_device_chip_info_v2 -8001", "dcmi_get_device_chip_info -8001"]

    with pytest.raises(BackendError, match="chip name"):
        open_host(host).discover()


@pytest.mark.parametrize(
    "failure",
    [
        "dcmi_get_card_list -8005",
        "dcmi_get_device_num_in_card card 4 dev -1 -8007",
        "dcmi_get_device_logic_id card 1 dev 0 -8007",
        "dcmi_get_device_phyid_from_logicid card 6 dev 0 -8008",
    ],
)
def test_enumeration_failures_raise_dcmi_error(open_host: Opener, failure: str) -> None:
    host = atlas_800t_a2()
    host.fails.append(failure)
    words = failure.split()
    call, code = words[0], int(words[-1])

    with pytest.raises(DcmiError) as caught:
        open_host(host).discover()
    assert (caught.value.call, caught.value.code) == (call, code)


def test_legacy_driver_without_newer_symbols(open_host: Opener, tmp_path: Path) -> None:
    host = atlas_a3_two_cards()
    host.fails.append("dcmi_get_card_list -8005")  # would fail if it were called; legacy builds lack it
    (tmp_path / "version.info").write_text("Version=23.0.3\nascendhal_version=7.35.19\npackage_version=23.0.3\n")

    devices = open_host(host, "legacy").discover()

    assert [d.physical_id for d in devices] == [8, 9, 10, 11]
    assert {(d.device_type, d.chip_name, d.driver_version) for d in devices} == {("Ascend910C", "910", "23.0.3")}


def test_without_dcmi_get_driver_version_the_library_version_is_never_reported(open_host: Opener) -> None:
    """The legacy library still answers dcmi_get_dcmi_version (its own 7.35.23); that is not the
    driver's."""
    devices = open_host(atlas_800t_a2(), "legacy").discover()

    assert {d.driver_version for d in devices} == {None}


def test_driver_version_falls_back_to_the_version_file(open_host: Opener, tmp_path: Path) -> None:
    host = atlas_800t_a2()
    host.driver = None  # dcmi_get_driver_version answers NOT_SUPPORT
    (tmp_path / "version.info").write_text("Version=24.1.rc3\n")

    assert {d.driver_version for d in open_host(host).discover()} == {"24.1.rc3"}


def test_driver_version_is_optional(open_host: Opener, tmp_path: Path) -> None:
    host = atlas_800t_a2()
    host.driver = None
    (tmp_path / "version.info").write_text("package_version=24.1.rc3\n")  # no Version= line

    assert {d.driver_version for d in open_host(host).discover()} == {None}


A3_CASES: list[tuple[str, str | None, int | None, list[str], str]] = [  # variant, npu_name, board, fails, type
    ("legacy", None, 0xB0, [], "Ascend910C"),  # no v2 call: the board id tells the A3
    ("current", "Ascend910_9392", None, [], "Ascend910C"),  # no board info: npu_name does
    ("current", "9392", None, [], "Ascend910C"),  # no board info, npu_name the bare A3 number (DSMI 910_9392)
    ("current", "9382", 0xB3, [], "Ascend910C"),  # a bare product code; an Atlas 800I A3 board
    ("current", "Ascend910_9392", 0xB1, ["dcmi_get_device_chip_info_v2 -8255"], "Ascend910C"),  # v1 + board
    ("current", None, None, [], "Ascend910"),  # a 910A box: nothing says A3
    ("legacy", None, 0x21, [], "Ascend910"),
]


@pytest.mark.parametrize("case", A3_CASES)
def test_a3_dies_are_told_by_npu_name_or_board_id(
    open_host: Opener, case: tuple[str, str | None, int | None, list[str], str]
) -> None:
    variant, npu_name, board, fails, expected = case
    host = atlas_a3_two_cards()
    for die in host.dies:
        die.npu_name, die.board = npu_name, board
    host.fails += fails

    devices = open_host(host, variant).discover()

    assert {(d.chip_name, d.device_type, d.ai_core) for d in devices} == {("910", expected, 24)}


def test_close_stops_using_the_library(open_host: Opener) -> None:
    backend = open_host(atlas_800t_a2())
    backend.discover()
    backend.close()

    assert backend.sample() == dict.fromkeys(range(8), Health.UNKNOWN)
    assert backend.hccs_peers() == {}
    with pytest.raises(BackendError, match="closed"):
        backend.discover()


def test_missing_library_path_is_a_clear_backend_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libdcmi.so"

    with pytest.raises(BackendError, match=re.escape(f"cannot load DCMI library '{missing}'")):
        DcmiBackend(str(missing))


def test_missing_library_name_says_the_loader_path_was_searched() -> None:
    with pytest.raises(BackendError, match=r"libdcmi-absent\.so.*dynamic loader path"):
        DcmiBackend("libdcmi-absent.so")


@pytest.mark.skipif(ctypes.util.find_library("dcmi") is not None, reason="this host has a real libdcmi.so")
def test_default_library_is_libdcmi_via_the_loader() -> None:
    with pytest.raises(BackendError, match=r"'libdcmi\.so'"):
        DcmiBackend()


def test_a_library_without_dcmi_symbols_is_rejected() -> None:
    libm = ctypes.util.find_library("m")
    assert libm is not None

    with pytest.raises(BackendError, match="lacks dcmi_init"):
        DcmiBackend(libm)


@pytest.mark.parametrize(
    ("struct", "fields"),
    [
        (abi.ChipInfo, ("chip_name", "aicore_cnt")),
        (abi.ChipInfoV2, ("aicore_cnt", "npu_name")),
        (abi.BoardInfo, ("board_id", "slot_id")),
        (abi.PcieInfoAll, ("domain", "bdf_busid", "bdf_funcid")),
        (abi.HbmInfo, ("memory_usage", "bandwith_util_rate")),
        (abi.MemoryInfoV3, ("hugepagesize", "utiliza", "reserve")),
        (abi.CreateVdevRes, ("template_name", "reserved")),
        (abi.CreateVdevOut, ("vfg_id",)),
        (abi.BaseResource, ("vfg_id", "vip_mode")),
        (
            abi.ComputingResource,
            ("memory_size", "device_aicpu", "vdev_aicore_utilization", "vdev_memory_free", "reserved"),
        ),
        (abi.MediaResource, ("venc",)),
        (abi.VdevQueryInfo, ("container_id", "base", "computing", "media")),
        (abi.VdevQuery, ("query_info",)),
        (abi.SocFreeResource, ("base", "computing", "media")),
        (abi.SocTotalResource, ("vfg_num", "base", "computing", "media")),
        (abi.IpAddr, ("ip_type",)),
        (abi.SpodInfo, ("super_pod_id", "server_index", "chassis_id")),
    ],
)
def test_ctypes_layouts_match_the_c_compiler(
    fake_builds: dict[str, Path], struct: type[ctypes.Structure], fields: tuple[str, ...]
) -> None:
    layout = ctypes.CDLL(str(fake_builds["current"])).fake_dcmi_layout
    layout.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    layout.restype = ctypes.c_long
    c_name = {
        abi.ChipInfo: b"dcmi_chip_info",
        abi.ChipInfoV2: b"dcmi_chip_info_v2",
        abi.BoardInfo: b"dcmi_board_info",
        abi.PcieInfoAll: b"dcmi_pcie_info_all",
        abi.HbmInfo: b"dcmi_hbm_info",
        abi.MemoryInfoV3: b"dcmi_get_memory_info_stru",
        abi.CreateVdevRes: b"dcmi_create_vdev_res_stru",
        abi.CreateVdevOut: b"dcmi_create_vdev_out",
        abi.BaseResource: b"dcmi_base_resource",
        abi.ComputingResource: b"dcmi_computing_resource",
        abi.MediaResource: b"dcmi_media_resource",
        abi.VdevQueryInfo: b"dcmi_vdev_query_info",
        abi.VdevQuery: b"dcmi_vdev_query_stru",
        abi.SocFreeResource: b"dcmi_soc_free_resource",
        abi.SocTotalResource: b"dcmi_soc_total_resource",
        abi.IpAddr: b"dcmi_ip_addr",
        abi.SpodInfo: b"dcmi_spod_info",
    }[struct]

    assert layout(c_name, None) == ctypes.sizeof(struct)
    for name in fields:
        assert layout(c_name, name.encode()) == getattr(struct, name).offset, name


def test_a_host_without_npus_is_a_backend_error(open_host: Opener) -> None:
    backend = open_host(FakeHost([]))

    with pytest.raises(BackendError, match="no NPU devices"):
        backend.discover()
    assert backend.sample() == {}
    assert backend.hccs_peers() == {}


def test_fault_codes_come_from_dcmi_get_device_errorcode_v2(open_host: Opener) -> None:
    host = atlas_800t_a2()
    first, second, third = host.dies[0].phy, host.dies[1].phy, host.dies[2].phy
    host.dies[0] = replace(host.dies[0], health=2, faults="0x80E18402,0x80E01801,0x80E01801")
    host.dies[1] = replace(host.dies[1], health=3, faults="many:140")  # more than the caller's list holds
    host.fails.append(f"dcmi_get_device_errorcode_v2 card {host.dies[2].card} dev 0 -8001")
    backend = open_host(host)
    backend.discover()
    codes = backend.fault_codes([first, second, third, 99])
    assert codes[first] == (0x80E01801, 0x80E18402)
    assert codes[second] == tuple(range(0x80E00000, 0x80E00000 + abi.ERROR_CODE_MAX_COUNT))
    assert third not in codes and 99 not in codes  # the call failed; no such die


def test_device_ips_and_super_pod_identity_come_from_dcmi(open_host: Opener) -> None:
    host = atlas_a3_two_cards()
    host.dies[0].ip, host.dies[1].ip = "192.168.100.101", "fd00::1:2"
    for die in host.dies:
        die.spod = "7,3,0"
    host.dies[3].spod = f"7,{0xFFFFFFFF},12"

    devices = open_host(host).discover()

    assert [(d.device_ip, d.super_pod_id, d.server_index, d.rack_id) for d in devices] == [
        ("192.168.100.101", 7, 3, None),
        ("fd00::1:2", 7, 3, None),
        (None, 7, 3, None),
        (None, 7, None, 12),
    ]


def test_a_910b_die_has_an_ip_and_no_super_pod(open_host: Opener) -> None:
    host = atlas_800t_a2()
    host.dies[0].ip = "10.0.0.5"
    host.dies[0].spod = "1,1,1"  # asked only on A3 dies, as mind-cluster does

    device = next(d for d in open_host(host).discover() if d.card_id == 0)

    identity = (device.device_ip, device.super_pod_id, device.server_index, device.rack_id)
    assert identity == ("10.0.0.5", None, None, None)


def test_no_roce_no_ip_query(open_host: Opener) -> None:
    host = atlas_300i_duo()
    host.fails.append("dcmi_get_device_ip -8255")  # never asked: a 310P has no RoCE port

    assert {d.device_ip for d in open_host(host).discover()} == {None}


def test_ip_and_super_pod_failures_leave_them_out(open_host: Opener, caplog: pytest.LogCaptureFixture) -> None:
    host = atlas_a3_two_cards()
    for die in host.dies:
        die.ip, die.spod = "192.168.1.1", "1,1,0"
    host.fails += ["dcmi_get_device_ip card 3 dev 0 -8005", "dcmi_get_device_info card 5 dev 1 -8255"]

    devices = {d.physical_id: d for d in open_host(host).discover()}

    assert devices[8].device_ip is None and devices[8].super_pod_id == 1
    assert devices[11].device_ip == "192.168.1.1" and devices[11].super_pod_id is None
    assert "super-pod info" in caplog.text


def test_link_states_come_from_dcmi_network_health(open_host: Opener) -> None:
    host = atlas_800t_a2()
    results = {0: 0, 1: 5, 2: 6, 3: 3}  # OK, FAULT, INIT, UNREACH; the others answer NOT_SUPPORT
    for die in host.dies:
        die.net_health = results.get(die.card)
    host.fails.append("dcmi_get_device_network_health card 4 dev 0 -8005")
    backend = open_host(host)
    devices = {d.card_id: d.physical_id for d in backend.discover()}

    states = backend.link_states(devices.values())

    assert states == {
        devices[0]: LinkState.UP,
        devices[1]: LinkState.DOWN,
        devices[2]: LinkState.UP,
        devices[3]: LinkState.DOWN,
    }
    assert backend.link_states([devices[1]]) == {devices[1]: LinkState.DOWN}
