"""The ownership ledger's pure functions: --dra-devices parsing, partition, handover rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npu_plugin.config import Mode
from npu_plugin.errors import ConfigError
from npu_plugin.inventory.ownership import Holders, Owner, Partition, initial_owners, next_owners, parse_device_list
from tests.support.fake_devices import profile_devices

A2 = profile_devices("atlas-800t-a2")
RINGS = profile_devices("atlas-800-9000")
DP, DRA = Owner.DEVICE_PLUGIN, Owner.DRA


@pytest.mark.parametrize(
    ("text", "devices", "expected"),
    [
        ("4-7", A2, {4, 5, 6, 7}),
        ("4-7,1", A2, {1, 4, 5, 6, 7}),
        (" 0 , 2 ", A2, {0, 2}),
        ("ring-1", RINGS, {4, 5, 6, 7}),
        ("ring-0,7", RINGS, {0, 1, 2, 3, 7}),
        ("5-5", A2, {5}),
    ],
)
def test_device_lists_name_ids_ranges_and_groups(text: str, devices: list, expected: set[int]) -> None:
    assert parse_device_list(text, devices) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--dra-devices is empty"),
        (" , ", "--dra-devices is empty"),
        ("8", "no device with physical id [8]"),
        ("6-9", "no device with physical id [8, 9]"),
        ("7-4", "range '7-4' runs backwards"),
        ("4-7,5", "'5' repeats device(s) [5]"),
        ("ring-0,ring-0", "repeats device(s)"),
        ("ring-9", "neither an id, a range like 4-7, nor a topology group (groups here: ring-0)"),
        ("npu-3", "neither an id"),
        ("-1", "neither an id"),
    ],
)
def test_bad_device_lists_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--dra-devices") as raised:
        parse_device_list(text, A2)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("device-plugin", [DP] * 8),
        ("dra", [DRA] * 8),
        ("both", [DP] * 4 + [DRA] * 4),
    ],
)
def test_partition_by_mode(mode: str, expected: list[Owner]) -> None:
    assert list(Partition(Mode(mode), frozenset({4, 5, 6, 7})).owners(A2).values()) == expected


DESIRED = {0: DP, 1: DP, 2: DRA, 3: DRA}


@pytest.mark.parametrize(
    ("holders", "expected"),
    [
        (Holders(frozenset(), frozenset()), DESIRED),
        # a container still holds device 2: it stays with the device plugin
        (Holders(frozenset({2}), frozenset()), {0: DP, 1: DP, 2: DP, 3: DRA}),
        # a prepared claim still holds device 1: it stays with DRA
        (Holders(frozenset(), frozenset({1})), {0: DP, 1: DRA, 2: DRA, 3: DRA}),
        # PodResources unreadable: every device that would move to DRA stays with the device plugin
        (Holders(None, frozenset()), {0: DP, 1: DP, 2: DP, 3: DP}),
        (Holders(None, frozenset({3})), {0: DP, 1: DP, 2: DP, 3: DRA}),
    ],
)
def test_initial_owners_keep_held_devices_with_their_holder(holders: Holders, expected: dict[int, Owner]) -> None:
    assert initial_owners(DESIRED, holders) == expected


@pytest.mark.parametrize(
    ("current", "holders", "expected"),
    [
        ({0: DP, 1: DRA, 2: DP, 3: DRA}, Holders(frozenset({2}), frozenset({1})), {0: DP, 1: DRA, 2: DP, 3: DRA}),
        ({0: DP, 1: DRA, 2: DP, 3: DRA}, Holders(frozenset(), frozenset({1})), {0: DP, 1: DRA, 2: DRA, 3: DRA}),
        ({0: DP, 1: DRA, 2: DP, 3: DRA}, Holders(frozenset({2}), frozenset()), {0: DP, 1: DP, 2: DP, 3: DRA}),
        ({0: DP, 1: DRA, 2: DP, 3: DRA}, Holders(None, frozenset()), {0: DP, 1: DP, 2: DP, 3: DRA}),
    ],
)
def test_released_devices_move_to_their_partition_side(
    current: dict[int, Owner], holders: Holders, expected: dict[int, Owner]
) -> None:
    assert next_owners(DESIRED, current, holders) == expected


NEW_IN_RING_1 = replace(RINGS[4], physical_id=8)
NEW_IN_RING_2 = replace(RINGS[4], physical_id=9, topology_group="ring-2")


@pytest.mark.parametrize(
    ("mode", "dra_devices", "expected"),
    [
        ("device-plugin", None, [DP, DP]),
        ("dra", None, [DRA, DRA]),
        ("both", "ring-1", [DRA, DP]),
        ("both", "4-7", [DP, DP]),
        ("both", "0,ring-1", [DRA, DP]),
    ],
)
def test_a_device_found_after_start_follows_the_partition(
    mode: str, dra_devices: str | None, expected: list[Owner]
) -> None:
    rule = Partition.of(Mode(mode), dra_devices, RINGS)
    assert [rule.owner_of(d) for d in (NEW_IN_RING_1, NEW_IN_RING_2)] == expected
