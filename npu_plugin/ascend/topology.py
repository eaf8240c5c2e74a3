"""HCCS topology groups and the preferred-allocation choice (pure functions)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from itertools import groupby

from npu_plugin.ascend.device import Device

# Devices per HCCS group by family. 910A boxes: two rings of four; 910B: full-mesh groups
# of eight; 910C (A3): sixteen dies, two per card. The 310 family has no HCCS: a card is its group.
_GROUP_SIZE = {"Ascend910": 4, "Ascend910B": 8, "Ascend910C": 16}


def derive_topology_group(device_type: str, physical_id: int, card_id: int) -> str:
    """The HCCS group of a device when the backend does not tell it."""
    size = _GROUP_SIZE.get(device_type)
    if size is None:
        return f"card-{card_id}"
    return f"ring-{physical_id // size}"


def groups_from_peers(peers: Mapping[int, frozenset[int]]) -> dict[int, str]:
    """HCCS groups as connected components of the peer graph, named `ring-<n>` by lowest member."""
    seen: set[int] = set()
    groups: dict[int, str] = {}
    for start in sorted(peers):
        if start in seen:
            continue
        component, frontier = set(), [start]
        while frontier:
            node = frontier.pop()
            if node not in component:
                component.add(node)
                frontier.extend(peers.get(node, frozenset()) - component)
        seen |= component
        name = f"ring-{len(set(groups.values()))}"
        groups.update(dict.fromkeys(component, name))
    return groups


# Locality levels, outermost first: one HCCS group, then one NUMA node, then one card (910C die
# pairs and 310P Duo chips live on one card and should be handed out together).
_LEVELS: tuple[Callable[[Device], Hashable], ...] = (
    lambda d: d.topology_group,
    lambda d: -1 if d.numa_node is None else d.numa_node,
    lambda d: d.card_id,
)


def preferred_allocation(
    devices: Iterable[Device], available: Sequence[int], must_include: Sequence[int], size: int
) -> list[int]:
    """Choose exactly `size` physical ids from `available`, containing every `must_include` id.

    Pure. At each locality level the request stays inside one bin when one can hold it: of those,
    the one whose choice touches the fewest inner bins (whole 910C die pairs), then splits the
    fewest, then the smallest (best fit), so large intact groups stay free for large requests. When
    no bin fits, bins holding required devices come first, then whole bins largest first, and the
    remainder goes to the best-fitting bin, so the request spans as few bins as possible. Raises
    ValueError when the request cannot be satisfied.
    """
    by_id = {d.physical_id: d for d in devices}
    pool = set(available)
    required = set(must_include)
    if unknown := sorted((pool | required) - by_id.keys()):
        raise ValueError(f"unknown device ids {unknown}")
    if not required <= pool:
        raise ValueError(f"must_include ids {sorted(required - pool)} are not available")
    if not len(required) <= size <= len(pool):
        raise ValueError(f"cannot choose {size} of {len(pool)} available devices with {len(required)} required")
    chosen = _pick([by_id[i] for i in sorted(pool)], required, size, _LEVELS)
    return sorted(chosen)


Level = Callable[[Device], Hashable]


def _pick(pool: list[Device], required: set[int], size: int, levels: Sequence[Level]) -> list[int]:
    if size == 0:
        return []
    if not levels:
        rest = [d.physical_id for d in pool if d.physical_id not in required]
        return sorted(required) + rest[: size - len(required)]
    bins = _bins(pool, levels[0])
    fitting = [b for b in bins if len(b) >= size and required <= _ids(b)]
    if not fitting:
        return _spill(bins, required, size, levels[1:])
    choices = [(_pick(b, required, size, levels[1:]), b) for b in fitting]
    best, _ = min(choices, key=lambda c: (_cost(c[1], c[0], levels[1:]), len(c[1]), c[1][0].physical_id))
    return best


def _cost(pool: list[Device], chosen: list[int], levels: Sequence[Level]) -> tuple[tuple[int, int], ...]:
    """Per inner level: how many bins the choice touches, and how many of them it leaves split."""
    taken = set(chosen)
    cost = []
    for level in levels:
        touched = [b for b in _bins(pool, level) if _ids(b) & taken]
        cost.append((len(touched), sum(not _ids(b) <= taken for b in touched)))
    return tuple(cost)


def _spill(bins: list[list[Device]], required: set[int], size: int, deeper: Sequence[Level]) -> list[int]:
    holding = sorted((b for b in bins if _ids(b) & required), key=lambda b: (-len(_ids(b) & required), -len(b)))
    free = [b for b in bins if not _ids(b) & required]
    chosen: list[int] = []
    for b in holding:
        in_bin = required & _ids(b)
        still_required = len(required - set(chosen) - in_bin)
        take = max(len(in_bin), min(len(b), size - len(chosen) - still_required))
        chosen += _pick(b, in_bin, take, deeper)
    while len(chosen) < size:
        remaining = size - len(chosen)
        fits = [b for b in free if len(b) >= remaining]
        b = _best_fit(fits, remaining, deeper) if fits else max(free, key=len)
        free.remove(b)
        chosen += _pick(b, set(), min(len(b), remaining), deeper)
    return chosen


def _best_fit(fitting: list[list[Device]], size: int, deeper: Sequence[Level]) -> list[Device]:
    return min(fitting, key=lambda b: (_cost(b, _pick(b, set(), size, deeper), deeper), len(b), b[0].physical_id))


def _ids(devices: list[Device]) -> set[int]:
    return {d.physical_id for d in devices}


def _bins(pool: list[Device], key: Level) -> list[list[Device]]:
    ordered = sorted(pool, key=lambda d: (str(key(d)), d.physical_id))
    return [list(group) for _, group in groupby(ordered, key=lambda d: str(key(d)))]
