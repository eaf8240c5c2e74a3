"""npu-smi's vNPU commands: the fixtures parse into the driver's tables, and every breakage names
command and line."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.vnpu import ChipMode, VnpuTemplate
from npu_plugin.backends.npusmi.vnpu_parse import (
    GIB,
    ChipVnpuTable,
    VnpuRow,
    info_vnpu_refusal,
    parse_create_vnpu,
    parse_destroy_vnpu,
    parse_info_vnpu,
    parse_template_info,
    parse_vnpu_mode,
)
from npu_plugin.errors import NpuSmiParseError

FIXTURES = Path(__file__).parents[3] / "fixtures" / "npu-smi"
D = Decimal


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def template(name: str, aicore: int, gb: int, *uses: float) -> VnpuTemplate:
    """The driver table's column order: AICPU, VPC, VENC, VDEC, JPEGD, JPEGE, PNGD (0 omitted, as
    the model wants)."""
    names = ("aicpu", "vpc", "venc", "vdec", "jpegd", "jpege", "pngd")
    return VnpuTemplate(name, aicore, gb * GIB, {k: D(str(v)) for k, v in zip(names, uses, strict=True) if v})


# The driver's "show" tables (dcmi_inner_info_get.c), as template-info prints them.
TEMPLATE_TABLES = {
    "910b3.template-info.txt": (
        template("vir10_3c_32g", 10, 32, 3, 4, 0, 1, 12, 2, 0),
        template("vir05_1c_16g", 5, 16, 1, 2, 0, 0, 6, 1, 0),
    ),
    "310p3.template-info.txt": (
        template("vir01", 1, 3, 1, 1, 0, 1, 2, 1, 0),
        template("vir02", 2, 6, 2, 3, 1, 3, 4, 2, 0),
        template("vir02_1c", 2, 6, 1, 3, 0, 3, 4, 2, 0),
        template("vir04", 4, 12, 4, 6, 2, 6, 8, 4, 0),
        template("vir04_3c", 4, 12, 3, 6, 1, 6, 8, 4, 0),
        template("vir04_3c_ndvpp", 4, 12, 3, 0, 0, 0, 0, 0, 0),
        template("vir04_4c_dvpp", 4, 12, 4, 12, 3, 12, 16, 8, 0),
    ),
    "910a.template-info.txt": (
        template("vir02", 2, 2, 1, 1, 0, 1, 1, 0, 1.5),
        template("vir04", 4, 4, 1, 2, 0, 2, 2, 1, 3),
        template("vir08", 8, 8, 3, 4, 0, 4, 4, 2, 6),
        template("vir16", 16, 16, 7, 8, 0, 8, 8, 4, 12),
    ),
}


@pytest.mark.parametrize(("name", "expected"), TEMPLATE_TABLES.items(), ids=list(TEMPLATE_TABLES))
def test_template_info_fixtures_give_the_driver_tables(name: str, expected: tuple[VnpuTemplate, ...]) -> None:
    assert parse_template_info(fixture(name)) == expected


def test_an_empty_template_table_is_no_templates() -> None:
    head = "\n".join(fixture("910b3.template-info.txt").splitlines()[:5])

    assert parse_template_info(head) == ()


_135_TOTAL = {"aicore": 20, "memory": 64, "aicpu": 7, "vpc": 9, "venc": 0, "vdec": 2, "jpegd": 24, "jpege": 4}
_135_FREE = {"aicore": 10, "memory": 30, "aicpu": 5, "vpc": 5, "venc": 0, "vdec": 2, "jpegd": 12, "jpege": 2}


def _decimals(values: dict[str, int]) -> dict[str, Decimal]:
    return {k: D(v) for k, v in values.items()}


INFO_VNPU = {
    # ascend-device-plugin#135: a 910B3 after two vir05_1c_16g; PNGD is NA.
    "910b3.info-vnpu.txt": ChipVnpuTable(
        _decimals(_135_FREE),
        _decimals(_135_TOTAL),
        (
            VnpuRow(164, 0, "000000000000", 0, "vir05_1c_16g", 13),
            VnpuRow(165, 1, "000000000000", 0, "vir05_1c_16g", 15),
        ),
    ),
    # newer npu-smi prints no row header when the chip has no vNPU
    "910b3-empty.info-vnpu.txt": ChipVnpuTable(
        _decimals(_135_TOTAL | {"aicore": 20, "memory": 60, "aicpu": 7, "vpc": 9, "jpegd": 24, "jpege": 4}),
        _decimals(_135_TOTAL),
        (),
    ),
    # only AI cores and memory reported; NA vgroup and container
    "910a-na.info-vnpu.txt": ChipVnpuTable(
        _decimals({"aicore": 24, "memory": 24}),
        _decimals({"aicore": 32, "memory": 32}),
        (VnpuRow(100, None, None, 1, "vir08", 13),),
    ),
    "310p3.info-vnpu.txt": ChipVnpuTable(
        _decimals({"aicore": 4, "memory": 12, "aicpu": 3, "vpc": 6, "venc": 1, "vdec": 6, "jpegd": 8, "jpege": 4}),
        _decimals({"aicore": 8, "memory": 24, "aicpu": 7, "vpc": 12, "venc": 3, "vdec": 12, "jpegd": 16, "jpege": 8}),
        (VnpuRow(100, 0, "0000000003e8", 1, "vir04", 13),),
    ),
}


CREATE_OUTCOMES = [
    ("create-vnpu.ok.txt", 0, True, 0, "Create vnpu success"),
    ("create-vnpu.no-aicore.txt", 217, False, driver_codes.INNER_ERR, "Insufficient number of cores"),
    ("create-vnpu.no-dvpp.txt", 217, False, driver_codes.INNER_ERR, "VPC:1.000000"),
    ("create-vnpu.failed.txt", 203, False, driver_codes.INNER_ERR, "create vnpu failed. (exit status 203)"),
    # npu-smi refuses in VM mode with exit status 0
    ("create-vnpu.vm-mode.txt", 0, False, driver_codes.OPER_NOT_PERMITTED, "not in docker mode"),
    # a success text but a failing exit status is a failure
    ("create-vnpu.ok.txt", 1, False, driver_codes.INNER_ERR, "(exit status 1)"),
]
DESTROY_OUTCOMES = [
    ("destroy-vnpu.ok.txt", 0, True, 0),
    ("destroy-vnpu.missing.txt", 215, False, driver_codes.DEVICE_NOT_EXIST),
    ("destroy-vnpu.failed.txt", 196, False, driver_codes.INNER_ERR),
]
MODES = [("vnpu-mode.docker.txt", ChipMode.CONTAINER), ("vnpu-mode.vm.txt", ChipMode.VM)]
REFUSALS = [("info-vnpu.vm-mode.txt", ChipMode.VM), ("910b3.info-vnpu.txt", None)]
# Every vNPU fixture this module reads; test_npusmi_parse checks the others.
VNPU_FIXTURES = {
    *TEMPLATE_TABLES,
    *INFO_VNPU,
    *(case[0] for case in (*CREATE_OUTCOMES, *DESTROY_OUTCOMES, *MODES, *REFUSALS)),
}


@pytest.mark.parametrize(("name", "expected"), INFO_VNPU.items(), ids=list(INFO_VNPU))
def test_info_vnpu_fixtures(name: str, expected: ChipVnpuTable) -> None:
    assert parse_info_vnpu(fixture(name)) == expected


def test_the_135_figures_have_no_pngd_and_list_164_as_vir05() -> None:
    table = parse_info_vnpu(fixture("910b3.info-vnpu.txt"))

    assert "pngd" not in table.total
    assert "pngd" not in table.free
    assert [(row.vnpu_id, row.template) for row in table.vnpus] == [(164, "vir05_1c_16g"), (165, "vir05_1c_16g")]


@pytest.mark.parametrize(("name", "mode"), REFUSALS)
def test_info_vnpu_refusals_tell_the_mode(name: str, mode: ChipMode | None) -> None:
    assert info_vnpu_refusal(fixture(name)) == mode


def test_smp_mode_refusal_means_unsupported() -> None:
    assert info_vnpu_refusal("NPU is working in SMP mode, does not support vnpu query.\n") is ChipMode.UNSUPPORTED


@pytest.mark.parametrize(("name", "mode"), MODES)
def test_vnpu_mode(name: str, mode: ChipMode) -> None:
    assert parse_vnpu_mode(fixture(name)) is mode


# ---- set -t create-vnpu / destroy-vnpu


def test_every_vnpu_fixture_exists() -> None:
    assert all((FIXTURES / name).is_file() for name in VNPU_FIXTURES)


@pytest.mark.parametrize(("name", "status", "ok", "code", "words"), CREATE_OUTCOMES)
def test_create_outcomes(name: str, status: int, ok: bool, code: int, words: str) -> None:
    outcome = parse_create_vnpu(fixture(name), status)

    assert (outcome.ok, outcome.code) == (ok, code)
    assert words in outcome.message
    assert "\n" not in outcome.message


def test_create_refusals_without_a_fixture() -> None:
    assert parse_create_vnpu("Error parameter of -v.\n", 215).code == driver_codes.INVALID_PARAMETER
    assert parse_create_vnpu("", 0).message == "no output"
    smp = "NPU is working in SMP mode, does not support vnpu creation.\n"
    assert parse_create_vnpu(smp, 217).code == driver_codes.NOT_SUPPORT


@pytest.mark.parametrize(("name", "status", "ok", "code"), DESTROY_OUTCOMES)
def test_destroy_outcomes(name: str, status: int, ok: bool, code: int) -> None:
    outcome = parse_destroy_vnpu(fixture(name), status, 164)

    assert (outcome.ok, outcome.code) == (ok, code)


def test_a_success_that_names_another_vnpu_is_malformed() -> None:
    with pytest.raises(NpuSmiParseError, match=r"^npu-smi set -t destroy-vnpu: .*'Destroy vnpu 165 success'"):
        parse_destroy_vnpu(fixture("destroy-vnpu.ok.txt"), 0, 165)


def test_status_ok_without_the_create_message_is_malformed() -> None:
    with pytest.raises(NpuSmiParseError, match="without 'Create vnpu success'"):
        parse_create_vnpu("\tStatus : OK\n\tMessage : something else\n", 0)


# ---- malformed output: each names the command, the line and what was expected


def _edit(name: str, line: int, replacement: str | None) -> str:
    lines = fixture(name).splitlines()
    if replacement is None:
        del lines[line - 1]
    else:
        lines[line - 1] = replacement
    return "\n".join(lines) + "\n"


def _where(command: str, message: str) -> str:
    """The error's start: `npu-smi info -t <command>, line N: ...` when the message names a line."""
    return f"^npu-smi info -t {command}{', ' if message.startswith('line ') else ': '}{message}"


