"""The DCMI and npu-smi backends against one simulated host, and `--backend auto` choosing between
them.

One FakeHost describes the host; the fake libdcmi.so reads it, and a fake npu-smi prints it in
npu-smi's own layout, so both backends look at the same machine through their own interfaces.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from npu_plugin.ascend.device import Device, Health
from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.backends.dcmi import abi
from npu_plugin.backends.dcmi.backend import DcmiBackend
from npu_plugin.backends.npusmi.backend import NpuSmiBackend
from npu_plugin.backends.options import BackendOptions
from npu_plugin.cli.main import main
from npu_plugin.errors import BackendError
from tests.support.fake_hardware import (
    NO_HCCN_TOOL,
    FakeDie,
    FakeHost,
    FakeResources,
    FakeTemplate,
    npu_smi_for,
    script,
)

NOT_SUPPORTED = "This command is not supported on this device\n"


def atlas_a3_container() -> FakeHost:
    """Four A3 cards as a container sees them: physical ids 4..11 beside logic ids 0..7, A3 board
    ids, the v1 chip call saying plain `Ascend910`; SIO between a card's dies, switched HCCS between
    cards."""
    dies = [
        FakeDie(
            card=card,
            dev=die,
            logic=2 * (card - 2) + die,
            phy=4 + 2 * (card - 2) + die,
            chip="Ascend910",
            npu_name="Ascend910_9392",
            board=0xB0,
            aicore=24,
            bus=f"0000:{0x95 + 4 * (card - 2) + 2 * die:02X}:00.0",
        )
        for card in range(2, 6)
        for die in range(2)
    ]
    sio = [(abi.TOPO_SIO, [4 + 2 * card, 5 + 2 * card]) for card in range(4)]
    return FakeHost(dies, driver="24.1.rc3.7", topo_groups=sio, topo_default=abi.TOPO_HCCS_SW)


def _library(fake_builds: dict[str, Path], directory: Path) -> str:
    """A private copy of the fake: a new file is a new dlopen, so its init state starts afresh."""
    directory.mkdir()
    return str(shutil.copy2(fake_builds["current"], directory / "libdcmi.so"))


def _without_ai_core(devices: list[Device]) -> list[Device]:
    """npu-smi `info` prints no AI core count; DCMI's is the only field one backend lacks."""
    return [replace(device, ai_core=None) for device in devices]


@pytest.mark.parametrize("with_mapping", [True, False], ids=["info -m", "info alone"])
def test_both_backends_see_the_same_a3_host(
    fake_builds: dict[str, Path], config_path: Path, tmp_path: Path, with_mapping: bool
) -> None:
    host = atlas_a3_container()
    host.write(config_path)
    npu_smi = npu_smi_for(tmp_path / "npu-smi", host)
    if not with_mapping:
        (npu_smi.parent / "mapping.txt").write_text(NOT_SUPPORTED)
        (npu_smi.parent / "mapping.status").write_text("1")
    dcmi = DcmiBackend(_library(fake_builds, tmp_path / "lib"), driver_version_file=tmp_path / "absent")
    smi = NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL)
    sys_root = tmp_path / "sys"  # no sysfs entries: NUMA node and PCIe root unknown to both alike

    by_dcmi, by_npu_smi = discover(dcmi, sys_root), discover(smi, sys_root)

    assert _without_ai_core(by_dcmi) == by_npu_smi
    assert {d.ai_core for d in by_dcmi} == {24}
    assert [(d.physical_id, d.logic_id, d.card_id, d.chip_id) for d in by_npu_smi] == [
        (4 + n, n, 2 + n // 2, n % 2) for n in range(8)
    ]
    assert {(d.chip_name, d.device_type, d.driver_version) for d in by_npu_smi} == {("910", "Ascend910C", "24.1.rc3.7")}
    assert by_npu_smi[0].pci_bus_id == "0000:95:00.0"
    assert dcmi.hccs_peers() == smi.hccs_peers() == {p: frozenset(set(range(4, 12)) - {p}) for p in range(4, 12)}
    dcmi.close()


def _discovered(
    host: FakeHost, fake_builds: dict[str, Path], config_path: Path, tmp_path: Path
) -> tuple[DcmiBackend, NpuSmiBackend]:
    """Both backends over `host`, each having discovered it."""
    host.write(config_path)
    npu_smi = npu_smi_for(tmp_path / "npu-smi", host)
    dcmi = DcmiBackend(_library(fake_builds, tmp_path / "lib"), driver_version_file=tmp_path / "absent")
    smi = NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL)
    dcmi.discover()
    smi.discover()
    return dcmi, smi


