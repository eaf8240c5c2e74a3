"""The inventory file: line-precise errors for every malformed input, round trips, quantities."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
import yaml

from npu_plugin.ascend.device import Device, Health, LinkState
from npu_plugin.ascend.vnpu import ChipMode, ChipVnpu, Vnpu, VnpuTemplate
from npu_plugin.backends.fake.inventory_file import inventory_document, parse_inventory_file
from npu_plugin.backends.fake.profiles import PROFILES, profile_inventory
from npu_plugin.errors import InventoryFileError
from npu_plugin.kubeapi.quantity import format_bytes, parse_bytes
from tests.support.fake_devices import parse_inventory, profile_devices

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
    (entry(faultCodes="0x80E01801"), 4, "faultCodes", "expected a list of fault codes"),
    (entry(faultCodes="[0x100000000]"), 4, "faultCodes", "out of range"),
    (entry(faultCodes="[zz]"), 4, "faultCodes", "'zz' is not a fault code"),
    (entry(colour="red"), 4, "colour", "unknown field"),
    (entry(deviceIP="192.168.1.300"), 4, "deviceIP", "expected an IPv4 or IPv6 address"),
    (entry(deviceIP="0.0.0.0"), 4, "deviceIP", "the unspecified address"),
    (entry(deviceIP=3232235777), 4, "deviceIP", "as a string"),
    (entry(superPodId=-1), 4, "superPodId", "integer >= 0"),
    (entry(serverIndex="two"), 4, "serverIndex", "integer >= 0"),
    (entry(rackId="true"), 4, "rackId", "integer >= 0"),
    (entry(linkStatus="flapping"), 4, "linkStatus", "expected UP or DOWN"),
    (entry(linkStatus=1), 4, "linkStatus", "expected UP or DOWN"),
    ("devices:\n  - physicalId: 0\n    chipName: 910B3\n    physicalId: 1\n", 4, "physicalId", "given twice"),
    ("devices:\n" + GOOD + "  - physicalId: 0\n    chipName: 910B3\n", 4, "physicalId", "0 already used by devices[0]"),
    # What PyYAML raises outside its own error marks: control characters, tags, values its resolvers
    # misread.
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
        faultCodes="[0x80E18402, '80E01801']",
        deviceIP="'FD00::0:1'",
        superPodId=7,
        serverIndex=0,
        rackId=2,
        linkStatus="down",
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
        faults=(0x80E01801, 0x80E18402),
        device_ip="fd00::1",
        super_pod_id=7,
        server_index=0,
        rack_id=2,
        link=LinkState.DOWN,
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


# ---- the `vnpu:` block

VNPU_ENTRY = """devices:
  - physicalId: 1
    chipName: 910B3
    vnpu:
      mode: container
      dynamic: true
      idRange: [116, 131]
      resources: {aicore: 20, aicpu: 7, vpc: 9, venc: 0, vdec: 2, jpegd: 24, jpege: 4}
      templates:
        - {name: vir05_1c_16g, aicore: 5, memory: 16Gi, aicpu: 1, vpc: 2, venc: 0, vdec: 0, jpegd: 6, jpege: 1}
        - {name: vir10_3c_32g, aicore: 10, memory: 32Gi, aicpu: 3, vpc: 4, vdec: 1, jpegd: 12, jpege: 2, pngd: 1.5}
      existing: [{vnpuId: 116, template: vir05_1c_16g}]
