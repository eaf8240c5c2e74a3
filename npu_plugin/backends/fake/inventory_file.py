"""The inventory file format (fake backend, `inventory -o yaml|json`): parse with line-precise
errors; render."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, NoReturn

import yaml

from npu_plugin.ascend.device import (
    DEVICE_TYPES,
    Device,
    Health,
    LinkState,
    device_type_for_chip,
    parse_device_ip,
    parse_fault_code,
)
from npu_plugin.ascend.topology import derive_topology_group
from npu_plugin.ascend.vnpu import (
    AICORE,
    DESTROY_ALL_ID,
    TEMPLATE_RESOURCES,
    ChipMode,
    ChipVnpu,
    Vnpu,
    VnpuTemplate,
    default_id_range,
    static_only_reason,
)
from npu_plugin.backends.fake.profiles import FakeHost
from npu_plugin.errors import InventoryFileError
from npu_plugin.kubeapi.quantity import format_bytes, parse_bytes

# Far above any real node (a device entry is ~300 bytes), far below what would strain the daemon's
# memory.
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
    "faultCodes",
    "deviceIP",
    "superPodId",
    "serverIndex",
    "rackId",
    "linkStatus",
    "vnpu",
)
_VNPU_FIELDS = ("mode", "dynamic", "idRange", "resources", "templates", "existing")
_TEMPLATE_FIELDS = ("name", "aicore", "memory", *TEMPLATE_RESOURCES)
_RESOURCE_FIELDS = (AICORE, *TEMPLATE_RESOURCES)


class _Entry:
    """One mapping of the file (`devices[i]`, `devices[i].vnpu`, ...) with the line of each value
    for errors.

    Fields named in `blocks` are nested mappings or lists, read through `block` so that their own
    errors name their own lines.
    """

    def __init__(
        self,
        source: str,
        path: str,
        node: yaml.MappingNode,
        allowed: Sequence[str],
        blocks: frozenset[str] = frozenset(),
    ) -> None:
        self.source, self.path, self.line = source, path, node.start_mark.line + 1
        self.values: dict[str, tuple[Any, int]] = {}
        self.nodes: dict[str, yaml.Node] = {}
        loader = yaml.SafeLoader("")
        for key_node, value_node in node.value:
            key = self._construct(loader, key_node, "key")
            if key not in allowed:
                self.fail(key_node.start_mark.line + 1, str(key), f"unknown field (allowed: {', '.join(allowed)})")
            if key in self.values:
                self.fail(key_node.start_mark.line + 1, key, "given twice")
            self.nodes[key] = value_node
            value = None if key in blocks else self._construct(loader, value_node, key)
            self.values[key] = (value, value_node.start_mark.line + 1)

    def _construct(self, loader: yaml.SafeLoader, node: yaml.Node, field: str) -> Any:
        try:
            return loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError) as error:  # a bad tag, a date like 2024-13-45
            self.fail(node.start_mark.line + 1, field, f"cannot read the value: {_problem(error)}")

    def fail(self, line: int, field: str, problem: str) -> NoReturn:
        raise InventoryFileError(f"{self.source}:{line}: {self.path}.{field}: {problem}")

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

    def mapping(self, field: str) -> yaml.MappingNode | None:
        """The node of a nested mapping field, None when absent."""
        node = self.nodes.get(field)
        if node is not None and not isinstance(node, yaml.MappingNode):
            self.fail(node.start_mark.line + 1, field, "expected a mapping")
        return node

    def mappings(self, field: str) -> list[tuple[str, yaml.MappingNode]]:
        """The entries of a list-of-mappings field, each with its path for errors; [] when
        absent."""
        node = self.nodes.get(field)
        if node is None:
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node.start_mark.line + 1, field, "expected a list")
        items = []
        for index, item in enumerate(node.value):
            if not isinstance(item, yaml.MappingNode):
                self.fail(item.start_mark.line + 1, f"{field}[{index}]", "expected a mapping")
            items.append((f"{self.path}.{field}[{index}]", item))
        return items


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


def _link(value: Any) -> LinkState:
    word = str(value).strip().upper() if isinstance(value, str) else None
    if word not in (LinkState.UP, LinkState.DOWN):
        raise ValueError(f"expected UP or DOWN, got {value!r}")
    return LinkState(word)


def _fault_codes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of fault codes, got {value!r}")
    return tuple(sorted({parse_fault_code(code) for code in value}))


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
        faults=entry.get("faultCodes", _fault_codes, default=()),
        device_ip=entry.get("deviceIP", parse_device_ip),
        super_pod_id=entry.get("superPodId", _non_negative_int),
        server_index=entry.get("serverIndex", _non_negative_int),
        rack_id=entry.get("rackId", _non_negative_int),
        link=entry.get("linkStatus", _link, default=LinkState.UP),
    )


def _amount(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number >= 0, got {value!r}")
    amount = Decimal(str(value))
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"expected a number >= 0, got {value!r}")
    return amount


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _chip_mode(value: Any) -> ChipMode:
    try:
        return ChipMode(value)
    except ValueError:
        raise ValueError(f"expected one of {', '.join(ChipMode)}, got {value!r}") from None


def _id_range(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"expected [first, last], got {value!r}")
    first, last = (_non_negative_int(v) for v in value)
    if first > last or last >= DESTROY_ALL_ID:
        raise ValueError(f"expected first <= last < {DESTROY_ALL_ID}, got {value!r}")
    return first, last


def _uses(entry: _Entry, names: Sequence[str]) -> dict[str, Decimal]:
    """The resources among `names` the mapping gives (a total or a use), zeros kept."""
    return {name: entry.get(name, _amount) for name in names if name in entry.values}


def _template(source: str, path: str, node: yaml.MappingNode) -> VnpuTemplate:
    entry = _Entry(source, path, node, _TEMPLATE_FIELDS)
    uses = _uses(entry, TEMPLATE_RESOURCES)
    return VnpuTemplate(
        name=entry.get("name", _text, required=True),
        aicore=entry.get("aicore", _non_negative_int, required=True),
        memory=entry.get("memory", parse_bytes, required=True),
        uses={name: amount for name, amount in uses.items() if amount > 0},
    )


def _chip_vnpu(entry: _Entry, device: Device, chips_on_card: int) -> ChipVnpu | None:
    """The device's `vnpu:` block: what the simulated driver says about the chip's vNPUs (None when
    absent)."""
    node = entry.mapping("vnpu")
    if node is None:
        return None
    block = _Entry(
        entry.source, f"{entry.path}.vnpu", node, _VNPU_FIELDS, frozenset({"resources", "templates", "existing"})
    )
    resources_node = block.mapping("resources")
    if resources_node is None:
        block.fail(block.line, "resources", "required (aicore, and each other resource the chip reports)")
    resources = _Entry(entry.source, f"{block.path}.resources", resources_node, _RESOURCE_FIELDS)
    resources.get(AICORE, _amount, required=True)
    templates: dict[str, VnpuTemplate] = {}
    for path, item in block.mappings("templates"):
        template = _template(entry.source, path, item)
        if template.name in templates:
            block.fail(item.start_mark.line + 1, f"templates[{len(templates)}].name", f"{template.name!r} given twice")
        templates[template.name] = template
    id_range = block.get("idRange", _id_range, default=default_id_range(device.physical_id, device.device_type))
    vnpus: dict[int, Vnpu] = {}
    for path, item in block.mappings("existing"):
        existing = _Entry(entry.source, path, item, ("vnpuId", "template"))
        vnpu_id = existing.get("vnpuId", _non_negative_int, required=True)
        template_name = existing.get("template", _text, required=True)
        line = existing.values["vnpuId"][1]
        if not id_range[0] <= vnpu_id <= id_range[1]:
            existing.fail(line, "vnpuId", f"{vnpu_id} is outside the chip's idRange {list(id_range)}")
        if vnpu_id in vnpus:
            existing.fail(line, "vnpuId", f"{vnpu_id} given twice")
        if template_name not in templates:
            existing.fail(existing.values["template"][1], "template", f"{template_name!r} is not among the templates")
        vnpus[vnpu_id] = Vnpu(device.physical_id, vnpu_id, template_name)
    return ChipVnpu(
        physical_id=device.physical_id,
        mode=block.get("mode", _chip_mode, default=ChipMode.CONTAINER),
        totals=_uses(resources, _RESOURCE_FIELDS),
        templates=tuple(templates.values()),
        id_range=id_range,
        dynamic_supported=block.get(
            "dynamic", _boolean, default=static_only_reason(device.device_type, chips_on_card) is None
        ),
        vnpus=tuple(vnpus.values()),
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


def parse_inventory_file(text: str, source: str) -> FakeHost:
    """Devices and vNPU blocks of an inventory file; InventoryFileError names `source`, the line and
    the field."""
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
    entries: list[tuple[_Entry, Device]] = []
    seen: dict[int, int] = {}
    for index, node in enumerate(devices_node.value):
        if not isinstance(node, yaml.MappingNode):
            raise InventoryFileError(f"{source}:{node.start_mark.line + 1}: devices[{index}]: expected a mapping")
        entry = _Entry(source, f"devices[{index}]", node, _FIELDS, frozenset({"vnpu"}))
        device = _device(entry)
        if device.physical_id in seen:
            entry.fail(
                entry.values["physicalId"][1],
                "physicalId",
                f"{device.physical_id} already used by devices[{seen[device.physical_id]}]",
            )
        seen[device.physical_id] = index
        entries.append((entry, device))
    if not entries:
        raise InventoryFileError(f"{source}:{devices_node.start_mark.line + 1}: the `devices` list is empty")
    devices = [device for _, device in entries]
    vnpu = {}
    for entry, device in entries:
        chips_on_card = sum(1 for d in devices if d.card_id == device.card_id)
        if (chip := _chip_vnpu(entry, device, chips_on_card)) is not None:
            vnpu[device.physical_id] = chip
    return FakeHost(devices, vnpu)


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
        "faultCodes": list(device.faults) or None,
        "deviceIP": device.device_ip,
        "superPodId": device.super_pod_id,
        "serverIndex": device.server_index,
        "rackId": device.rack_id,
        "linkStatus": device.link.value if device.link is not LinkState.UP else None,
    }
    return {key: value for key, value in record.items() if value is not None and value != ""}


def _number(amount: Decimal) -> int | float:
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def vnpu_record(chip: ChipVnpu) -> dict[str, Any]:
    """A chip's vNPU facts as an inventory file's `vnpu:` block (existing = the vNPUs there are
    now)."""
    return {
        "mode": chip.mode.value,
        "dynamic": chip.dynamic_supported,
        "idRange": list(chip.id_range),
        "resources": {name: _number(amount) for name, amount in chip.totals.items()},
        "templates": [
            {"name": t.name, "aicore": t.aicore, "memory": format_bytes(t.memory)}
            | {name: _number(amount) for name, amount in t.uses.items()}
            for t in chip.templates
        ],
        "existing": [{"vnpuId": v.vnpu_id, "template": v.template} for v in chip.vnpus],
    }


def inventory_document(devices: Sequence[Device], vnpu: Mapping[int, ChipVnpu] | None = None) -> dict[str, Any]:
    """The inventory file of `devices`; `vnpu` adds their chips' `vnpu:` blocks (never with --vnpu
    off)."""
    records = []
    for device in devices:
        record = device_record(device)
        if vnpu is not None and (chip := vnpu.get(device.physical_id)) is not None:
            record["vnpu"] = vnpu_record(chip)
        records.append(record)
    return {"devices": records}
