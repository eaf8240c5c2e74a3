"""NpuSmiBackend's vNPU commands against a fake `npu-smi` script: real processes, real exit
statuses, a real hang."""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path

import pytest

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.vnpu import ChipMode, ChipVnpu, Vnpu, VnpuTemplate
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.npusmi.backend import NpuSmiBackend
from npu_plugin.backends.npusmi.vnpu_parse import GIB
from npu_plugin.errors import BackendError, NpuSmiParseError, VnpuError, VnpuNotFoundError
from tests.support.fake_hardware import NO_HCCN_TOOL, fake_npu_smi, script
from tests.support.fake_hardware import NPU_SMI_FIXTURES as FIXTURES

D = Decimal


def answer(npu_smi: Path, name: str, fixture: str | None = None, *, text: str = "", status: int = 0) -> None:
    """Make the fake answer the query `name` with a fixture (or text) and exit status."""
    (npu_smi.parent / f"{name}.txt").write_text((FIXTURES / fixture).read_text() if fixture else text)
    if status:
        (npu_smi.parent / f"{name}.status").write_text(str(status))


def set_log(npu_smi: Path) -> list[str]:
    log = npu_smi.parent / "set.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """An 8 x 910B3 host (cards 0-7, physical ids 0-7) in container mode; card 4 is #135's chip."""
    npu_smi = fake_npu_smi(tmp_path / "b3", "910b3-x8.info.txt", "910b3-x8.mapping.txt", "910b3-x8.topo.txt")
    answer(npu_smi, "vnpu-mode", "vnpu-mode.docker.txt")
    answer(npu_smi, "template-info-4", "910b3.template-info.txt")
    answer(npu_smi, "info-vnpu-4-0", "910b3.info-vnpu.txt")
    return npu_smi


@pytest.fixture
def backend(host: Path) -> NpuSmiBackend:
    backend = NpuSmiBackend(str(host), hccn_tool=NO_HCCN_TOOL, timeout=5)
    backend.discover()
    return backend


def test_the_backend_is_a_vnpu_backend(backend: NpuSmiBackend) -> None:
    assert isinstance(backend, VnpuBackend)


def test_chip_vnpu_reads_templates_totals_mode_and_vnpus(backend: NpuSmiBackend) -> None:
    templates = (
        VnpuTemplate(
            "vir10_3c_32g", 10, 32 * GIB, {"aicpu": D(3), "vpc": D(4), "vdec": D(1), "jpegd": D(12), "jpege": D(2)}
        ),
        VnpuTemplate("vir05_1c_16g", 5, 16 * GIB, {"aicpu": D(1), "vpc": D(2), "jpegd": D(6), "jpege": D(1)}),
    )

    assert backend.chip_vnpu(4) == ChipVnpu(
        physical_id=4,
        mode=ChipMode.CONTAINER,
        totals={"aicore": D(20), "aicpu": D(7), "vpc": D(9), "venc": D(0), "vdec": D(2), "jpegd": D(24), "jpege": D(4)},
        templates=templates,
        id_range=(164, 179),
        dynamic_supported=True,
        vnpus=(Vnpu(4, 164, "vir05_1c_16g"), Vnpu(4, 165, "vir05_1c_16g")),
    )
    assert backend.list_vnpus(4) == [Vnpu(4, 164, "vir05_1c_16g"), Vnpu(4, 165, "vir05_1c_16g")]


def test_templates_are_read_once_per_card(host: Path, backend: NpuSmiBackend) -> None:
    first = backend.chip_vnpu(4)
    (host.parent / "template-info-4.txt").unlink()  # npu-smi would now fail the query

    again = backend.chip_vnpu(4)

    assert first is not None
    assert again is not None
    assert again.templates == first.templates != ()


def test_vm_mode_shows_no_vnpus(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "info-vnpu-4-0", "info-vnpu.vm-mode.txt")
    answer(host, "vnpu-mode", "vnpu-mode.vm.txt")

    chip = backend.chip_vnpu(4)

    assert chip is not None
    assert (chip.mode, chip.totals, chip.vnpus) == (ChipMode.VM, {}, ())
    assert backend.list_vnpus(4) == []


