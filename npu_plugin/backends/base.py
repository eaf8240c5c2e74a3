"""The Backend protocol every discovery source implements, and the optional ones some add."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from npu_plugin.device import Device, Health
from npu_plugin.fswatch import DirectoryWatch


class Backend(Protocol):
    """A source of devices and their health: DCMI, npu-smi or the fake inventory."""

    name: str
    # Whether the devices are this host's, so sysfs may complete them (NUMA node, PCIe root).
    host_sysfs: bool

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


@runtime_checkable
class ChangeSource(Protocol):
    """A backend that announces when its device list changes (the fake backend's inventory file)."""

    def watch_changes(self, watch: DirectoryWatch, on_change: Callable[[list[Device]], None]) -> None:
        """Register with `watch`; `on_change` runs on the event loop with the devices after each change."""
        ...
