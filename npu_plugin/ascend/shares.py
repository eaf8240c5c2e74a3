"""Shared NPUs (pure): a chip several pods use at once, with no partitioning.

The device plugin advertises a shared chip N times under its resource name, as share ids that name
the chip (`Ascend310P-3-share-7`, shares 0 to N-1); every share gives the container the whole chip.
Which shares GetPreferredAllocation picks is `ShareAllocation`: spread (the default) takes each share
from the chip with the most free shares, so pods land on different chips; pack takes them from the
chip with the fewest free shares left, so whole chips stay free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

SHARE_COUNT_MIN, SHARE_COUNT_MAX = 2, 100
DEFAULT_SHARE_COUNT = 4
_SHARE_ID = re.compile("(Ascend910|Ascend310P|Ascend310)-(0|[1-9][0-9]{0,5})-share-(0|[1-9][0-9]?)")


class ShareAllocation(StrEnum):
    """How GetPreferredAllocation chooses among free shares."""

    SPREAD = "spread"
    PACK = "pack"


def share_id(prefix: str, physical_id: int, index: int) -> str:
    """The device plugin id of share `index` of a chip: `Ascend310P-3-share-7`."""
    return f"{prefix}-{physical_id}-share-{index}"


@dataclass(frozen=True, slots=True)
class ShareRef:
    """A share id taken apart."""

    prefix: str
    physical_id: int
    index: int


def parse_share_id(device_id: str) -> ShareRef | None:
    """`Ascend310P-3-share-7` → (Ascend310P, 3, 7); None when the id is not a share id of our form."""
    match = _SHARE_ID.fullmatch(device_id)
    return ShareRef(match.group(1), int(match.group(2)), int(match.group(3))) if match else None


# A unit the device plugin can hand out: a share (chip, index) or a whole chip (chip, None).
Unit = tuple[int, int | None]


def preferred_units(available: Sequence[Unit], required: Sequence[Unit], size: int, how: ShareAllocation) -> list[Unit]:
    """Choose exactly `size` units from `available`, every `required` one among them (pure).

    Required units first; then, one at a time, a free share of the chip with the most (spread) or the
    fewest (pack) free shares left, lowest physical id and index first on a tie; whole chips (listed
    beside shared ones under the same resource) only once no share is left. ValueError when the
    request cannot be met.
    """
    pool, must = list(dict.fromkeys(available)), list(dict.fromkeys(required))
    if missing := [u for u in must if u not in pool]:
        raise ValueError(f"must_include ids {missing} are not available")
    if not len(must) <= size <= len(pool):
        raise ValueError(f"cannot choose {size} of {len(pool)} available devices with {len(must)} required")
    chosen = list(must)
    free: dict[int, list[Unit]] = {}
    for unit in sorted((u for u in pool if u not in must), key=lambda u: (u[0], -1 if u[1] is None else u[1])):
        free.setdefault(unit[0], []).append(unit)
    sign = -1 if how is ShareAllocation.SPREAD else 1
    while len(chosen) < size:
        chip = min(free, key=lambda c: (free[c][0][1] is None, sign * len(free[c]), c))
        chosen.append(free[chip].pop(0))
        if not free[chip]:
            del free[chip]
    return chosen
