"""preferred_allocation over every profile and fragmentation state (table-driven, pure)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.topology import derive_topology_group, preferred_allocation
from tests.support.fake_devices import profile_devices

A2 = profile_devices("atlas-800t-a2")  # 8 x 910B, one full-mesh group, NUMA pairs
A9000 = profile_devices("atlas-800-9000")  # 8 x 910A, rings 0-3 and 4-7
DUO = profile_devices("atlas-300i-duo")  # 4 x 310P, two chips per card
C16 = [  # 910C: 16 dies, two per card, NUMA 0 for cards 0-3 and 1 for cards 4-7
    Device(
        physical_id=i,
        chip_name="910_9392",
        device_type="Ascend910C",
        logic_id=i,
        card_id=i // 2,
        chip_id=i % 2,
        numa_node=i // 8,
        topology_group="ring-0",
    )
    for i in range(16)
]
ALL = list(range(8))


def without(pool: list[int], *taken: int) -> list[int]:
    return [i for i in pool if i not in taken]


@dataclass(frozen=True)
class Case:
    name: str
    devices: list[Device]
    available: list[int]
    size: int
    expected: list[int]
    must_include: tuple[int, ...] = ()


CASES = [
    # 910B (Atlas 800T A2): NUMA pairs inside one group.
    Case("a2: one from an idle box", A2, ALL, 1, [0]),
    Case("a2: two share a NUMA node", A2, ALL, 2, [0, 1]),
    Case("a2: four fill two NUMA nodes", A2, ALL, 4, [0, 1, 2, 3]),
    Case("a2: the whole box", A2, ALL, 8, ALL),
    Case("a2: one goes to the broken NUMA pair", A2, without(ALL, 0), 1, [1]),
    Case("a2: two skip the broken NUMA pair", A2, without(ALL, 0), 2, [2, 3]),
    Case("a2: three keep an intact pair free", A2, [0, 1, 2, 3, 5], 3, [0, 1, 5]),
    Case("a2: must_include picks its NUMA partner", A2, ALL, 2, [4, 5], (5,)),
    Case("a2: must_include across NUMA nodes", A2, ALL, 2, [1, 6], (1, 6)),
    Case("a2: available == size", A2, [0, 3, 6], 3, [0, 3, 6]),
    # 910A (Atlas 800-9000): requests of up to four stay in the best-fitting ring.
    Case("910a: one from an idle box", A9000, ALL, 1, [0]),
    Case("910a: one goes to the nearly full ring", A9000, [0, 1, 2, 3, 7], 1, [7]),
    Case("910a: two go to the ring with three free", A9000, without(ALL, 4), 2, [5, 6]),
    Case("910a: two take a ring's last pair", A9000, [0, 1, 4, 5, 6], 2, [0, 1]),
    Case("910a: four need the intact ring", A9000, without(ALL, 4), 4, [0, 1, 2, 3]),
    Case("910a: four across rings when none is intact", A9000, [0, 1, 2, 4, 5, 6], 4, [0, 1, 2, 4]),
    Case("910a: must_include chooses the ring", A9000, ALL, 2, [4, 6], (6,)),
    Case("910a: eight is the whole box", A9000, ALL, 8, ALL),
    # 310P (Atlas 300I Duo): two chips per card.
    Case("duo: two share a card", DUO, [0, 1, 2, 3], 2, [0, 1]),
    Case("duo: one goes to the broken card", DUO, [1, 2, 3], 1, [1]),
    Case("duo: two take the intact card", DUO, [1, 2, 3], 2, [2, 3]),
    Case("duo: three take one whole card", DUO, [0, 1, 2, 3], 3, [0, 1, 2]),
    Case("duo: must_include keeps its card partner", DUO, [0, 1, 2, 3], 2, [2, 3], (3,)),
    # 910C: two dies per card are handed out together.
    Case("910c: two are one card", C16, list(range(16)), 2, [0, 1]),
    Case("910c: one goes to the lone die", C16, list(range(1, 16)), 1, [1]),
    Case("910c: two skip a NUMA node of lone dies", C16, [1, 3, *range(8, 16)], 2, [8, 9]),
    Case("910c: four are two whole cards", C16, list(range(16)), 4, [0, 1, 2, 3]),
    Case("910c: must_include brings its die partner", C16, list(range(16)), 2, [4, 5], (5,)),
    Case("910c: ten fill a NUMA node, then one card", C16, list(range(16)), 10, list(range(10))),
    Case("910c: available == size", C16, [2, 3, 9], 3, [2, 3, 9]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_preferred_allocation(case: Case) -> None:
    assert preferred_allocation(case.devices, case.available, case.must_include, case.size) == case.expected


@pytest.mark.parametrize(
    ("available", "must_include", "size", "message"),
    [
        ([0, 99], (), 1, "unknown device ids [99]"),
        ([0, 1], (5,), 1, "must_include ids [5] are not available"),
        ([0, 1], (), 3, "cannot choose 3 of 2"),
        ([0, 1, 2], (0, 1), 1, "cannot choose 1 of 3 available devices with 2 required"),
    ],
)
def test_impossible_requests_raise(
    available: list[int], must_include: tuple[int, ...], size: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        preferred_allocation(A2, available, must_include, size)


@given(
    devices=st.sampled_from([A2, A9000, DUO, C16]),
    data=st.data(),
)
def test_always_exact_size_from_available_with_must_include(devices: list[Device], data: st.DataObject) -> None:
    ids = [d.physical_id for d in devices]
    available = data.draw(st.lists(st.sampled_from(ids), min_size=1, unique=True))
    must = data.draw(st.lists(st.sampled_from(available), unique=True))
    size = data.draw(st.integers(min_value=max(1, len(must)), max_value=len(available)))
    chosen = preferred_allocation(devices, available, must, size)
    assert len(chosen) == len(set(chosen)) == size
    assert set(must) <= set(chosen) <= set(available)


@pytest.mark.parametrize(
    ("device_type", "physical_id", "card_id", "group"),
    [
        ("Ascend910", 5, 5, "ring-1"),
        ("Ascend910B", 7, 7, "ring-0"),
        ("Ascend910B", 8, 8, "ring-1"),
        ("Ascend910C", 15, 7, "ring-0"),
        ("Ascend310P", 3, 1, "card-1"),
        ("Ascend310", 2, 2, "card-2"),
    ],
)
def test_derived_topology_groups(device_type: str, physical_id: int, card_id: int, group: str) -> None:
    assert derive_topology_group(device_type, physical_id, card_id) == group
