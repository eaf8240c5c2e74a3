"""The inventory file: line-precise errors for every malformed input, round trips, quantities."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from npu_plugin.device import Device, Health
from npu_plugin.errors import InventoryFileError
from npu_plugin.inventory_file import inventory_document, parse_inventory
from npu_plugin.profiles import PROFILES, profile_devices
from npu_plugin.quantity import format_bytes, parse_bytes

SOURCE = "inv.yaml"
GOOD = "  - physicalId: 0\n    chipName: 910B3\n"


def entry(**fields: object) -> str:
    """One device entry starting on line 2, one field per line in the given order."""
    values = {"physicalId": 0, "chipName": "910B3", **fields}
    lines = [f"{key}: {value}" for key, value in values.items() if value is not None]
    return "devices:\n  - " + "\n    ".join(lines) + "\n"


MALFORMED = [
    ("", 1, None, "expected a mapping"),
    ("devices: [\n", 2, None, "not valid YAML"),
    ("- 1\n", 1, None, "expected a mapping"),
    ("hosts: []\n", 1, None, "expected a `devices` list"),
    ("devices: 3\n", 1, None, "expected a `devices` list"),
    ("devices: []\n", 1, None, "the `devices` list is empty"),
    ("devices:\n  - 3\n", 2, None, "devices[0]: expected a mapping"),
    ("devices:\n  - chipName: 910B3\n", 2, "physicalId", "required"),
    ("devices:\n  - physicalId: 0\n", 2, "chipName", "required"),
    (entry(physicalId=-1), 2, "physicalId", "integer >= 0"),
    (entry(physicalId="true"), 2, "physicalId", "integer >= 0"),
    (entry(physicalId="'3'"), 2, "physicalId", "integer >= 0"),
    (entry(logicId=1.5), 4, "logicId", "integer >= 0"),
    (entry(cardId=-2), 4, "cardId", "integer >= 0"),
    (entry(chipId="x"), 4, "chipId", "integer >= 0"),
    (entry(chipName="'GPU'"), 3, "chipName", "unknown Ascend chip name"),
    (entry(chipName="''"), 3, "chipName", "non-empty string"),
    (entry(deviceType="Ascend999"), 4, "deviceType", "expected one of"),
    (entry(memory="64GB"), 4, "memory", "quantity like 64Gi"),
    (entry(memory=-1), 4, "memory", "cannot be negative"),
    (entry(aiCore="many"), 4, "aiCore", "integer >= 0"),
    (entry(numaNode=-2), 4, "numaNode", "integer >= 0"),
    (entry(pciBusId='"c1:00.0"'), 4, "pciBusId", "PCI address"),
    (entry(pciBusId=12), 4, "pciBusId", "quoted string"),
    (entry(topologyGroup="''"), 4, "topologyGroup", "non-empty string"),
    (entry(driverVersion="[1, 2]"), 4, "driverVersion", "non-empty string"),
    (entry(health="Sick"), 4, "health", "unknown health 'Sick'"),
    (entry(colour="red"), 4, "colour", "unknown field"),
    ("devices:\n  - physicalId: 0\n    chipName: 910B3\n    physicalId: 1\n", 4, "physicalId", "given twice"),
    ("devices:\n" + GOOD + "  - physicalId: 0\n    chipName: 910B3\n", 4, "physicalId", "0 already used by devices[0]"),
    # What PyYAML raises outside its own error marks: control characters, tags, values its resolvers misread.
    ("devices:\n  - physicalId: 0\n\x00", 3, None, "not valid YAML: character #x0000 is not allowed"),
    (entry(memory="2024-13-45"), 4, "memory", "cannot read the value: month must be in 1..12"),
    (entry(aiCore="!!python/object:os.system 0"), 4, "aiCore", "cannot read the value: could not determine"),
]


@pytest.mark.parametrize(("text", "line", "field", "problem"), MALFORMED, ids=[m[3] for m in MALFORMED])
def test_malformed_files_name_file_line_and_field(text: str, line: int, field: str | None, problem: str) -> None:
    with pytest.raises(InventoryFileError) as raised:
        parse_inventory(text, SOURCE)
    message = str(raised.value)
    assert message.startswith(f"{SOURCE}:{line}: "), message
    if field is not None:
        assert re.search(rf"devices\[\d+\]\.{field}: ", message), message
    assert problem in message


def test_defaults_are_derived() -> None:
    [device] = parse_inventory("devices:\n  - physicalId: 9\n    chipName: 910\n", SOURCE)
    assert device == Device(
        physical_id=9,
        chip_name="910",
        device_type="Ascend910",
        logic_id=9,
        card_id=9,
        chip_id=0,
        memory=0,
        topology_group="ring-2",
        health=Health.OK,
    )


def test_every_field_is_read() -> None:
    text = entry(
        physicalId=3,
        logicId=1,
        cardId=2,
        chipId=1,
        chipName="310P3",
        deviceType="Ascend310P",
        memory="24Gi",
        aiCore=8,
        numaNode=-1,
        pciBusId='"0000:C1:00.1"',
        topologyGroup="card-2",
        driverVersion="24.1.rc1",
        health="warning",
    )
    [device] = parse_inventory(text, SOURCE)
    assert device == Device(
        physical_id=3,
        chip_name="310P3",
        device_type="Ascend310P",
        logic_id=1,
        card_id=2,
        chip_id=1,
        memory=24 * 2**30,
        ai_core=8,
        numa_node=None,
        pci_bus_id="0000:c1:00.1",
        topology_group="card-2",
        driver_version="24.1.rc1",
        health=Health.WARNING,
    )


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("dump", [yaml.safe_dump, json.dumps])
def test_profiles_round_trip(profile: str, dump: object) -> None:
    devices = profile_devices(profile)
    text = dump(inventory_document(devices))  # type: ignore[operator]
    assert parse_inventory(text, SOURCE) == devices


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (0, 0),
        (1024, 1024),
        ("64Gi", 64 * 2**30),
        ("1k", 1000),
        ("3M", 3 * 10**6),
        ("2Ti", 2 * 2**40),
        (" 5Mi ", 5 * 2**20),
        ("7", 7),
        ("1E", 10**18),
    ],
)
def test_parse_bytes(value: object, count: int) -> None:
    assert parse_bytes(value) == count


@pytest.mark.parametrize("value", ["64GB", "1.5Gi", "-1", "Gi", "", True, None, 1.0, -5, "1 Gi"])
def test_parse_bytes_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"quantity|negative"):
        parse_bytes(value)


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0"), (1000, "1000"), (1024, "1Ki"), (64 * 2**30, "64Gi"), (3 * 2**20 + 1, "3145729")],
)
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text
    assert parse_bytes(text) == count
