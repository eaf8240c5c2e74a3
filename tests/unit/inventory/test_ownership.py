"""The ownership ledger's pure functions: --dra-devices parsing, partition, handover rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npu_plugin.config import Mode
from npu_plugin.errors import ConfigError
from npu_plugin.inventory.ownership import (
    Holders,
    Owner,
    Partition,
    Split,
    initial_owners,
    next_owners,
    node_split,
    parse_split,
)
from tests.support.fake_devices import profile_devices

A2 = profile_devices("atlas-800t-a2")
RINGS = profile_devices("atlas-800-9000")
DP, DRA = Owner.DEVICE_PLUGIN, Owner.DRA


@pytest.mark.parametrize(
    ("text", "devices", "expected"),
    [
        ("4-7", A2, Split(frozenset({4, 5, 6, 7}))),
        ("4-7,1", A2, Split(frozenset({1, 4, 5, 6, 7}))),
        (" 0 , 2 ", A2, Split(frozenset({0, 2}))),
        ("ring-1", RINGS, Split(frozenset({4, 5, 6, 7}), frozenset({"ring-1"}))),
        ("ring-0,7", RINGS, Split(frozenset({0, 1, 2, 3, 7}), frozenset({"ring-0"}))),
        ("5-5", A2, Split(frozenset({5}))),
        ("all", A2, Split(frozenset(range(8)))),
        ("none", A2, Split(frozenset())),
        # What this node lacks is ignored, never an error: one DaemonSet serves a mixed fleet.
        ("8", A2, Split(frozenset(), ignored=("8",))),
        ("6-9", A2, Split(frozenset({6, 7}), ignored=("6-9",))),
        ("12-15,ring-1", A2, Split(frozenset(), frozenset({"ring-1"}), ("12-15", "ring-1"))),
        ("ring-0,ring-9", A2, Split(frozenset(range(8)), frozenset({"ring-0", "ring-9"}), ("ring-9",))),
    ],
)
def test_splits_name_ids_ranges_groups_and_ignore_what_the_node_lacks(
    text: str, devices: list, expected: Split
) -> None:
    assert parse_split(text, devices) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--dra-devices is empty"),
        (" , ", "--dra-devices is empty"),
        ("7-4", "range '7-4' runs backwards"),
        ("4-7,5", "'5' repeats device(s) [5]"),
        ("ring-0,ring-0", "repeats device(s)"),
        ("all,3", "repeats device(s) [3]"),
        ("none,3", "'none' cannot be combined"),
        ("-1", "neither an id, a range like 4-7, a topology group (groups here: ring-0), all nor none"),
        ("4-x", "neither an id"),
        ("4 7", "neither an id"),
        ("@ring", "neither an id"),
    ],
)
def test_splits_that_do_not_parse_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--dra-devices") as raised:
        parse_split(text, A2)
    assert message in str(raised.value)


def test_the_source_is_named_in_refusals() -> None:
    with pytest.raises(ConfigError, match=r"^the Node's annotation npu\.huawei\.com/dra-devices: range '7-4'"):
        parse_split("7-4", A2, "the Node's annotation npu.huawei.com/dra-devices")


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {}, None),
        ({}, {"npu.huawei.com/dra-devices": "4-7,9"}, ("4-7,9", "the Node's annotation npu.huawei.com/dra-devices")),
        (
            {"npu.huawei.com/dra-devices": "4-7_ring-1"},
            {},
            ("4-7,ring-1", "the Node's label npu.huawei.com/dra-devices"),
        ),
        (  # the annotation can say what a label cannot: it wins
            {"npu.huawei.com/dra-devices": "none"},
            {"npu.huawei.com/dra-devices": "0-3"},
            ("0-3", "the Node's annotation npu.huawei.com/dra-devices"),
        ),
        ({"other.io/dra-devices": "0"}, {"npu.huawei.com/dra-devicez": "0"}, None),
    ],
)
def test_the_node_split_comes_from_the_annotation_else_the_label(
    labels: dict[str, str], annotations: dict[str, str], expected: tuple[str, str] | None
) -> None:
    assert node_split("npu.huawei.com", labels, annotations) == expected


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
        ("both", "0,ring-2", [DP, DRA]),  # a group this node lacks at start still names a later device
    ],
)
def test_a_device_found_after_start_follows_the_partition(
    mode: str, dra_devices: str | None, expected: list[Owner]
) -> None:
    rule = Partition.of(Mode(mode), dra_devices, RINGS)
    assert [rule.owner_of(d) for d in (NEW_IN_RING_1, NEW_IN_RING_2)] == expected
