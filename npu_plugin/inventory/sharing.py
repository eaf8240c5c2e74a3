"""Which chips are shared (`--share-devices`, `--share-count`), and the checks on it (pure).

Sharing is a property of the chip, applied by the side that owns it: share ids in the device
plugin's list, consumable capacity in DRA's slices, never both. A shared chip is never split into
vNPUs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from npu_plugin.ascend.device import Device, dra_name
from npu_plugin.ascend.shares import DEFAULT_SHARE_COUNT
from npu_plugin.errors import ConfigError
from npu_plugin.inventory.ownership import parse_device_list

ALL = "all"


@dataclass(frozen=True, slots=True)
class Sharing:
    """The shared chips and how many shares each has; `every` (from `all`) also shares chips found
    after start."""

    physical_ids: frozenset[int] = frozenset()
    count: int = DEFAULT_SHARE_COUNT
    every: bool = False

    @classmethod
    def of(cls, text: str | None, count: int | None, devices: Sequence[Device]) -> Sharing:
        """`--share-devices` (ids, ranges, topology groups, `all`, or empty) against the devices
        found at start; ConfigError naming the flag otherwise."""
        count = DEFAULT_SHARE_COUNT if count is None else count
        if text is None or not text.strip():
            return cls(frozenset(), count)
        if text.strip().lower() == ALL:
            return cls(frozenset(d.physical_id for d in devices), count, every=True)
        return cls(parse_device_list(text, devices, flag="--share-devices"), count)

    @property
    def enabled(self) -> bool:
        return bool(self.physical_ids) or self.every

    def shared(self, physical_id: int) -> bool:
        return self.every or physical_id in self.physical_ids

    def shares(self, physical_id: int) -> int:
        """How many shares the chip has: 0 when it is not shared."""
        return self.count if self.shared(physical_id) else 0


def check_not_split(sharing: Sharing, split: Mapping[int, Collection[object]]) -> None:
    """ConfigError when a shared chip holds vNPUs (`split`: vNPUs by chip): sharing gives a pod the
    whole chip, which a split chip no longer is."""
    if held := sorted(i for i, vnpus in split.items() if vnpus and sharing.shared(i)):
        names = ", ".join(f"{dra_name(i)} ({len(split[i])} vNPU(s))" for i in held)
        raise ConfigError(
            f"--share-devices: {names} hold(s) vNPUs; a shared chip is never split: destroy its vNPUs or leave it "
            "out of --share-devices"
        )
