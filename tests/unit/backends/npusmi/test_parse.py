"""npu-smi parsers: every fixture, hand-made breakage, and random text that must only raise
NpuSmiParseError."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_plugin.ascend.device import Health
from npu_plugin.backends.npusmi.parse import (
    MIB,
    InfoRow,
    MappingRow,
    build_devices,
    hccs_peers,
    parse_health_codes,
    parse_info,
    parse_mapping,
    parse_topology,
)
from npu_plugin.errors import NpuSmiParseError
from tests.unit.backends.npusmi.test_vnpu_parse import VNPU_FIXTURES

FIXTURES = Path(__file__).parents[3] / "fixtures" / "npu-smi"
OK, WARNING, ALARM, CRITICAL, UNKNOWN = Health.OK, Health.WARNING, Health.ALARM, Health.CRITICAL, Health.UNKNOWN


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class InfoExpected:
    version: str
    rows: list[tuple[int, int, int | None, Health]]  # card, chip, printed id, health
    id_column: str
    memory_mib: set[int]
    buses: dict[int, str | None]  # row index -> Bus-Id, spot checks


INFO: dict[str, InfoExpected] = {
    "910a-x8.info.txt": InfoExpected(
        "22.0.3.1", [(c, 0, None, OK) for c in range(8)], "", {32768}, {0: "0000:61:00.0", 1: "0000:db:00.0"}
    ),
    "910b3-x8.info.txt": InfoExpected(
        "24.1.rc1.b030", [(c, 0, None, OK) for c in range(8)], "", {65536}, {0: "0000:c1:00.0", 7: "0000:42:00.0"}
    ),
    "910b3-x8-faults.info.txt": InfoExpected(
        "24.1.rc1.b030",
        [(c, 0, None, h) for c, h in enumerate([OK, WARNING, ALARM, CRITICAL, UNKNOWN, OK, OK, OK])],
        "",
        {65536, 0},
        {4: "0000:01:00.0"},
    ),
    "910c-x16.info.txt": InfoExpected(
        "24.1.rc3.3", [(n // 2, n % 2, n, OK) for n in range(16)], "Phy-ID", {65536}, {1: "0000:9f:00.0"}
    ),
    "910c-container.info.txt": InfoExpected(
        "24.1.rc3.7", [(2, 0, 4, OK), (2, 1, 5, WARNING)], "Phy-ID", {65536}, {1: "0000:97:00.0"}
    ),
    "310p3-duo-x2.info.txt": InfoExpected(
        "23.0.0",
        [(1, 0, 0, OK), (1, 1, 1, OK), (3, 0, 2, ALARM), (3, 1, 3, OK)],
        "Device",
        {21527},
        {2: "0000:81:00.0"},
    ),
    "310-x4.info.txt": InfoExpected(
        "21.0.3.1", [(0, 0, 0, OK), (0, 1, 1, UNKNOWN), (0, 2, 2, CRITICAL), (0, 3, 3, OK)], "Device", {8192}, {3: None}
    ),
}

MAPPING: dict[str, list[tuple[int, int, int, int | None]]] = {  # card, chip, logic id, printed physical id
    "910a-x8.mapping.txt": [(c, 0, c, None) for c in range(8)],
    "910b3.mapping.txt": [(0, 0, 0, None), (1, 0, 1, None)],
    "910b3-x8.mapping.txt": [(c, 0, c, None) for c in range(8)],
    "910c-x16.mapping.txt": [(n // 2, n % 2, n, n) for n in range(16)],
    "910c-container.mapping.txt": [(2, 0, 0, 4), (2, 1, 1, 5)],
    "310p3-duo-x2.mapping.txt": [(1, 0, 0, None), (1, 1, 1, None), (3, 0, 2, None), (3, 1, 3, None)],
    "310-x4.mapping.txt": [(0, c, c, None) for c in range(4)],
}

RING_0, RING_1 = frozenset(range(4)), frozenset(range(4, 8))
TOPOLOGY: dict[str, dict[int, frozenset[int]] | str] = {  # HCCS peers, or the expected error
    "910b3-x8.topo.txt": {n: frozenset(range(8)) - {n} for n in range(8)},
    "910a-x8.topo.txt": {n: (RING_0 if n < 4 else RING_1) - {n} for n in range(8)},
    "310p3.topo.txt": "line 1: expected a header 'NPU0 NPU1 ... CPU Affinity'",
}

# info + mapping -> (physical, logic, card, chip) per device, device type, chip name
DEVICES: dict[tuple[str, str], tuple[list[tuple[int, int, int, int]], str, str]] = {
    ("910a-x8.info.txt", "910a-x8.mapping.txt"): ([(c, c, c, 0) for c in range(8)], "Ascend910", "910A"),
    ("910b3-x8.info.txt", "910b3-x8.mapping.txt"): ([(c, c, c, 0) for c in range(8)], "Ascend910B", "910B3"),
    ("910c-x16.info.txt", "910c-x16.mapping.txt"): ([(n, n, n // 2, n % 2) for n in range(16)], "Ascend910C", "910"),
    ("910c-container.info.txt", "910c-container.mapping.txt"): ([(4, 0, 2, 0), (5, 1, 2, 1)], "Ascend910C", "910"),
    ("310p3-duo-x2.info.txt", "310p3-duo-x2.mapping.txt"): (
        [(0, 0, 1, 0), (1, 1, 1, 1), (2, 2, 3, 0), (3, 3, 3, 1)],
        "Ascend310P",
        "310P3",
    ),
    ("310-x4.info.txt", "310-x4.mapping.txt"): ([(c, c, 0, c) for c in range(4)], "Ascend310", "310"),
}


def test_every_fixture_file_has_an_expectation() -> None:
    files = {path.name for path in FIXTURES.glob("*.txt")} - VNPU_FIXTURES
    assert files == set(INFO) | set(MAPPING) | set(TOPOLOGY)


@pytest.mark.parametrize("name", sorted(INFO))
def test_parse_info_fixture(name: str) -> None:
    expected = INFO[name]
    rows = parse_info(fixture(name))
    assert [(r.card_id, r.chip_id, r.printed_id, r.health) for r in rows] == expected.rows
    assert {r.driver_version for r in rows} == {expected.version}
    assert {r.id_column for r in rows} == {expected.id_column}
    assert {r.memory for r in rows} == {mib * MIB for mib in expected.memory_mib}
    assert {i: rows[i].pci_bus_id for i in expected.buses} == expected.buses


@pytest.mark.parametrize("name", sorted(MAPPING))
def test_parse_mapping_fixture(name: str) -> None:
    rows = parse_mapping(fixture(name))
    assert [(r.card_id, r.chip_id, r.logic_id, r.physical_id) for r in rows] == MAPPING[name]
    assert all(r.chip_name != "Mcu" for r in rows)


@pytest.mark.parametrize("name", sorted(TOPOLOGY))
def test_parse_topology_fixture(name: str) -> None:
    expected = TOPOLOGY[name]
    if isinstance(expected, str):
        with pytest.raises(NpuSmiParseError, match=expected.replace(".", r"\.")):
            parse_topology(fixture(name))
        return
    topo = parse_topology(fixture(name))
    assert hccs_peers(topo) == expected
    assert topo.labels == tuple(range(8))
    assert all(topo.links[i][i] == "X" for i in range(8))


@pytest.mark.parametrize(
    ("link", "peer"),
    [("HCCS", True), ("HCCS_SW", True), ("hccs", True), ("SIO", True), ("SYS", False), ("PIX", False), ("NA", False)],
)
def test_hccs_and_sio_links_make_peers(link: str, peer: bool) -> None:
    topo = parse_topology(
        f"\t   NPU0       NPU1       CPU Affinity\nNPU0   X   {link}   0-23\nNPU1   {link}   X   0-23\n"
    )
    assert hccs_peers(topo) == ({0: frozenset({1}), 1: frozenset({0})} if peer else {0: frozenset(), 1: frozenset()})


def test_topology_keeps_cpu_affinity_per_npu() -> None:
    topo = parse_topology(fixture("910b3-x8.topo.txt"))
    assert topo.cpu_affinity == ("144-167", "144-167", "96-119", "96-119", "0-23", "0-23", "48-71", "48-71")


@pytest.mark.parametrize(("info", "mapping"), sorted(DEVICES))
def test_build_devices_fixture(info: str, mapping: str) -> None:
    ids, device_type, chip_name = DEVICES[(info, mapping)]
    devices = build_devices(parse_info(fixture(info)), parse_mapping(fixture(mapping)))
    assert [(d.physical_id, d.logic_id, d.card_id, d.chip_id) for d in devices] == ids
    assert {(d.device_type, d.chip_name) for d in devices} == {(device_type, chip_name)}
    assert {d.topology_group for d in devices} == {""}
    assert all(d.numa_node is None and d.ai_core is None for d in devices)


def test_build_devices_carries_health_memory_bus_and_version() -> None:
    rows = parse_info(fixture("910b3-x8-faults.info.txt"))
    devices = build_devices(rows, parse_mapping(fixture("910b3-x8.mapping.txt")))
    assert [d.health for d in devices[:5]] == [OK, WARNING, ALARM, CRITICAL, UNKNOWN]
    assert devices[0].memory == 64 * 1024**3
    assert devices[4].memory == 0  # the UNKNOWN die prints NA figures
    assert devices[0].pci_bus_id == "0000:c1:00.0"
    assert devices[0].driver_version == "24.1.rc1.b030"


def test_logic_ids_follow_the_device_nodes_present_in_ascending_order() -> None:
    info = parse_info(fixture("910b3-x8.info.txt"))
    mapping = parse_mapping(fixture("910b3-x8.mapping.txt"))
    devices = build_devices(info, mapping, device_nodes=[10, 3, 4, 5, 6, 7, 8, 9])
    assert [(d.logic_id, d.physical_id) for d in devices] == [(n, n + 3) for n in range(8)]


def test_device_nodes_that_do_not_match_the_count_leave_logic_ids_as_physical_ids() -> None:
    info = parse_info(fixture("910b3-x8.info.txt"))
    devices = build_devices(info, parse_mapping(fixture("910b3-x8.mapping.txt")), device_nodes=[0, 1])
    assert [d.physical_id for d in devices] == list(range(8))


def test_printed_physical_ids_win_over_device_nodes() -> None:
    info = parse_info(fixture("910c-container.info.txt"))
    devices = build_devices(info, parse_mapping(fixture("910c-container.mapping.txt")), device_nodes=[0, 1])
    assert [d.physical_id for d in devices] == [4, 5]


@pytest.mark.parametrize(("info", "mapping"), sorted(DEVICES))
def test_without_a_mapping_info_alone_gives_the_same_devices(info: str, mapping: str) -> None:
    """Every fixture host's `info -m` numbers logic ids in `info` order, so `info` alone agrees with
    it."""
    rows = parse_info(fixture(info))
    assert build_devices(rows, None) == build_devices(rows, parse_mapping(fixture(mapping)))


def test_without_a_mapping_device_nodes_still_give_physical_ids() -> None:
    devices = build_devices(parse_info(fixture("910b3-x8.info.txt")), None, device_nodes=range(3, 11))
    assert [(d.card_id, d.logic_id, d.physical_id) for d in devices] == [(n, n, n + 3) for n in range(8)]


def _lines(name: str, keep: int) -> str:
    return "\n".join(fixture(name).splitlines()[:keep]) + "\n"


def _replace(name: str, old: str, new: str) -> str:
    text = fixture(name)
    assert old in text
    return text.replace(old, new, 1)


B3, A3 = "910b3-x8.info.txt", "910c-container.info.txt"
INFO_ERRORS: list[tuple[str, str, str]] = [  # id, text, expected message part
    ("empty", "", "npu-smi info: no device table header '| NPU   Name | Health | ...' found; it printed nothing"),
    ("blank", "\n \n\t\n", "found; it printed nothing"),
    ("garbage", "bash: npu-smi: command not found\n", "no device table header '| NPU   Name | Health | ...' found"),
    ("dcmi-error", "dcmi module initialize failed. ret is -8005\n", "begins 'dcmi module initialize failed"),
    ("header-only", _lines(B3, 4), "line 5: expected the header row '| Chip [Phy-ID|Device] | Bus-Id | ...'"),
    ("no-rows", _lines(B3, 6), "the device table has no device rows (truncated output?)"),
    ("cut-after-first-row", _lines(B3, 16), "line 17: expected the second row of NPU 3 (chip id, Bus-Id, memory)"),
    ("cut-after-second-row", _lines(B3, 17), "line 18: expected a '+---' line closing NPU 3 chip 0"),
    ("cut-inside-second-row", _lines(B3, 16) + "| 0   | 0000:82:00.0  | 0\n", "line 17: expected 2 '<used> / <total>'"),
    ("unknown-health", _replace(B3, "| OK     ", "| Broken "), "line 7: unknown health 'Broken'"),
    ("bad-bus-id", _replace(B3, "0000:C2:00.0", "0000:C2:00.x"), "line 11: expected a PCI Bus-Id"),
    ("bad-card-id", _replace(B3, "| 2     910B3", "| x     910B3"), "line 13: expected the NPU id (a number), got 'x'"),
    ("missing-phy-id", _replace(A3, "| 1     5   ", "| 1         "), "line 11: expected '| <Chip> <Phy-ID>"),
    ("bad-phy-id", _replace(A3, "| 1     5   ", "| 1     y   "), "line 11: expected Phy-ID (a number)"),
    ("no-hbm-figures", _replace(B3, "3314 / 65536", "3314        "), "line 11: expected 2 '<used> / <total>'"),
]


@pytest.mark.parametrize(("text", "message"), [case[1:] for case in INFO_ERRORS], ids=[c[0] for c in INFO_ERRORS])
def test_parse_info_rejects(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError) as raised:
        parse_info(text)
    assert message in str(raised.value)


MAP = "910b3-x8.mapping.txt"
MAPPING_ERRORS: list[tuple[str, str, str]] = [
    ("empty", "", "info -m: no header with the columns NPU ID, Chip ID, Chip Logic ID, Chip Name found; it printed"),
    ("garbage", "Usage: npu-smi info <watch|proc|-m|-l|-t>\n", "the output begins 'Usage: npu-smi info"),
    ("header-only", _lines(MAP, 1), "npu-smi info -m, line 1: no chip with a logic id after the header"),
    ("only-mcu", _lines(MAP, 1) + "\t0     1     -     Mcu\n", "no chip with a logic id"),
    ("short-row", _lines(MAP, 2) + "\t1     0     1\n", "line 3: expected 4 columns (NPU ID, Chip ID, Chip Logic ID"),
    ("bad-logic-id", _lines(MAP, 2) + "\t1   0   one   Ascend 910B3\n", "line 3: expected the Chip Logic ID"),
    ("bad-card-id", _lines(MAP, 2) + "\tA   0   1   Ascend 910B3\n", "line 3: expected the NPU ID (a number), got 'A'"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in MAPPING_ERRORS], ids=[c[0] for c in MAPPING_ERRORS])
def test_parse_mapping_rejects(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError) as raised:
        parse_mapping(text)
    assert message in str(raised.value)


TOPO = "910b3-x8.topo.txt"
TOPOLOGY_ERRORS: list[tuple[str, str, str]] = [
    ("empty", "", "npu-smi info -t topo, line 1: expected a header 'NPU0 NPU1 ... CPU Affinity'"),
    ("garbage", "Error: command timed out\n", "got 'Error: command timed out'"),
    ("truncated", _lines(TOPO, 5), "line 6: expected the row 'NPU4' with 8 link words, got the end of the output"),
    ("short-row", _replace(TOPO, "NPU3       HCCS       HCCS       HCCS", "NPU3"), "line 5: expected the row 'NPU3'"),
    ("wrong-label", _replace(TOPO, "NPU5       HCCS", "NPU9       HCCS"), "line 7: expected the row 'NPU5'"),
    ("bad-link", _replace(TOPO, "NPU1       HCCS", "NPU1       ????"), "line 3: expected the row 'NPU1' with 8 link"),
    ("duplicate-labels", "NPU0 NPU0 CPU Affinity\n", "line 1: expected a header"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in TOPOLOGY_ERRORS], ids=[c[0] for c in TOPOLOGY_ERRORS])
def test_parse_topology_rejects(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError) as raised:
        parse_topology(text)
    assert message in str(raised.value)


def test_build_devices_needs_a_mapping_row_for_every_die() -> None:
    info = parse_info(fixture("910b3-x8.info.txt"))
    with pytest.raises(NpuSmiParseError, match=r"info -m: has no row for NPU 2 chip 0 \(npu-smi info line 13\)"):
        build_devices(info, parse_mapping(fixture("910b3.mapping.txt")))


def test_build_devices_rejects_two_dies_on_one_physical_id() -> None:
    info = parse_info(fixture("910a-x8.info.txt"))
    mapping = [MappingRow(c, 0, 0 if c == 5 else c, "Ascend 910A", None, c + 2) for c in range(8)]
    with pytest.raises(NpuSmiParseError, match="NPU 0 chip 0 and NPU 5 chip 0 both resolve to physical id 0"):
        build_devices(info, mapping)


def test_build_devices_rejects_a_chip_listed_twice_in_the_mapping() -> None:
    row = MappingRow(0, 0, 0, "Ascend 910A", None, 2)
    with pytest.raises(NpuSmiParseError, match="line 3: NPU 0 chip 0 is listed twice"):
        build_devices([], [row, MappingRow(0, 0, 1, "Ascend 910A", None, 3)])


def test_build_devices_rejects_an_unsupported_chip() -> None:
    row = InfoRow(0, 0, "Ascend950DT", OK, 96 * 1024 * MIB, None, None, "", "25.6.rc1", 7)
    with pytest.raises(NpuSmiParseError, match="line 7: unsupported chip 'Ascend950DT'"):
        build_devices([row], [MappingRow(0, 0, 0, "Ascend950DT", None, 2)])


# ---------------------------------------------------------------- random input

TOPOLOGY_TEXT = sorted(name for name, expected in TOPOLOGY.items() if not isinstance(expected, str))
PARSERS: dict[str, tuple[Callable[[str], object], list[str]]] = {
    "info": (parse_info, sorted(INFO)),
    "mapping": (parse_mapping, sorted(MAPPING)),
    "topo": (parse_topology, TOPOLOGY_TEXT),
}
TABLE_ALPHABET = st.sampled_from([*"|+-=/ \t\n0123456789ABCDEFXNPU", "NA", "OK", "HCCS", "Chip", "NPU1"])


@st.composite
def mutated(draw: st.DrawFn, names: list[str]) -> str:
    """One of `names` with a few random cuts and insertions: near-valid text reaches the deep code
    paths."""
    text = fixture(draw(st.sampled_from(names)))
    for _ in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 40)))
        text = text[:start] + "".join(draw(st.lists(TABLE_ALPHABET, max_size=6))) + text[end:]
    return text


@st.composite
def parser_and_text(draw: st.DrawFn) -> tuple[Callable[[str], object], str]:
    parse, names = PARSERS[draw(st.sampled_from(sorted(PARSERS)))]
    return parse, draw(st.one_of(st.text(), mutated(names)))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(parser_and_text())
def test_random_text_raises_nothing_but_parse_errors(case: tuple[Callable[[str], object], str]) -> None:
    parse, text = case
    try:
        parse(text)
    except NpuSmiParseError as error:
        assert str(error).startswith("npu-smi")


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(sorted(INFO)), mutated(sorted(MAPPING)), st.none() | st.lists(st.integers(0, 40), max_size=20))
def test_building_from_mutated_tables_raises_nothing_but_parse_errors(
    info_text: str, mapping_text: str, device_nodes: list[int] | None
) -> None:
    try:
        build_devices(parse_info(info_text), parse_mapping(mapping_text), device_nodes)
    except NpuSmiParseError as error:
        assert str(error).startswith("npu-smi")


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        (
            "\tHealth Status : Alarm\n\tError Code    : 80E18402 80E01801\n\tError Information : x\n",
            (0x80E01801, 0x80E18402),
        ),
        ("Health Status : Warning\nError Code : 80E01801,0x80E18402\n", (0x80E01801, 0x80E18402)),
        ("Health Status : OK\nError Code : NA\n", ()),
        ("Health Status : OK\nError Code :\n", ()),
    ],
)
def test_health_fault_codes(text: str, codes: tuple[int, ...]) -> None:
    assert parse_health_codes(text) == codes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Health Status : OK\n", "npu-smi info -t health: no 'Error Code : ...' line found"),
        ("Error Code : 80E0180Z\n", "npu-smi info -t health, line 1: '80E0180Z' is not a fault code (hex digits)"),
    ],
)
def test_unreadable_health_output_names_the_line(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        parse_health_codes(text)
    assert str(caught.value).startswith(message)
