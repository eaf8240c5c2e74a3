"""vnpu.py: counter sets, candidate counts and order, device names and Ascend's resource
suffixes."""

from __future__ import annotations

from decimal import Decimal

import pytest

from npu_plugin.ascend.vnpu import (
    CandidateName,
    ChipMode,
    ChipVnpu,
    StaticName,
    VnpuTemplate,
    candidate_count,
    candidates,
    consumption,
    counter_totals,
    default_id_range,
    dp_suffix,
    format_counter,
    parse_vnpu_name,
    resolve_candidate,
)

GI = 2**30


def template(name: str, aicore: int, memory_gi: int, *uses: float) -> VnpuTemplate:
    """A template row as the driver prints it: AICPU, VPC, VENC, VDEC, JPEGD, JPEGE, PNGD (trailing
    ones omitted)."""
    names = ("aicpu", "vpc", "venc", "vdec", "jpegd", "jpege", "pngd")
    amounts = {k: Decimal(str(v)) for k, v in zip(names, uses, strict=False) if v}
    return VnpuTemplate(name, aicore, memory_gi * GI, amounts)


def totals(**values: float) -> dict[str, Decimal]:
    return {k: Decimal(str(v)) for k, v in values.items()}


# 910B3 (bin1): totals of ascend-device-plugin#135, templates of the driver's bin1 show table.
B3 = ChipVnpu(
    physical_id=0,
    mode=ChipMode.CONTAINER,
    totals=totals(aicore=20, aicpu=7, vpc=9, venc=0, vdec=2, jpegd=24, jpege=4),
    templates=(
        template("vir10_3c_32g", 10, 32, 3, 4, 0, 1, 12, 2, 0),
        template("vir05_1c_16g", 5, 16, 1, 2, 0, 0, 6, 1, 0),
    ),
    id_range=default_id_range(0, "Ascend910B"),
    dynamic_supported=True,
)

# 310P3 24 GB: the driver's 310P table and the MindX DL totals.
P3 = ChipVnpu(
    physical_id=2,
    mode=ChipMode.CONTAINER,
    totals=totals(aicore=8, aicpu=7, vpc=12, venc=3, vdec=12, jpegd=16, jpege=8),
    templates=(
        template("vir01", 1, 3, 1, 1, 0, 1, 2, 1, 0),
        template("vir02", 2, 6, 2, 3, 1, 3, 4, 2, 0),
        template("vir02_1c", 2, 6, 1, 3, 0, 3, 4, 2, 0),
        template("vir04", 4, 12, 4, 6, 2, 6, 8, 4, 0),
        template("vir04_3c", 4, 12, 3, 6, 1, 6, 8, 4, 0),
        template("vir04_3c_ndvpp", 4, 12, 3, 0, 0, 0, 0, 0, 0),
        template("vir04_4c_dvpp", 4, 12, 4, 12, 3, 12, 16, 8, 0),
    ),
    id_range=default_id_range(2, "Ascend310P"),
    dynamic_supported=True,
)


def test_counter_set_has_reported_resources_above_zero_and_vnpu_ids_but_no_memory() -> None:
    assert counter_totals(B3) == totals(aicore=20, aicpu=7, vpc=9, vdec=2, jpegd=24, jpege=4, vnpus=16)
    assert "memory" not in counter_totals(P3)
    assert counter_totals(P3)["vnpus"] == 8


def test_a_template_consumes_its_cores_its_nonzero_uses_and_one_id() -> None:
    assert consumption(B3, B3.templates[1]) == totals(aicore=5, aicpu=1, vpc=2, jpegd=6, jpege=1, vnpus=1)


@pytest.mark.parametrize(
    ("chip", "expected"),
    [
        (B3, {"vir05_1c_16g": 4, "vir10_3c_32g": 2}),
        (
            P3,
            {
                "vir01": 7,  # AICPU-bound
                "vir02": 3,
                "vir02_1c": 4,
                "vir04": 1,
                "vir04_3c": 2,
                "vir04_3c_ndvpp": 2,
                "vir04_4c_dvpp": 1,
            },
        ),
    ],
    ids=["910B3", "310P3"],
)
def test_candidate_counts_are_maximal(chip: ChipVnpu, expected: dict[str, int]) -> None:
    assert {t.name: candidate_count(chip, t) for t in chip.templates} == expected
    limits = counter_totals(chip)
    for t in chip.templates:
        n, used = expected[t.name], consumption(chip, t)
        assert all(n * amount <= limits[c] for c, amount in used.items())
        assert any((n + 1) * amount > limits[c] for c, amount in used.items())


