"""The fake backend: a built-in profile or an inventory file that tests rewrite to inject faults,
and simulated vNPU hardware for the chips whose inventory entry has a `vnpu:` block."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from npu_plugin.ascend.device import Device, Health, LinkState
from npu_plugin.ascend.vnpu import ChipVnpu, Vnpu
from npu_plugin.backends.fake.profiles import FakeHost, profile_inventory
from npu_plugin.errors import BackendError, InventoryFileError
from npu_plugin.host.fswatch import DirectoryWatch

# The simulated vNPU hardware loads with the first vNPU call and the file format (with PyYAML) with
# the first file read: a daemon serving a profile with --vnpu off holds neither.
if TYPE_CHECKING:
    from npu_plugin.backends.fake.vnpu_hardware import FakeChip, FakeVnpuHardware

log = logging.getLogger(__name__)


class FakeBackend:
    """Devices from `--fake-inventory` (re-read whenever it changes) or from `--fake-profile`.

    A malformed rewrite while serving keeps the last good inventory: writers may rewrite the file in
    place, so a reader can see it empty or half-written. Health samples read the last good
    inventory; the file itself is parsed only at discovery and after it changes.

    The simulated vNPU hardware starts at the first vNPU call (never with --vnpu off): it keeps its
    state in `vnpu_state` (`--fake-vnpu-state`), or in memory when none is given (`inventory`), and
    its `vdavinci<id>` files under `dev_root`.
    """

    name = "fake"
    host_sysfs = False  # fake bus ids must not pick up a real device's sysfs facts

    def __init__(
        self,
        inventory_path: Path | None = None,
        profile: str | None = None,
        *,
        vnpu_state: Path | None = None,
        dev_root: Path = Path("/dev"),
    ) -> None:
        if inventory_path is None and profile is None:
            raise BackendError("the fake backend needs --fake-inventory PATH or --fake-profile NAME")
        self.inventory_path = inventory_path
        self._profile = profile
        self._last_good: FakeHost | None = None
        self._rejected: str | None = None
        self._read_stamp: tuple[int, int, int] | None = None  # the inventory file as last read
        self._vnpu_state, self._dev_root = vnpu_state, dev_root
        self._hardware: FakeVnpuHardware | None = None

    def discover(self) -> list[Device]:
        if self.inventory_path is None:
            assert self._profile is not None
            try:
                inventory = profile_inventory(self._profile)
            except ValueError as error:
                raise BackendError(str(error)) from None
        else:
            inventory = self._read()
            self._rejected = None
        self._last_good = inventory
        return inventory.devices

    def reload(self) -> list[Device]:
        """Re-read the file while serving; on a bad rewrite log it and return the last good
        devices."""
        try:
            return self.discover()
        except InventoryFileError as error:
            if self._last_good is None:
                raise
            if str(error) != self._rejected:  # once per bad rewrite, not once per event
                self._rejected = str(error)
                log.warning(
                    "inventory file rewrite rejected, keeping the last good inventory: %s",
                    error,
                    extra={"error": str(error)},
                )
            return self._last_good.devices

    def watch_changes(self, watch: DirectoryWatch, on_change: Callable[[list[Device]], None]) -> None:
        """The inventory file, and the vNPU state file once the hardware is in use: a change to
        either hands the devices on, so the servers look again."""
        if self.inventory_path is not None:
            watch.add_file(self.inventory_path, self.reload, on_change, up_to_date=self._inventory_unchanged)
        if self._hardware is not None and self._hardware.path is not None:
            watch.add_file(self._hardware.path, self._vnpu_state_changed, on_change)

    def sample(self) -> dict[int, Health]:
        devices = self._last_good.devices if self._last_good is not None else []
        return {d.physical_id: d.health for d in devices}

    def fault_codes(self, physical_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
        devices = {d.physical_id: d for d in (self._last_good.devices if self._last_good is not None else [])}
        return {i: devices[i].faults for i in physical_ids if i in devices and devices[i].faults}

    def link_states(self, physical_ids: Iterable[int]) -> dict[int, LinkState]:
        devices = {d.physical_id: d for d in (self._last_good.devices if self._last_good is not None else [])}
        return {i: devices[i].link for i in physical_ids if i in devices}

    # ---- VnpuBackend

    def chip_vnpu(self, physical_id: int) -> ChipVnpu | None:
        chip = self._chips().get(physical_id)
        if chip is None:
            return None
        return replace(chip.vnpu, vnpus=tuple(self._vnpus().vnpus(physical_id)))

    def list_vnpus(self, physical_id: int) -> list[Vnpu]:
        return self._vnpus().vnpus(physical_id)

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        return self._vnpus().create(physical_id, template, vnpu_id)

    def destroy_vnpu(self, physical_id: int, vnpu_id: int) -> None:
        self._vnpus().destroy(physical_id, vnpu_id)

    def _vnpus(self) -> FakeVnpuHardware:
        if self._hardware is None:
            from npu_plugin.backends.fake.vnpu_hardware import FakeVnpuHardware
            from npu_plugin.host.boot import read_boot_id

            self._hardware = FakeVnpuHardware(self._vnpu_state, self._dev_root, read_boot_id(), self._chips)
        return self._hardware

    def _chips(self) -> Mapping[int, FakeChip]:
        from npu_plugin.backends.fake.vnpu_hardware import FakeChip

        if self._last_good is None:
            self.discover()
        assert self._last_good is not None
        types = {d.physical_id: d.device_type for d in self._last_good.devices}
        return {p: FakeChip(chip, types[p]) for p, chip in self._last_good.vnpu.items()}

    def _vnpu_state_changed(self) -> list[Device]:
        """Re-read the vNPU state after it changed; a corrupt one raises, the watch logs it and
        nothing changes."""
        self._vnpus().check()
        assert self._last_good is not None
        return self._last_good.devices

    def hccs_peers(self) -> dict[int, frozenset[int]]:
        return {}  # the inventory file names topology groups itself

    def close(self) -> None:
        pass

    def _inventory_unchanged(self) -> bool:
        """Whether the inventory file is still the one last read (same inode, size and modification
        time)."""
        assert self.inventory_path is not None
        try:
            return _stamp(self.inventory_path.stat()) == self._read_stamp
        except OSError:
            return False

    def _read(self) -> FakeHost:
        from npu_plugin.backends.fake.inventory_file import MAX_INVENTORY_BYTES, parse_inventory_file

        assert self.inventory_path is not None
        try:
            with self.inventory_path.open("rb") as file:
                self._read_stamp = _stamp(os.fstat(file.fileno()))
                data = file.read(MAX_INVENTORY_BYTES + 1)
        except OSError as error:
            raise InventoryFileError(f"{self.inventory_path}: cannot read: {error.strerror}") from None
        if len(data) > MAX_INVENTORY_BYTES:
            raise InventoryFileError(
                f"{self.inventory_path}: larger than the {MAX_INVENTORY_BYTES // 2**20} MiB an inventory file may have"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InventoryFileError(f"{self.inventory_path}: not UTF-8 text") from None
        return parse_inventory_file(text, str(self.inventory_path))


def _stamp(status: os.stat_result) -> tuple[int, int, int]:
    return status.st_ino, status.st_size, status.st_mtime_ns
