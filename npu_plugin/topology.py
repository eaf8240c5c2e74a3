"""HCCS topology groups and the preferred-allocation choice (pure functions)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import groupby

from npu_plugin.device import Device

# Devices per HCCS group by family (SPEC §3.5). 910A boxes: two rings of four; 910B: full-mesh groups
# of eight; 910C (A3): sixteen dies, two per card. The 310 family has no HCCS: a card is its group.
_GROUP_SIZE = {"Ascend910": 4, "Ascend910B": 8, "Ascend910C": 16}


def derive_topology_group(device_type: str, physical_id: int, card_id: int) -> str:
    """The HCCS group of a device when the backend does not tell it."""
    size = _GROUP_SIZE.get(device_type)
    if size is None:
        return f"card-{card_id}"
    return f"ring-{physical_id // size}"


# Locality levels, outermost first: one HCCS group, then one NUMA node, then one card (910C die pairs
# and 310P Duo chips live on one card and should be handed out together).
_LEVELS: tuple[Callable[[Device], Hashable], ...] = (
    lambda d: d.topology_group,
    lambda d: -1 if d.numa_node is None else d.numa_node,
    lambda d: d.card_id,
)


def preferred_allocation(
    devices: Iterable[Device], available: Sequence[int], must_include: Sequence[int], size: int
) -> list[int]:
    """Choose exactly `size` physical ids from `available`, containing every `must_include` id.

    At each locality level the smallest bin that can hold the whole request wins (best fit), so
    large intact groups stay free for large requests. When no bin fits, bins holding required
    devices come first, then the fullest, so the request spans as few bins as possible.
    Raises ValueError when the request cannot be satisfied.
    """
    by_id = {d.physical_id: d for d in devices}
    pool = set(available)
    required = set(must_include)
    if unknown := sorted((pool | required) - by_id.keys()):
        raise ValueError(f"unknown device ids {unknown}")
    if not required <= pool:
        raise ValueError(f"must_include ids {sorted(required - pool)} are not available")
    if not len(required) <= size <= len(pool):
        raise ValueError(
            f"cannot choose {size} of {len(pool)} available devices with {len(required)} required"
        )
    chosen = _pick([by_id[i] for i in sorted(pool)], required, size, _LEVELS)
    return sorted(chosen)


def _pick(
    pool: list[Device], required: set[int], size: int, levels: Sequence[Callable[[Device], Hashable]]
) -> list[int]:
    if size == 0:
        return []
    if not levels:
        ids = [d.physical_id for d in pool]
        rest = [i for i in ids if i not in required]
        return sorted(required & set(ids)) + rest[: size - len(required & set(ids))]
    key, deeper = levels[0], levels[1:]
    bins = _bins(pool, key)
    fitting = [b for b in bins if len(b) >= size and required <= {d.physical_id for d in b}]
    if fitting:
        best = min(fitting, key=lambda b: (len(b), b[0].physical_id))
        return _pick(best, required, size, deeper)
    return _spill(bins, required, size, deeper)


def _spill(
    bins: list[list[Device]], required: set[int], size: int,
    deeper: Sequence[Callable[[Device], Hashable]],
) -> list[int]:
    def order(b: list[Device]) -> tuple[int, int, int]:
        held = sum(d.physical_id in required for d in b)
        return (-held, -len(b), b[0].physical_id)

    chosen: list[int] = []
    for b in sorted(bins, key=order):
        in_bin = required & {d.physical_id for d in b}
        take = max(len(in_bin), min(len(b), size - len(chosen) - len(required - set(chosen) - in_bin)))
        take = min(take, len(b))
        chosen += _pick(b, in_bin, take, deeper) if take else []
        if len(chosen) == size:
            break
    return chosen


def _bins(pool: list[Device], key: Callable[[Device], Hashable]) -> list[list[Device]]:
    ordered = sorted(pool, key=lambda d: (str(key(d)), d.physical_id))
    return [list(group) for _, group in groupby(ordered, key=lambda d: str(key(d)))]