def test_both_backends_sample_the_same_health(fake_builds: dict[str, Path], config_path: Path, tmp_path: Path) -> None:
    host = atlas_a3_container()
    dcmi, smi = _discovered(host, fake_builds, config_path, tmp_path)

    for phy, code in ((5, 1), (6, 2), (9, 3), (11, 0xFFFFFFFF)):
        host.die(phy).health = code
    host.write(config_path)
    npu_smi_for(tmp_path / "npu-smi", host)

    expected = dict.fromkeys(range(4, 12), Health.OK)
    expected |= {5: Health.WARNING, 6: Health.ALARM, 9: Health.CRITICAL, 11: Health.UNKNOWN}
    assert dcmi.sample() == smi.sample() == expected
    dcmi.close()


def test_both_backends_read_the_same_fault_codes(
    fake_builds: dict[str, Path], config_path: Path, tmp_path: Path
) -> None:
    host = atlas_a3_container()
    host.die(6).health, host.die(6).faults = 2, "0x80E18402,0x80E01801"
    host.die(9).health, host.die(9).faults = 3, "0x81078603"
    dcmi, smi = _discovered(host, fake_builds, config_path, tmp_path)
    expected = {6: (0x80E01801, 0x80E18402), 9: (0x81078603,)}
    assert dcmi.fault_codes([5, 6, 9]) == smi.fault_codes([5, 6, 9]) == expected
    dcmi.close()


def atlas_800t_a2_split() -> FakeHost:
    """Eight 910B3 on eight cards with the driver's bin1 templates; chip 4 holds
    ascend-device-plugin#135's two vir05_1c_16g, chip 6 one vir10_3c_32g, chip 7 (an A3 card's NA
    case) no AI CPU or media figures."""
    dies = [FakeDie(card=card, dev=0, logic=card, phy=card, bus=f"0000:{0xC1 + card:02X}:00.0") for card in range(8)]
    totals = FakeResources(aic=20, aicpu=7, mem_mb=61440, vpc=9, venc=0, vdec=2, jpegd=24, jpege=4, pngd=-1)
    bare = FakeResources(aic=20, aicpu=-1, mem_mb=61440, vpc=-1, venc=-1, vdec=-1, jpegd=-1, jpege=-1, pngd=-1)
    return FakeHost(
        dies,
        vnpu_mode=0,
        vnpu_totals={phy: totals for phy in range(7)} | {7: bare},
        vnpu_templates=[
            FakeTemplate("vir10_3c_32g", FakeResources(10, 3, 30720, 4, 0, 1, 12, 2, 0), shown_gb=32),
            FakeTemplate("vir05_1c_16g", FakeResources(5, 1, 15360, 2, 0, 0, 6, 1, 0), shown_gb=16),
        ],
        vnpus=[(4, 164, "vir05_1c_16g"), (4, 165, "vir05_1c_16g"), (6, 196, "vir10_3c_32g")],
    )


def test_both_backends_see_the_same_vnpus(fake_builds: dict[str, Path], config_path: Path, tmp_path: Path) -> None:
    host = atlas_800t_a2_split()
    host.write(config_path)
    npu_smi = npu_smi_for(tmp_path / "npu-smi", host)
    dcmi = DcmiBackend(
        _library(fake_builds, tmp_path / "lib"), driver_version_file=tmp_path / "absent", npu_smi=str(npu_smi)
    )
    smi = NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL)
    dcmi.discover()
    smi.discover()

    by_dcmi = {phy: dcmi.chip_vnpu(phy) for phy in range(8)}
    by_npu_smi = {phy: smi.chip_vnpu(phy) for phy in range(8)}

    assert by_dcmi == by_npu_smi
    chip = by_npu_smi[4]
    assert chip is not None
    assert [(v.vnpu_id, v.template) for v in chip.vnpus] == [(164, "vir05_1c_16g"), (165, "vir05_1c_16g")]
    assert "pngd" not in chip.totals
    assert set(by_npu_smi[7].totals if by_npu_smi[7] else ()) == {"aicore"}
    assert {phy: dcmi.list_vnpus(phy) for phy in range(8)} == {phy: smi.list_vnpus(phy) for phy in range(8)}
    dcmi.close()


