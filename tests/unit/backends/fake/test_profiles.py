"""The built-in profiles' vNPU tables: the driver's figures, the chips' totals and who may split on
demand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from npu_plugin.ascend.vnpu import ChipMode, candidate_count, candidates, consumption, counter_totals
from npu_plugin.backends.fake.profiles import PROFILES, profile_inventory


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_template_count_is_maximal(profile: str) -> None:
    """n instances of a template fit the chip's counters, and one more exceeds some counter."""
    for chip in profile_inventory(profile).vnpu.values():
        totals = counter_totals(chip)
        for template in chip.templates:
            count = candidate_count(chip, template)
            uses = consumption(chip, template)
            assert count >= 1, (profile, template.name)
            assert all(count * amount <= totals[name] for name, amount in uses.items()), template.name
            assert any((count + 1) * amount > totals[name] for name, amount in uses.items()), template.name


def test_atlas_800t_a2_is_eight_dynamic_910b3_with_the_issue_135_totals() -> None:
    inventory = profile_inventory("atlas-800t-a2")
    assert sorted(inventory.vnpu) == list(range(8))
    chip = inventory.vnpu[4]
    assert (chip.mode, chip.dynamic_supported, chip.id_range, chip.vnpus) == (ChipMode.CONTAINER, True, (164, 179), ())
    assert counter_totals(chip) == {
        name: Decimal(value)
        for name, value in {"aicore": 20, "aicpu": 7, "vpc": 9, "vdec": 2, "jpegd": 24, "jpege": 4, "vnpus": 16}.items()
    }
    assert [(c.template.name, c.index) for c in candidates(chip)] == [
        *(("vir05_1c_16g", k) for k in range(4)),
        *(("vir10_3c_32g", k) for k in range(2)),
    ]


def test_atlas_300i_pro_offers_20_candidates_per_chip_with_vir01_seven_times() -> None:
    inventory = profile_inventory("atlas-300i-pro")
    assert [(d.card_id, d.chip_id) for d in inventory.devices] == [(i, 0) for i in range(4)]
    for chip in inventory.vnpu.values():
        assert chip.dynamic_supported
        assert chip.id_range == (chip.physical_id * 16 + 100, chip.physical_id * 16 + 107)
        counts = {t.name: candidate_count(chip, t) for t in chip.templates}
        assert counts == {
            "vir01": 7,
            "vir02": 3,
            "vir02_1c": 4,
            "vir04": 1,
            "vir04_3c": 2,
            "vir04_3c_ndvpp": 2,
            "vir04_4c_dvpp": 1,
        }
        assert len(candidates(chip)) + 1 == 21  # and the whole NPU


@pytest.mark.parametrize("profile", ["atlas-300i-duo", "atlas-800-9000"])
def test_the_duo_and_the_910a_are_static_only(profile: str) -> None:
    inventory = profile_inventory(profile)
    assert inventory.vnpu and not any(chip.dynamic_supported for chip in inventory.vnpu.values())


def test_the_910a_reports_ai_cores_only() -> None:
    chip = profile_inventory("atlas-800-9000").vnpu[0]
    assert chip.totals == {"aicore": Decimal(32)}
    assert [(t.name, t.aicore, t.memory // 2**20) for t in chip.templates] == [
        ("vir02", 2, 2048),
        ("vir04", 4, 4096),
        ("vir08", 8, 8192),
        ("vir16", 16, 16384),
    ]