TEMPLATE_BREAKAGE = [
    ("nothing", "", r"no template table header .*it printed nothing"),
    ("no second header", _edit("910b3.template-info.txt", 4, None), r"line 4: expected the header row 'GB PNGD"),
    ("no rule", _edit("910b3.template-info.txt", 5, "|vir01 1 3|"), r"line 5: expected a '\|=====\|' rule"),
    ("short row", _edit("910b3.template-info.txt", 6, "|vir10_3c_32g 10 32 3 4 0|"), r"line 6: expected '\|<name>"),
    ("row cut", _edit("910b3.template-info.txt", 7, None), r"line 7: expected the second row of vir10_3c_32g"),
    ("no closing rule", _edit("910b3.template-info.txt", 8, "|vir05 5 16 1 2 0 6|"), r"line 8: expected a '\+-----\+'"),
    ("letters", _edit("910b3.template-info.txt", 6, "|vir10_3c_32g ten 32 3 4 0 12|"), r"line 6: expected AICORE"),
    (
        "fraction of cores",
        _edit("910b3.template-info.txt", 6, "|vir10 1.5 32 3 4 0 12|"),
        r"line 6: expected AICORE \(a whole number",
    ),
    ("negative", _edit("910b3.template-info.txt", 7, "|  -1  1  2 |"), r"line 7: expected PNGD \(a number\), got '-1'"),
    (
        "duplicate",
        fixture("910b3.template-info.txt") + "\n".join(fixture("910b3.template-info.txt").splitlines()[5:8]),
        r"line 12: template 'vir10_3c_32g' is listed twice \(first at line 6\)",
    ),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in TEMPLATE_BREAKAGE], ids=[c[0] for c in TEMPLATE_BREAKAGE])