@pytest.mark.usefixtures("restore_logging")
def test_inventory_prints_the_same_vnpu_blocks_through_either_backend(
    fake_builds: dict[str, Path], config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = atlas_800t_a2_split()
    host.write(config_path)
    npu_smi = str(npu_smi_for(tmp_path / "npu-smi", host))
    library = _library(fake_builds, tmp_path / "lib")
    common = ["inventory", "--log-level", "error", "--vnpu", "static", "-o", "json", "--npu-smi", npu_smi]

    blocks = []
    for backend in (["--backend", "npu-smi"], ["--backend", "dcmi", "--dcmi-library", library]):
        assert main([*common, *backend]) == 0
        blocks.append([device.get("vnpu") for device in json.loads(capsys.readouterr().out)["devices"]])

    assert blocks[0] == blocks[1]
    assert blocks[0][4]["existing"] == [
        {"vnpuId": 164, "template": "vir05_1c_16g"},
        {"vnpuId": 165, "template": "vir05_1c_16g"},
    ]


# ---- --backend auto


@pytest.mark.parametrize(
    "failure",
    [
        "dcmi_init -8005",  # a container without /dev/davinci_manager
        "dcmi_get_card_list -8255",  # chips this DCMI API does not serve
        "dcmi_get_device_logic_id card 3 dev 1 -8007",
    ],
)
def test_auto_falls_back_to_npu_smi_when_dcmi_fails_after_loading(
    fake_builds: dict[str, Path],
    config_path: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    host = atlas_a3_container()
    npu_smi = npu_smi_for(tmp_path / "npu-smi", host)
    host.fails.append(failure)
    host.write(config_path)

    with caplog.at_level(logging.WARNING, logger="npu_plugin.backends.auto"):
        backend = open_backend(
            BackendOptions(npu_smi=str(npu_smi), dcmi_library=_library(fake_builds, tmp_path / "lib"))
        )

    assert backend.name == "npu-smi"
    assert [d.physical_id for d in discover(backend, tmp_path / "sys")] == list(range(4, 12))
    (record,) = [r for r in caplog.records if r.name == "npu_plugin.backends.auto"]
    assert record.getMessage().startswith("giving up DCMI, using npu-smi: DCMI ")
    assert failure.rsplit(maxsplit=1)[-1] in record.getMessage()


def test_auto_keeps_dcmi_when_it_discovers(fake_builds: dict[str, Path], config_path: Path, tmp_path: Path) -> None:
    atlas_a3_container().write(config_path)

    backend = open_backend(
        BackendOptions(npu_smi=str(tmp_path / "no-npu-smi"), dcmi_library=_library(fake_builds, tmp_path / "lib"))
    )

    assert backend.name == "dcmi"
    assert len(backend.discover()) == 8
    backend.close()


def test_auto_names_both_reasons_when_both_fail(
    fake_builds: dict[str, Path], config_path: Path, tmp_path: Path
) -> None:
    host = atlas_a3_container()
    host.fails.append("dcmi_init -8005")
    host.write(config_path)
    npu_smi = script(tmp_path / "npu-smi", "#!/bin/sh\necho 'dcmi module initialize failed. ret is -8005'\nexit 255\n")

    with pytest.raises(BackendError) as raised:
        open_backend(BackendOptions(npu_smi=str(npu_smi), dcmi_library=_library(fake_builds, tmp_path / "lib")))

    message = str(raised.value)
    assert message.startswith("no NPU discovery backend works; dcmi: DCMI dcmi_init failed with error code -8005; ")
    assert f"npu-smi: `{npu_smi} info` exited with status 255: dcmi module initialize failed" in message
    assert "\n" not in message


def test_auto_without_a_library_or_npu_smi_says_both(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"dcmi: cannot load DCMI library .*; npu-smi: .* not found"):
        open_backend(BackendOptions(npu_smi=str(tmp_path / "no-npu-smi"), dcmi_library=str(tmp_path / "libdcmi.so")))
