"""The Backend protocol every discovery source implements."""

from __future__ import annotations

from typing import Protocol

from npu_plugin.device import Device, Health


class Backend(Protocol):
    """A source of devices and their health: DCMI, npu-smi or the fake inventory."""

    name: str

    def discover(self) -> list[Device]:
        """Every NPU on the node; raises BackendError when nothing usable is found."""
        ...

    def sample(self) -> dict[int, Health]:
        """Health per physical id; a device whose query fails reads Unknown. Never raises."""
        ...

    def hccs_peers(self) -> dict[int, frozenset[int]]:
        """Devices each device reaches over HCCS, by physical id; {} when the source cannot tell."""
        ...

    def close(self) -> None: ...