def test_a_chip_npu_smi_cannot_split_is_none_and_said_once(
    host: Path, backend: NpuSmiBackend, caplog: pytest.LogCaptureFixture
) -> None:
    answer(host, "info-vnpu-2-0", text="This device does not support querying info-vnpu.\n", status=1)

    with caplog.at_level(logging.INFO, logger="npu_plugin.backends.npusmi.backend"):
        assert backend.chip_vnpu(2) is None
        assert backend.chip_vnpu(2) is None

    (record,) = caplog.records
    assert "`npu-smi info -t info-vnpu -i 2 -c 0` gave nothing usable, so npu-2 is not split" in record.getMessage()


def test_without_template_info_the_chip_has_no_templates_said_once(
    host: Path, backend: NpuSmiBackend, caplog: pytest.LogCaptureFixture
) -> None:
    answer(host, "template-info-4", text="This device does not support querying template-info.\n", status=1)

    with caplog.at_level(logging.WARNING, logger="npu_plugin.backends.npusmi.backend"):
        chips = [backend.chip_vnpu(4), backend.chip_vnpu(4)]

    assert [(chip.templates, len(chip.vnpus)) if chip else None for chip in chips] == [((), 2), ((), 2)]
    (record,) = caplog.records
    assert "`npu-smi info -t template-info -i 4` gave nothing usable, so no vNPU templates are known for card 4" in (
        record.getMessage()
    )


def test_malformed_template_info_is_a_parse_error(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "template-info-4", text="garbage\n")

    with pytest.raises(NpuSmiParseError, match=r"^npu-smi info -t template-info: no template table header"):
        backend.chip_vnpu(4)


def test_smp_mode_is_none(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "info-vnpu-4-0", text="NPU is working in SMP mode, does not support vnpu query.\n")

    assert backend.chip_vnpu(4) is None


def test_without_vnpu_mode_container_mode_is_assumed(
    host: Path, backend: NpuSmiBackend, caplog: pytest.LogCaptureFixture
) -> None:
    (host.parent / "vnpu-mode.txt").unlink()

    with caplog.at_level(logging.INFO, logger="npu_plugin.backends.npusmi.backend"):
        chip = backend.chip_vnpu(4)

    assert chip is not None
    assert chip.mode is ChipMode.CONTAINER
    assert "container mode is assumed" in caplog.text


def test_malformed_vnpu_output_is_a_parse_error(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "info-vnpu-4-0", text="| AICORE Memory AICPU VPC VENC VDEC JPEGD JPEGE PNGD |\n")

    with pytest.raises(NpuSmiParseError, match=r"^npu-smi info -t info-vnpu, line 2: expected the header row 'GB'"):
        backend.chip_vnpu(4)


def test_an_undiscovered_chip_is_a_backend_error(host: Path) -> None:
    with pytest.raises(BackendError, match="no NPU with physical id 4 was discovered"):
        NpuSmiBackend(str(host), hccn_tool=NO_HCCN_TOOL).chip_vnpu(4)


# ---- create and destroy


def test_create_passes_card_chip_template_and_id(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "create-vnpu", "create-vnpu.ok.txt")

    assert backend.create_vnpu(4, "vir05_1c_16g", 166) == 166
    assert set_log(host) == ["set -t create-vnpu -i 4 -c 0 -f vir05_1c_16g -v 166"]


def test_create_with_the_any_id_returns_the_id_npu_smi_gave(host: Path, backend: NpuSmiBackend, tmp_path: Path) -> None:
    """npu-smi's answer names no id: the new row of info-vnpu does. The wrapper makes the create add
    one."""
    answer(host, "create-vnpu", "create-vnpu.ok.txt")
    listed = host.parent / "info-vnpu-4-0.txt"
    after = tmp_path / "after.txt"
    row = "|  166      |  2             |  000000000000  |  0       |  vir05_1c_16g        |"
    rule = "+" + "-" * 79 + "+"
    text = listed.read_text().replace("Total number of vnpu: 2 ", "Total number of vnpu: 3 ")
    after.write_text(text + row + "\n" + rule + "\n")
    wrapper = script(
        tmp_path / "npu-smi",
        f'#!/bin/sh\ncase "$1" in set) cp {after} {listed} ;; esac\nexec {host} "$@"\n',
    )
    backend.executable = str(wrapper)

    assert backend.create_vnpu(4, "vir05_1c_16g", 0xFFFFFFFF) == 166
    assert set_log(host) == ["set -t create-vnpu -i 4 -c 0 -f vir05_1c_16g -v 4294967295"]