"""


def vnpu_entry(old: str, new: str) -> str:
    assert old in VNPU_ENTRY
    return VNPU_ENTRY.replace(old, new)


def test_the_vnpu_block_is_read() -> None:
    inventory = parse_inventory_file(VNPU_ENTRY, SOURCE)
    assert inventory.vnpu == {
        1: ChipVnpu(
            physical_id=1,
            mode=ChipMode.CONTAINER,
            totals={k: Decimal(v) for k, v in {"aicore": 20, "aicpu": 7, "vpc": 9, "venc": 0, "vdec": 2}.items()}
            | {"jpegd": Decimal(24), "jpege": Decimal(4)},
            templates=(
                VnpuTemplate(
                    "vir05_1c_16g",
                    5,
                    16 * 2**30,
                    {"aicpu": Decimal(1), "vpc": Decimal(2), "jpegd": Decimal(6), "jpege": Decimal(1)},
                ),
                VnpuTemplate(
                    "vir10_3c_32g",
                    10,
                    32 * 2**30,
                    {
                        "aicpu": Decimal(3),
                        "vpc": Decimal(4),
                        "vdec": Decimal(1),
                        "jpegd": Decimal(12),
                        "jpege": Decimal(2),
                        "pngd": Decimal("1.5"),
                    },
                ),
            ),
            id_range=(116, 131),
            dynamic_supported=True,
            vnpus=(Vnpu(1, 116, "vir05_1c_16g"),),
        )
    }


@pytest.mark.parametrize(
    ("text", "dynamic", "id_range"),
    [
        ("devices:\n  - {physicalId: 2, chipName: 910B3, vnpu: {resources: {aicore: 20}}}\n", True, (132, 147)),
        ("devices:\n  - {physicalId: 1, chipName: '910', vnpu: {resources: {aicore: 32}}}\n", False, (116, 131)),
        ("devices:\n  - {physicalId: 1, chipName: 310P3, vnpu: {resources: {aicore: 8}}}\n", True, (116, 123)),
        (  # two dies on card 0: an Atlas 300I Duo
            "devices:\n  - {physicalId: 0, chipName: 310P3, vnpu: {resources: {aicore: 8}}}\n"
            "  - {physicalId: 1, cardId: 0, chipId: 1, chipName: 310P3}\n",
            False,
            (100, 107),
        ),
    ],
)
def test_vnpu_defaults_follow_the_family(text: str, dynamic: bool, id_range: tuple[int, int]) -> None:
    [chip] = parse_inventory_file(text, SOURCE).vnpu.values()
    assert (chip.mode, chip.dynamic_supported, chip.id_range, chip.templates, chip.vnpus) == (
        ChipMode.CONTAINER,
        dynamic,
        id_range,
        (),
        (),
    )


VNPU_MALFORMED = [
    (vnpu_entry("mode: container", "mode: docker"), 5, "vnpu.mode", "expected one of container, vm, unsupported"),
    (vnpu_entry("dynamic: true", "dynamic: yes please"), 6, "vnpu.dynamic", "expected true or false"),
    (vnpu_entry("idRange: [116, 131]", "idRange: [131, 116]"), 7, "vnpu.idRange", "first <= last"),
    (vnpu_entry("idRange: [116, 131]", "idRange: [116, 65535]"), 7, "vnpu.idRange", "last < 65535"),
    (vnpu_entry("idRange: [116, 131]", "idRange: 116"), 7, "vnpu.idRange", "expected [first, last]"),
    (vnpu_entry("resources: {aicore: 20,", "resources: {"), 8, "vnpu.resources.aicore", "required"),
    (vnpu_entry("vpc: 9,", "vpc: -9,"), 8, "vnpu.resources.vpc", "number >= 0"),
    (vnpu_entry("vpc: 9,", "hbm: 9,"), 8, "vnpu.resources.hbm", "unknown field"),
    (
        vnpu_entry("      resources: {aicore: 20, aicpu: 7, vpc: 9, venc: 0, vdec: 2, jpegd: 24, jpege: 4}\n", ""),
        5,  # the block's first line
        "vnpu.resources",
        "required",
    ),
    (
        "devices:\n  - {physicalId: 0, chipName: 910B3, vnpu: {resources: {aicore: 20}, templates: 3}}\n",
        2,
        "vnpu.templates",
        "expected a list",
    ),
    (
        vnpu_entry("        - {name: vir05_1c_16g,", "        - 7\n        - {name: vir05_1c_16g,"),
        10,
        "vnpu.templates[0]",
        "expected a mapping",
    ),
    (vnpu_entry("{name: vir05_1c_16g, aicore: 5,", "{name: vir05_1c_16g,"), 10, "vnpu.templates[0].aicore", "required"),
    (vnpu_entry("aicore: 10, memory: 32Gi", "aicore: 10, memory: 32GB"), 11, "vnpu.templates[1].memory", "64Gi"),
    (vnpu_entry("pngd: 1.5", "pngd: .nan"), 11, "vnpu.templates[1].pngd", "number >= 0"),
    (vnpu_entry("pngd: 1.5", "hbm: 1"), 11, "vnpu.templates[1].hbm", "unknown field"),
    (vnpu_entry("name: vir10_3c_32g", "name: vir05_1c_16g"), 11, "vnpu.templates[1].name", "given twice"),
    (vnpu_entry("vnpuId: 116,", "vnpuId: 99,"), 12, "vnpu.existing[0].vnpuId", "outside the chip's idRange"),
    (vnpu_entry("template: vir05_1c_16g}]", "template: vir07}]"), 12, "vnpu.existing[0].template", "not among"),
    (
        vnpu_entry(
            "existing: [{vnpuId: 116, template: vir05_1c_16g}]",
            "existing:\n        - {vnpuId: 116, template: vir05_1c_16g}\n"
            "        - {vnpuId: 116, template: vir10_3c_32g}",
        ),
        14,
        "vnpu.existing[1].vnpuId",
        "116 given twice",
    ),
    (vnpu_entry("existing: [{vnpuId: 116,", "existing: [{id: 116,"), 12, "vnpu.existing[0].id", "unknown field"),
    ("devices:\n  - {physicalId: 0, chipName: 910B3, vnpu: [1]}\n", 2, "vnpu", "expected a mapping"),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "problem"), VNPU_MALFORMED, ids=[m[2] + ": " + m[3] for m in VNPU_MALFORMED]
)
def test_a_malformed_vnpu_block_names_file_line_and_field(text: str, line: int, field: str, problem: str) -> None:
    with pytest.raises(InventoryFileError) as raised:
        parse_inventory_file(text, SOURCE)
    message = str(raised.value)
    assert message.startswith(f"{SOURCE}:{line}: devices[0].{field}: "), message
    assert problem in message, message


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("dump", [yaml.safe_dump, json.dumps])
def test_profiles_round_trip_with_their_vnpu_blocks(profile: str, dump: object) -> None:
    inventory = profile_inventory(profile)
    text = dump(inventory_document(inventory.devices, inventory.vnpu))  # type: ignore[operator]
    assert parse_inventory_file(text, SOURCE) == inventory


def test_the_vnpu_block_round_trips_with_existing_vnpus_and_fractions() -> None:
    inventory = parse_inventory_file(VNPU_ENTRY, SOURCE)
    assert (
        parse_inventory_file(yaml.safe_dump(inventory_document(inventory.devices, inventory.vnpu)), SOURCE) == inventory
    )


def test_without_vnpu_facts_the_document_has_no_vnpu_block() -> None:
    inventory = profile_inventory("atlas-800t-a2")
    assert all("vnpu" not in record for record in inventory_document(inventory.devices)["devices"])
