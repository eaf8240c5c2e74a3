"""The fake backend: a built-in profile or an inventory file that tests rewrite to inject faults."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from npu_plugin.device import Device, Health
from npu_plugin.errors import BackendError, InventoryFileError
from npu_plugin.fswatch import DirectoryWatch
from npu_plugin.inventory_file import MAX_INVENTORY_BYTES, parse_inventory
from npu_plugin.profiles import profile_devices

log = logging.getLogger(__name__)


class FakeBackend:
    """Devices from `--fake-inventory` (re-read whenever it changes) or from `--fake-profile`.

    A malformed rewrite while serving keeps the last good inventory: writers may rewrite the file in
    place, so a reader can see it empty or half-written. Health samples read the last good inventory;
    the file itself is parsed only at discovery and after it changes.
    """

    name = "fake"
    host_sysfs = False  # fake bus ids must not pick up a real device's sysfs facts

    def __init__(self, inventory_path: Path | None = None, profile: str | None = None) -> None:
        if inventory_path is None and profile is None:
            raise BackendError("the fake backend needs --fake-inventory PATH or --fake-profile NAME")
        self.inventory_path = inventory_path
        self._profile = profile
        self._last_good: list[Device] | None = None
        self._rejected: str | None = None

    def discover(self) -> list[Device]:
        if self.inventory_path is None:
            assert self._profile is not None
            try:
                devices = profile_devices(self._profile)
            except ValueError as error:
                raise BackendError(str(error)) from None
        else:
            devices = self._read()
            self._rejected = None
        self._last_good = devices
        return devices

    def reload(self) -> list[Device]:
        """Re-read the file while serving; on a bad rewrite log it and return the last good devices."""
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
            return self._last_good

    def watch_changes(self, watch: DirectoryWatch, on_change: Callable[[list[Device]], None]) -> None:
        if self.inventory_path is not None:
            watch.add_file(self.inventory_path, self.reload, on_change)

    def sample(self) -> dict[int, Health]:
        return {d.physical_id: d.health for d in self._last_good or ()}

    def hccs_peers(self) -> dict[int, frozenset[int]]:
        return {}  # the inventory file names topology groups itself

    def close(self) -> None:
        pass

    def _read(self) -> list[Device]:
        assert self.inventory_path is not None
        try:
            with self.inventory_path.open("rb") as file:
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
        return parse_inventory(text, str(self.inventory_path))