def test_malformed_template_info(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError, match=_where("template-info", message)):
        parse_template_info(text)


INFO_VNPU_BREAKAGE = [
    ("nothing", "", r"no resource header .*it printed nothing"),
    ("no GB row", _edit("910b3.info-vnpu.txt", 5, None), r"line 5: expected the header row 'GB'"),
    ("no rule", _edit("910b3.info-vnpu.txt", 6, "| x |"), r"line 6: expected a '\|=====\|' rule"),
    (
        "eight values",
        _edit("910b3.info-vnpu.txt", 7, "| 10/20 30/64 5/7 5/9 0/0 2/2 12/24 2/4 |"),
        r"line 7: expected 9",
    ),
    ("bad value", _edit("910b3.info-vnpu.txt", 7, "| 10/20 30/64 5/7 5/9 0/0 2/2 12/24 2/4 NA |"), r"line 7: .*pngd"),
    (
        "half NA",
        _edit("910b3.info-vnpu.txt", 7, "| 10/20 30/64 NA/7 5/9 0/0 2/2 12/24 2/4 NA/NA |"),
        r"line 7: expected aicpu as",
    ),
    ("no count", _edit("910b3.info-vnpu.txt", 9, "| Total vnpu: 2 |"), r"line 9: expected '\| Total number of vnpu"),
    (
        "count too high",
        _edit("910b3.info-vnpu.txt", 9, "| Total number of vnpu: 3 |"),
        r"line 15: 'Total number of vnpu: 3' but 2",
    ),
    ("row cut", _edit("910b3.info-vnpu.txt", 15, None), r"line 13: 'Total number of vnpu: 2' but 1 vNPU rows"),
    ("no header", _edit("910b3.info-vnpu.txt", 11, "| what |"), r"line 11: expected the header '\| Vnpu ID"),
    (
        "short row",
        _edit("910b3.info-vnpu.txt", 13, "|  164  |  0  |  vir05_1c_16g  |"),
        r"line 13: expected '\| <Vnpu ID>",
    ),
    (
        "bad id",
        _edit("910b3.info-vnpu.txt", 13, "| x | 0 | 000000000000 | 0 | vir05 |"),
        r"line 13: expected '\| <Vnpu",
    ),
    ("bad group", _edit("910b3.info-vnpu.txt", 13, "| 164 | g | 000000000000 | 0 | vir05 |"), r"line 13: .*Vgroup ID"),
    ("bad container", _edit("910b3.info-vnpu.txt", 13, "| 164 | 0 | zz | 0 | vir05 |"), r"line 13: .*Container ID"),
    ("no template", _edit("910b3.info-vnpu.txt", 13, "| 164 | 0 | 000000000000 | 0 |  |"), r"line 13: expected"),
    ("twice", _edit("910b3.info-vnpu.txt", 15, "| 164 | 1 | 000000000000 | 0 | vir05 |"), r"line 15: vNPU 164 .*twice"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in INFO_VNPU_BREAKAGE], ids=[c[0] for c in INFO_VNPU_BREAKAGE]
)
def test_malformed_info_vnpu(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError, match=_where("info-vnpu", message)):
        parse_info_vnpu(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", r"no 'vnpu-mode : <docker\|VM>' line; it printed nothing"), ("\tvnpu-mode : host\n", r"line 1: .*'host'")],
)
def test_malformed_vnpu_mode(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError, match=_where("vnpu-mode", message)):
        parse_vnpu_mode(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("|+-= \n0123456789/NAvir_cgGBAICORE")), max_size=400))
def test_any_text_parses_or_raises_only_the_parse_error(text: str) -> None:
    for parse in (parse_template_info, parse_info_vnpu, parse_vnpu_mode):
        try:
            parse(text)
        except NpuSmiParseError as error:
            assert "\n" not in str(error)
