"""Share ids and the choice among free shares (spread or pack)."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.shares import ShareAllocation, ShareRef, Unit, parse_share_id, preferred_units, share_id

SPREAD, PACK = ShareAllocation.SPREAD, ShareAllocation.PACK


def test_a_share_id_names_its_chip_and_reads_back() -> None:
    assert share_id("Ascend310P", 3, 7) == "Ascend310P-3-share-7"
    assert parse_share_id("Ascend310P-3-share-7") == ShareRef("Ascend310P", 3, 7)


@pytest.mark.parametrize(
    "device_id",
    [
        "Ascend310P-3",
        "Ascend310P-3-share-07",
        "Ascend310P-03-share-7",
        "Ascend310P-3-share-100",
        "npu-3-share-1",
        "Ascend310P-3-share-1\n",
        "Ascend310P-3-share-",
    ],
)
def test_other_forms_are_not_share_ids(device_id: str) -> None:
    assert parse_share_id(device_id) is None


def shares(counts: dict[int, int]) -> list[Unit]:
    return [(chip, index) for chip, count in counts.items() for index in range(count)]


@pytest.mark.parametrize(
    ("available", "required", "size", "how", "expected"),
    [
        # spread: each share from the chip with the most free shares left
        (shares({0: 4, 1: 4}), [], 2, SPREAD, [(0, 0), (1, 0)]),
        (shares({0: 2, 1: 4}), [], 1, SPREAD, [(1, 0)]),
        (shares({0: 2, 1: 4, 2: 3}), [], 3, SPREAD, [(1, 0), (1, 1), (2, 0)]),
        # pack: from the chip with the fewest free shares left, filling it first
        (shares({0: 4, 1: 4}), [], 2, PACK, [(0, 0), (0, 1)]),
        (shares({0: 2, 1: 4}), [], 3, PACK, [(0, 0), (0, 1), (1, 0)]),
        # required shares come first, whatever the policy
        (shares({0: 4, 1: 4}), [(1, 3)], 2, PACK, [(1, 3), (1, 0)]),
        (shares({0: 4, 1: 4}), [(1, 3)], 2, SPREAD, [(1, 3), (0, 0)]),
        # whole chips listed beside shared ones go last
        ([(5, None), *shares({0: 1})], [], 1, PACK, [(0, 0)]),
        ([(5, None), *shares({0: 1})], [], 2, SPREAD, [(0, 0), (5, None)]),
    ],
)
def test_preferred_units(
    available: list[Unit], required: list[Unit], size: int, how: ShareAllocation, expected: list[Unit]
) -> None:
    assert preferred_units(available, required, size, how) == expected


@pytest.mark.parametrize(
    ("available", "required", "size", "problem"),
    [
        (shares({0: 2}), [], 3, "cannot choose 3 of 2"),
        (shares({0: 2}), [(1, 0)], 1, "not available"),
        (shares({0: 2}), [(0, 0), (0, 1)], 1, "with 2 required"),
    ],
)
def test_an_impossible_request_says_why(available: list[Unit], required: list[Unit], size: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        preferred_units(available, required, size, SPREAD)
