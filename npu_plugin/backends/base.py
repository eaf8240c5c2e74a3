"""The Backend protocol every discovery source implements, and the optional ones some add."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from npu_plugin.ascend.device import Device, Health, LinkState
from npu_plugin.ascend.vnpu import ChipVnpu, Vnpu
from npu_plugin.host.fswatch import DirectoryWatch


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
        """Register with `watch`; `on_change` runs on the event loop with the devices after each
        change."""
        ...


@runtime_checkable
class FaultSource(Protocol):
    """A backend that reads the fault codes behind a health level (DCMI
    `dcmi_get_device_errorcode_v2`, `npu-smi info -t health`, the fake inventory's `faultCodes`)."""

    def fault_codes(self, physical_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """The fault codes of these devices, ascending; a device without any (or whose query fails)
        is left out. Never raises."""
        ...


@runtime_checkable
class LinkSource(Protocol):
    """A backend that reads the RoCE link of dies that have one (DCMI
    `dcmi_get_device_network_health`, `hccn_tool -net_health -g`, the fake inventory's
    `linkStatus`)."""

    def link_states(self, physical_ids: Iterable[int]) -> dict[int, LinkState]:
        """The link of these devices; a device whose query fails is left out. Never raises."""
        ...


@runtime_checkable
class VnpuBackend(Protocol):
    """A backend that knows the vNPUs of its chips and can create and destroy them.

    Templates, totals and existing vNPUs come from the hardware at run time, never from a table in
    the code. Failures raise VnpuError with the driver's code; destroying a vNPU that does not exist
    raises VnpuNotFoundError.
    """

    def chip_vnpu(self, physical_id: int) -> ChipVnpu | None:
        """Templates, totals, id range and existing vNPUs of a chip; None when the chip cannot be
        split."""
        ...

    def list_vnpus(self, physical_id: int) -> list[Vnpu]:
        """The vNPUs that exist on the chip now."""
        ...

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        """Create a vNPU of `template` with id `vnpu_id`; returns the id the driver gave it."""
        ...

    def destroy_vnpu(self, physical_id: int, vnpu_id: int) -> None:
        """Destroy one vNPU; never called with the driver's destroy-all id."""
        ...
