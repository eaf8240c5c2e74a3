"""The inventory file format (fake backend, `inventory -o yaml|json`): parse with line-precise errors; render."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from npu_plugin.device import DEVICE_TYPES, Device, Health, device_type_for_chip
from npu_plugin.errors import InventoryFileError
from npu_plugin.quantity import format_bytes, parse_bytes
from npu_plugin.topology import derive_topology_group

# Far above any real node (a device entry is ~300 bytes), far below what would strain the daemon's memory.
MAX_INVENTORY_BYTES = 4 * 2**20
_PCI_BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_FIELDS = (
    "physicalId",
    "logicId",
    "cardId",
    "chipId",
    "chipName",
    "deviceType",
    "memory",
    "aiCore",
    "numaNode",
    "pciBusId",
    "topologyGroup",
    "driverVersion",
    "health",
)


class _Entry:
    """One `devices[i]` mapping, with the line of each value for error messages."""

    def __init__(self, source: str, index: int, node: yaml.MappingNode, loader: yaml.SafeLoader) -> None:
        self.source, self.index, self.line = source, index, node.start_mark.line + 1
        self.values: dict[str, tuple[Any, int]] = {}
        for key_node, value_node in node.value:
            key = self._construct(loader, key_node, "key")
            if key not in _FIELDS:
                self.fail(key_node.start_mark.line + 1, str(key), f"unknown field (allowed: {', '.join(_FIELDS)})")
            if key in self.values:
                self.fail(key_node.start_mark.line + 1, key, "given twice")
            self.values[key] = (self._construct(loader, value_node, key), value_node.start_mark.line + 1)

    def _construct(self, loader: yaml.SafeLoader, node: yaml.Node, field: str) -> Any:
        try:
            return loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError) as error:  # a bad tag, a date like 2024-13-45
            self.fail(node.start_mark.line + 1, field, f"cannot read the value: {_problem(error)}")

    def fail(self, line: int, field: str, problem: str) -> None:
        raise InventoryFileError(f"{self.source}:{line}: devices[{self.index}].{field}: {problem}")

    def get(self, field: str, convert: Callable[[Any], Any], default: Any = None, required: bool = False) -> Any:
        if field not in self.values:
            if required:
                self.fail(self.line, field, "required")
            return default
        value, line = self.values[field]
        try:
            return convert(value)
        except (ValueError, TypeError) as error:
            self.fail(line, field, str(error))
        return None  # unreachable: fail() raises


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {value!r}")
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or str(value).strip() == "":
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return str(value)


def _device_type(value: Any) -> str:
    if value not in DEVICE_TYPES:
        raise ValueError(f"expected one of {', '.join(DEVICE_TYPES)}, got {value!r}")
    return str(value)


def _pci_bus_id(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(
            f'expected a quoted string like "0000:c1:00.0" (YAML reads some unquoted bus ids as numbers), got {value!r}'
        )
    text = value.strip().lower()
    if not _PCI_BUS_ID.match(text):
        raise ValueError(f"expected a PCI address like 0000:c1:00.0, got {value!r}")
    return text


def _numa_node(value: Any) -> int | None:
    if value == -1:
        return None
    return _non_negative_int(value)


def _health(value: Any) -> Health:
    return Health.parse(str(value))


def _device(entry: _Entry) -> Device:
    physical_id = entry.get("physicalId", _non_negative_int, required=True)
    chip_name = entry.get("chipName", _text, required=True)
    derived_type = None
    try:
        derived_type = device_type_for_chip(chip_name)
    except ValueError as error:
        if "deviceType" not in entry.values:
            entry.fail(entry.values["chipName"][1], "chipName", f"{error}; give deviceType explicitly")
    device_type = entry.get("deviceType", _device_type, default=derived_type)
    card_id = entry.get("cardId", _non_negative_int, default=physical_id)
    return Device(
        physical_id=physical_id,
        chip_name=chip_name,
        device_type=device_type,
        logic_id=entry.get("logicId", _non_negative_int, default=physical_id),
        card_id=card_id,
        chip_id=entry.get("chipId", _non_negative_int, default=0),
        memory=entry.get("memory", parse_bytes, default=0),
        ai_core=entry.get("aiCore", _non_negative_int),
        numa_node=entry.get("numaNode", _numa_node),
        pci_bus_id=entry.get("pciBusId", _pci_bus_id),
        topology_group=entry.get(
            "topologyGroup", _text, default=derive_topology_group(device_type, physical_id, card_id)
        ),
        driver_version=entry.get("driverVersion", _text),
        health=entry.get("health", _health, default=Health.OK),
    )


def _problem(error: Exception) -> str:
    """What went wrong, on one line (PyYAML's messages span several, with their own position)."""
    return " ".join(str(getattr(error, "problem", None) or error).split())


def _compose(text: str) -> yaml.Node | None:
    loader = yaml.SafeLoader(text)  # this already reads the text: it refuses control characters
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def parse_inventory(text: str, source: str) -> list[Device]:
    """Devices of an inventory file; InventoryFileError names `source`, the line and the field."""
    try:
        root = _compose(text)
    except yaml.reader.ReaderError as error:  # raised before any mark exists
        line = text.count("\n", 0, error.position) + 1
        raise InventoryFileError(
            f"{source}:{line}: not valid YAML: character #x{error.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise InventoryFileError(f"{source}:{line}: not valid YAML: {_problem(error)}") from None
    if not isinstance(root, yaml.MappingNode):
        raise InventoryFileError(f"{source}:1: expected a mapping with a `devices` list")
    devices_node = next((v for k, v in root.value if k.value == "devices"), None)
    if not isinstance(devices_node, yaml.SequenceNode):
        raise InventoryFileError(f"{source}:{root.start_mark.line + 1}: expected a `devices` list")
    devices: list[Device] = []
    seen: dict[int, int] = {}
    for index, node in enumerate(devices_node.value):
        if not isinstance(node, yaml.MappingNode):
            raise InventoryFileError(f"{source}:{node.start_mark.line + 1}: devices[{index}]: expected a mapping")
        entry = _Entry(source, index, node, yaml.SafeLoader(""))
        device = _device(entry)
        if device.physical_id in seen:
            entry.fail(
                entry.values["physicalId"][1],
                "physicalId",
                f"{device.physical_id} already used by devices[{seen[device.physical_id]}]",
            )
        seen[device.physical_id] = index
        devices.append(device)
    if not devices:
        raise InventoryFileError(f"{source}:{devices_node.start_mark.line + 1}: the `devices` list is empty")
    return devices


def device_record(device: Device) -> dict[str, Any]:
    """A device as an inventory-file entry (absent optional fields are left out)."""
    record: dict[str, Any] = {
        "physicalId": device.physical_id,
        "logicId": device.logic_id,
        "cardId": device.card_id,
        "chipId": device.chip_id,
        "chipName": device.chip_name,
        "deviceType": device.device_type,
        "memory": format_bytes(device.memory),
        "aiCore": device.ai_core,
        "numaNode": device.numa_node,
        "pciBusId": device.pci_bus_id,
        "topologyGroup": device.topology_group,
        "driverVersion": device.driver_version,
        "health": device.health.value,
    }
    return {key: value for key, value in record.items() if value is not None and value != ""}


def inventory_document(devices: Sequence[Device]) -> dict[str, Any]:
    return {"devices": [device_record(d) for d in devices]}
