"""Choose the discovery backend (`--backend auto`: DCMI if it discovers, else npu-smi, else a clear
error)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.topology import derive_topology_group, groups_from_peers
from npu_plugin.backends.base import Backend
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.errors import BackendError

log = logging.getLogger(__name__)


def open_backend(options: BackendOptions) -> Backend:
    """The backend `options` name; `auto` with a fake inventory or profile given means the fake
    backend."""
    if options.uses_fake:
        return _fake(options)
    if options.kind is BackendKind.DCMI:
        return _dcmi(options.dcmi_library, options.npu_smi)
    if options.kind is BackendKind.NPU_SMI:
        return _npu_smi(options.npu_smi, options.dev_root)
    try:
        return _working(_dcmi(options.dcmi_library, options.npu_smi))
    except BackendError as error:
        dcmi_failure = str(error)
    log.warning("giving up DCMI, using npu-smi: %s", dcmi_failure, extra={"error": dcmi_failure})
    try:
        return _working(_npu_smi(options.npu_smi, options.dev_root))
    except BackendError as error:
        raise BackendError(f"no NPU discovery backend works; dcmi: {dcmi_failure}; npu-smi: {error}") from None


def _working(backend: Backend) -> Backend:
    """`backend` once a discovery through it succeeded; closed and the error raised otherwise.

    DCMI fails late as often as early: the library loads, then dcmi_init or enumeration answers an
    error (-8005 in a container without /dev/davinci_manager, -8255 on chips the API does not
    serve).
    """
    try:
        backend.discover()
    except BackendError:
        backend.close()
        raise
    return backend


def _fake(options: BackendOptions) -> Backend:
    from npu_plugin.backends.fake.backend import FakeBackend

    return FakeBackend(
        options.fake_inventory, options.fake_profile, vnpu_state=options.fake_vnpu_state, dev_root=options.dev_root
    )


def _dcmi(library: str | None, npu_smi: str) -> Backend:
    from npu_plugin.backends.dcmi.backend import DcmiBackend

    return DcmiBackend(library, npu_smi=npu_smi)


def _npu_smi(executable: str, dev_root: Path) -> Backend:
    from npu_plugin.backends.npusmi.backend import NpuSmiBackend

    return NpuSmiBackend(executable, dev_root=dev_root)


def discover(backend: Backend, sys_root: Path = Path("/sys")) -> list[Device]:
    """Devices from the backend, completed: NUMA node from sysfs, topology group derived."""
    devices = backend.discover()
    if not devices:
        raise BackendError(f"the {backend.name} backend found no NPUs")
    groups = groups_from_peers(backend.hccs_peers())
    sysfs = sys_root if backend.host_sysfs else None
    return sorted((_complete(d, sysfs, groups) for d in devices), key=lambda d: d.physical_id)


def _complete(device: Device, sys_root: Path | None, groups: dict[int, str]) -> Device:
    """Fill what the backend left out: NUMA node from sysfs; HCCS group from the measured peer graph
    when the backend reported one, else from the family's known layout."""
    numa = device.numa_node if device.numa_node is not None else numa_from_sysfs(device.pci_bus_id, sys_root)
    group = (
        device.topology_group
        or groups.get(device.physical_id)
        or derive_topology_group(device.device_type, device.physical_id, device.card_id)
    )
    root = device.pcie_root or pcie_root_from_sysfs(device.pci_bus_id, sys_root)
    return replace(device, numa_node=numa, topology_group=group, pcie_root=root)


def numa_from_sysfs(pci_bus_id: str | None, sys_root: Path | None) -> int | None:
    """`/sys/bus/pci/devices/<bus id>/numa_node`; -1 (unknown) and unreadable read as None."""
    if pci_bus_id is None or sys_root is None:
        return None
    try:
        value = int((sys_root / "bus/pci/devices" / pci_bus_id / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def pcie_root_from_sysfs(pci_bus_id: str | None, sys_root: Path | None) -> str | None:
    """The PCIe root complex (`pci0000:00`) a device hangs off, from where its sysfs entry links
    to."""
    if pci_bus_id is None or sys_root is None:
        return None
    try:
        target = (sys_root / "bus/pci/devices" / pci_bus_id).resolve(strict=True)
    except OSError:
        return None
    return next((part for part in target.parts if part.startswith("pci")), None)