def test_create_with_the_any_id_that_lists_nothing_new_is_an_error(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "create-vnpu", "create-vnpu.ok.txt")

    with pytest.raises(VnpuError, match="succeeded but info-vnpu lists no new vNPU"):
        backend.create_vnpu(4, "vir05_1c_16g", 0xFFFFFFFF)


@pytest.mark.parametrize(
    ("fixture", "status", "expected"),
    [
        ("create-vnpu.no-aicore.txt", 217, (driver_codes.INNER_ERR, "Insufficient number of cores available")),
        ("create-vnpu.failed.txt", 203, (driver_codes.INNER_ERR, "create vnpu failed. (exit status 203)")),
        ("create-vnpu.vm-mode.txt", 0, (driver_codes.OPER_NOT_PERMITTED, "is not in docker mode")),
    ],
)
def test_a_refused_create_is_a_vnpu_error_with_the_code(
    host: Path, backend: NpuSmiBackend, fixture: str, status: int, expected: tuple[int, str]
) -> None:
    code, words = expected
    answer(host, "create-vnpu", fixture, status=status)

    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(4, "vir05_1c_16g", 166)

    assert raised.value.code == code
    message = str(raised.value)
    assert message.startswith(f"`{host} set -t create-vnpu -i 4 -c 0 -f vir05_1c_16g -v 166` failed: ")
    assert words in message
    assert "\n" not in message


def test_destroy_passes_card_chip_and_id(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "destroy-vnpu", "destroy-vnpu.ok.txt")

    backend.destroy_vnpu(4, 164)

    assert set_log(host) == ["set -t destroy-vnpu -i 4 -c 0 -v 164"]


def test_destroying_a_missing_vnpu_is_not_found(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "destroy-vnpu", "destroy-vnpu.missing.txt", status=215)

    with pytest.raises(VnpuNotFoundError, match="npu-4 has no vNPU 164") as raised:
        backend.destroy_vnpu(4, 164)
    assert raised.value.code == driver_codes.DEVICE_NOT_EXIST


def test_a_refused_destroy_is_a_vnpu_error(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "destroy-vnpu", "destroy-vnpu.failed.txt", status=196)

    with pytest.raises(VnpuError, match=r"failed: destroy vnpu 164 failed\. \(exit status 196\)") as raised:
        backend.destroy_vnpu(4, 164)
    assert not isinstance(raised.value, VnpuNotFoundError)


def test_destroy_all_id_is_refused_before_npu_smi_runs(host: Path, backend: NpuSmiBackend) -> None:
    answer(host, "destroy-vnpu", "destroy-vnpu.ok.txt")

    with pytest.raises(VnpuError, match="refusing to destroy vNPU 65535 on npu-4: the driver reads that id as every"):
        backend.destroy_vnpu(4, 0xFFFF)
    assert set_log(host) == []


def test_a_hung_create_is_killed_at_the_timeout(host: Path, tmp_path: Path) -> None:
    backend = NpuSmiBackend(str(host), hccn_tool=NO_HCCN_TOOL, timeout=0.5)
    backend.discover()
    hung = tmp_path / "hung"
    hung.mkdir()
    script(hung / "npu-smi", f'#!/bin/sh\ncase "$1" in set) sleep 30 ;; *) exec {host} "$@" ;; esac\n')
    backend.executable = str(hung / "npu-smi")

    with pytest.raises(VnpuError, match=r"did not finish within 0\.5 s and was killed") as raised:
        backend.create_vnpu(4, "vir05_1c_16g", 166)
    assert raised.value.code == driver_codes.INNER_ERR


def test_a_missing_executable_is_a_vnpu_error_on_create(backend: NpuSmiBackend, tmp_path: Path) -> None:
    backend.executable = str(tmp_path / "absent")

    with pytest.raises(VnpuError, match="not found; install the Ascend driver package"):
        backend.create_vnpu(4, "vir05_1c_16g", 166)
