"""A shared chip in a ResourceSlice (pure): consumable capacity (KEP-5075).

Published once, with `allowMultipleAllocations: true`, the attribute `shareCount` (N, which the
DeviceClass `shared.<driver>` selects on) and two capacities with a `requestPolicy`:

- `memory`: the chip's memory, consumed in units of one share, memory / N rounded down to a MiB:
  default one unit, valid from one unit to N units, in steps of one unit (a request is rounded up
  to whole units);
- `aiCore`: the chip's AI cores, default 1, valid from 1 to all of them in steps of 1 (when the
  backend knows the count).

`memCapacity` is left out of a shared chip: a capacity without a policy would be consumed whole by
the first claim that does not ask for it.
"""

from __future__ import annotations

from npu_plugin.ascend.device import Device
from npu_plugin.kubeapi.protocol import CapacityRange, DeviceCapacity
from npu_plugin.kubeapi.quantity import format_bytes

MIB = 2**20
SHARE_COUNT_ATTRIBUTE = "shareCount"
MEMORY, AI_CORE = "memory", "aiCore"


def share_unit(memory: int, count: int) -> int:
    """The memory of one share: memory / count, rounded down to a MiB."""
    return memory // count // MIB * MIB


def shared_capacity(device: Device, count: int) -> dict[str, DeviceCapacity]:
    """The capacities of a shared chip, each with its request policy."""
    unit = share_unit(device.memory, count)
    capacity: dict[str, DeviceCapacity] = {
        MEMORY: {
            "value": format_bytes(device.memory),
            "requestPolicy": {
                "default": format_bytes(unit),
                "validRange": {
                    "min": format_bytes(unit),
                    "max": format_bytes(unit * count),
                    "step": format_bytes(unit),
                },
            },
        }
    }
    if device.ai_core:
        cores: CapacityRange = {"min": "1", "max": str(device.ai_core)}
        if device.ai_core >= 2:  # one step past the minimum must fit the capacity
            cores["step"] = "1"
        capacity[AI_CORE] = {"value": str(device.ai_core), "requestPolicy": {"default": "1", "validRange": cores}}
    return capacity


def shareable(device: Device, count: int) -> str | None:
    """Why the chip cannot be published with consumable capacity, or None."""
    if share_unit(device.memory, count) == 0:
        return f"{device.dra_name} reports {device.memory} bytes of memory, too little for {count} shares of a MiB"
    return None