def test_unreported_resources_do_not_bind() -> None:
    no_aicpu = ChipVnpu(1, ChipMode.CONTAINER, totals(aicore=32), (template("vir08", 8, 8, 3, 4),), (116, 131), False)
    assert candidate_count(no_aicpu, no_aicpu.templates[0]) == 4


def test_candidates_smallest_first_then_index() -> None:
    names = [c.name for c in candidates(B3)]
    assert names == [
        "npu-0-vir05-1c-16g-0",
        "npu-0-vir05-1c-16g-1",
        "npu-0-vir05-1c-16g-2",
        "npu-0-vir05-1c-16g-3",
        "npu-0-vir10-3c-32g-0",
        "npu-0-vir10-3c-32g-1",
    ]
    assert len(candidates(P3)) == 20
    assert [c.name for c in candidates(B3, frozenset({"vir10_3c_32g"}))] == [
        "npu-0-vir10-3c-32g-0",
        "npu-0-vir10-3c-32g-1",
    ]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("npu-3-vir10-3c-16g-nm-1", CandidateName(3, "vir10-3c-16g-nm", 1)),
        ("npu-0-vir01-6", CandidateName(0, "vir01", 6)),
        ("npu-4-vnpu-164", StaticName(4, 164)),
        ("npu-4", None),
        ("npu-04-vnpu-164", None),
        ("npu-4-vnpu-0164", None),
        ("npu-4-vir05-1c-16g-01", None),
        ("npu-4-vir5-1c-0", None),
        ("npu-4-vir05_1c_16g-0", None),
        ("npu-4-vnpu-164\n", None),
    ],
)
def test_vnpu_names_parse_strictly(name: str, parsed: object) -> None:
    assert parse_vnpu_name(name) == parsed


def test_resolving_a_candidate_checks_template_and_index() -> None:
    assert resolve_candidate(B3, CandidateName(0, "vir05-1c-16g", 3)).name == "npu-0-vir05-1c-16g-3"
    with pytest.raises(ValueError, match="holds 4 of vir05_1c_16g"):
        resolve_candidate(B3, CandidateName(0, "vir05-1c-16g", 4))
    with pytest.raises(ValueError, match="no template 'vir07'"):
        resolve_candidate(B3, CandidateName(0, "vir07", 0))
    with pytest.raises(ValueError, match="no template"):
        resolve_candidate(B3, CandidateName(0, "vir05-1c-16g", 0), offered=frozenset({"vir10_3c_32g"}))


# Every pair of Ascend's device plugin (GetTemplateName2DeviceTypeMap), derived by the rule, not
# looked up.
ASCEND_SUFFIXES = {
    "vir16": "16c",
    "vir08": "8c",
    "vir04": "4c",
    "vir02": "2c",
    "vir01": "1c",
    "vir02_1c": "2c.1cpu",
    "vir04_3c": "4c.3cpu",
    "vir04_3c_ndvpp": "4c.3cpu.ndvpp",
    "vir04_4c_dvpp": "4c.4cpu.dvpp",
    "vir03_1c_8g": "3c.1cpu.8g",
    "vir05_1c_8g": "5c.1cpu.8g",
    "vir05_1c_16g": "5c.1cpu.16g",
    "vir06_1c_16g": "6c.1cpu.16g",
    "vir10_3c_16g": "10c.3cpu.16g",
    "vir10_3c_16g_nm": "10c.3cpu.16g.ndvpp",
    "vir10_3c_32g": "10c.3cpu.32g",
    "vir10_4c_16g_m": "10c.4cpu.16g.dvpp",
    "vir12_3c_32g": "12c.3cpu.32g",
}


@pytest.mark.parametrize(("template_name", "suffix"), ASCEND_SUFFIXES.items())
def test_dp_suffix_matches_ascend(template_name: str, suffix: str) -> None:
    assert dp_suffix(template_name) == suffix


@pytest.mark.parametrize("template_name", ["vir5", "vnpu01", "vir04_x", "vir04_3c_", "VIR04"])
def test_dp_suffix_refuses_unknown_tokens(template_name: str) -> None:
    assert dp_suffix(template_name) is None


@pytest.mark.parametrize(("value", "text"), [("20", "20"), ("1.5", "1500m"), ("0", "0"), ("0.5", "500m")])
def test_counter_values_are_canonical_quantities(value: str, text: str) -> None:
    assert format_counter(Decimal(value)) == text


def test_id_ranges() -> None:
    assert default_id_range(4, "Ascend910B") == (164, 179)
    assert default_id_range(1, "Ascend310P") == (116, 123)
