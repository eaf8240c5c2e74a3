"""Pure parsers for npu-smi's `info`, `info -m` and `info -t topo` tables, and the Devices they
describe.

Nothing here runs a program or touches a file: text in, data out. Every malformed input raises
NpuSmiParseError naming the command, the line and what was expected; nothing else escapes.

Physical ids (the N of /dev/davinciN) are taken, in order of trust, from:
1. the second-row id column of `npu-smi info`: `Chip  Phy-ID` (910C/A3) or `Chip    Device`
   (310, 310P);
2. the `Chip Phy-ID` column of `npu-smi info -m` (A3 hosts print it there too);
3. otherwise (910A/910B tables print neither) the `Chip Logic ID` of `npu-smi info -m`: the driver
   numbers logic ids 0.. over the devices this process can see, in ascending physical-id order, so
   on a host that sees every device they *are* the physical ids. When only some nodes are visible
   (a container given davinci3..6 sees logic ids 0..3), pass the davinci numbers actually present
   as `device_nodes` and logic ids are matched to them in that same ascending order.

Without `info -m` (some npu-smi versions and products answer it "not supported"), logic ids are the
dies' positions in `info` order, which is the driver's own order; rules 1 and 3 still apply.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from npu_plugin.ascend.device import Device, Health, device_type_for_chip, parse_fault_code
from npu_plugin.errors import NpuSmiParseError

MIB = 1024 * 1024

_INT = re.compile(r"[0-9]{1,9}")
_USAGE = re.compile(r"([0-9]{1,12}|NA|-)\s*/\s*([0-9]{1,12}|NA|-)")
_BUS_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_VERSION = re.compile(r"Version:\s*(\S+)")
_NPU_LABEL = re.compile(r"NPU([0-9]{1,9})")
_LINK = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_ABSENT = ("NA", "-", "N/A")
_MAPPING_COLUMNS = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")


@dataclass(frozen=True, slots=True)
class InfoRow:
    """One die of `npu-smi info`: its two table rows merged."""

    card_id: int
    chip_id: int
    chip_name: str
    health: Health
    memory: int  # bytes: HBM total, or the DDR total where the table has no HBM column; 0 when NA
    pci_bus_id: str | None
    printed_id: int | None  # the Phy-ID / Device column, when the table has one and it is not NA
    id_column: str  # "Phy-ID", "Device" or "" (910A/910B tables)
    driver_version: str | None
    line: int


@dataclass(frozen=True, slots=True)
class MappingRow:
    """One chip of `npu-smi info -m` that has a logic id (Mcu rows are dropped)."""

    card_id: int
    chip_id: int
    logic_id: int
    chip_name: str
    physical_id: int | None  # only A3 hosts print a `Chip Phy-ID` column
    line: int


@dataclass(frozen=True, slots=True)
class TopologyMatrix:
    """`npu-smi info -t topo`: `links[i][j]` is how NPU labels[i] reaches labels[j] (X, HCCS, SYS,
    PIX...).

    Labels are the N of the printed `NPU<N>`, which number dies like logic ids do.
    """

    labels: tuple[int, ...]
    links: tuple[tuple[str, ...], ...]
    cpu_affinity: tuple[str | None, ...]  # the CPU range printed per NPU; a NUMA node is not given


# ---------------------------------------------------------------- shared with npusmi_vnpu_parse


def parse_error(command: str, line: int | None, message: str) -> NpuSmiParseError:
    """`npu-smi <command>, line <n>: <message>`: the one shape of every parse error."""
    where = f"npu-smi {command}" + (f", line {line}" if line is not None else "")
    return NpuSmiParseError(f"{where}: {message}")


def quoted_line(text: str) -> str:
    """A line of output for an error message, stripped and cut at 80 characters."""
    return repr(text.strip()[:80]) if text.strip() else "an empty line"


def output_opening(lines: list[str]) -> str:
    """How the output begins, for an error that found no table at all."""
    first = next((line for line in lines if line.strip()), None)
    return f"the output begins {quoted_line(first)}" if first is not None else "it printed nothing"


def line_at(lines: list[str], index: int) -> str:
    """The line at `index` for an error message, or `the end of the output` past it."""
    return quoted_line(lines[index]) if index < len(lines) else "the end of the output"


def table_cells(line: str) -> list[str]:
    """The `|`-separated cells of a table row, stripped."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _int(word: str, command: str, line: int, what: str) -> int:
    if not _INT.fullmatch(word):
        raise parse_error(command, line, f"expected {what} (a number), got {word!r}")
    return int(word)


# ---------------------------------------------------------------- npu-smi info


def parse_info(text: str) -> list[InfoRow]:
    """Every die of the `npu-smi info` device table; the process table after it is ignored."""
    lines = text.splitlines()
    at, version = _find_info_header(lines)
    id_column, has_hbm = _second_header(lines, at + 1)
    rows: list[InfoRow] = []
    index = at + 2
    while (pair_at := _next_device_row(lines, index)) is not None:
        rows.append(_parse_pair(lines, pair_at, id_column, has_hbm, version))
        index = pair_at + 2
    if not rows:
        raise parse_error("info", len(lines), "the device table has no device rows (truncated output?)")
    return rows


def _find_info_header(lines: list[str]) -> tuple[int, str | None]:
    version = None
    for index, line in enumerate(lines):
        cells = table_cells(line)
        if len(cells) >= 2 and cells[0].split() == ["NPU", "Name"] and cells[1] == "Health":
            return index, version
        if version is None and (found := _VERSION.search(line)):
            version = found.group(1)
    raise parse_error(
        "info", None, f"no device table header '| NPU   Name | Health | ...' found; {output_opening(lines)}"
    )


def _second_header(lines: list[str], index: int) -> tuple[str, bool]:
    cells = table_cells(lines[index]) if index < len(lines) else []
    words = cells[0].split() if cells else []
    if len(cells) < 3 or words[:1] != ["Chip"] or words[1:] not in ([], ["Phy-ID"], ["Device"]):
        expected = "the header row '| Chip [Phy-ID|Device] | Bus-Id | ...'"
        raise parse_error("info", index + 1, f"expected {expected}, got {line_at(lines, index)}")
    return (words[1] if len(words) > 1 else ""), "HBM-Usage" in cells[2]


def _next_device_row(lines: list[str], index: int) -> int | None:
    """Index of the next die's first row; None at the end of the device table."""
    for at in range(index, len(lines)):
        line = lines[at].strip()
        if line.startswith("+"):
            continue
        cells = table_cells(line)
        is_process_table = (len(cells) > 1 and cells[1].startswith("Process")) or "processes" in line
        return None if not line.startswith("|") or is_process_table else at
    return None


def _parse_pair(lines: list[str], at: int, id_column: str, has_hbm: bool, version: str | None) -> InfoRow:
    card_id, chip_name, health = _first_row(lines[at], at + 1)
    if not _starts(lines, at + 1, "|"):
        expected = f"the second row of NPU {card_id} (chip id, Bus-Id, memory)"
        raise parse_error("info", at + 2, f"expected {expected}, got {line_at(lines, at + 1)}")
    chip_id, printed, bus_id, memory = _second_row(lines[at + 1], at + 2, id_column, has_hbm)
    if not _starts(lines, at + 2, "+"):
        expected = f"a '+---' line closing NPU {card_id} chip {chip_id}"
        raise parse_error("info", at + 3, f"expected {expected}, got {line_at(lines, at + 2)}")
    return InfoRow(card_id, chip_id, chip_name, health, memory, bus_id, printed, id_column, version, at + 1)


def _starts(lines: list[str], index: int, prefix: str) -> bool:
    return index < len(lines) and lines[index].strip().startswith(prefix)


def _first_row(line: str, number: int) -> tuple[int, str, Health]:
    cells = table_cells(line)
    words = cells[0].split(maxsplit=1)
    if len(cells) < 3 or len(words) != 2:
        raise parse_error("info", number, f"expected '| <NPU> <Name> | <Health> | ...', got {quoted_line(line)}")
    try:
        health = Health.parse(cells[1])
    except ValueError as error:
        raise parse_error("info", number, str(error)) from None
    return _int(words[0], "info", number, "the NPU id"), words[1], health


def _second_row(line: str, number: int, id_column: str, has_hbm: bool) -> tuple[int, int | None, str | None, int]:
    cells = table_cells(line)
    words = cells[0].split()
    if len(cells) < 3 or len(words) != (2 if id_column else 1):
        expected = f"'| <Chip>{f' <{id_column}>' if id_column else ''} | <Bus-Id> | <AICore> <used> / <total>'"
        raise parse_error("info", number, f"expected {expected}, got {quoted_line(line)}")
    chip_id = _int(words[0], "info", number, "the chip id")
    printed = None if id_column == "" or words[1] in _ABSENT else _int(words[1], "info", number, id_column)
    return chip_id, printed, _bus_id(cells[1], number), _memory(cells[2], number, has_hbm)


def _bus_id(cell: str, number: int) -> str | None:
    if cell in _ABSENT:
        return None
    if not _BUS_ID.fullmatch(cell):
        raise parse_error("info", number, f"expected a PCI Bus-Id like 0000:C1:00.0 or NA, got {cell!r}")
    return cell.lower()


def _memory(cell: str, number: int, has_hbm: bool) -> int:
    usages = _USAGE.findall(cell)
    wanted = 2 if has_hbm else 1
    if len(usages) != wanted:
        columns = "Memory-Usage and HBM-Usage" if has_hbm else "Memory-Usage"
        raise parse_error("info", number, f"expected {wanted} '<used> / <total>' ({columns}), got {cell!r}")
    total = usages[-1][1]
    return int(total) * MIB if total.isdigit() else 0  # a die in a bad state prints NA


# ---------------------------------------------------------------- npu-smi info -m


def parse_health_codes(text: str) -> tuple[int, ...]:
    """The fault codes of `npu-smi info -t health -i <card> -c <chip>`: its `Error Code : 80E01801
    80E18402` line (codes in hex, separated by blanks or commas; `NA` or nothing: none), ascending."""
    command = "info -t health"
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        label, colon, value = line.partition(":")
        if not colon or " ".join(label.split()).lower() != "error code":
            continue
        words = value.replace(",", " ").split()
        if not words or [w.upper() for w in words] == ["NA"]:
            return ()
        try:
            return tuple(sorted({parse_fault_code(word) for word in words}))
        except ValueError as error:
            raise parse_error(command, number, f"{error} in {quoted_line(line)}") from None
    raise parse_error(command, None, f"no 'Error Code : ...' line found; {output_opening(lines)}")


def parse_mapping(text: str) -> list[MappingRow]:
    """The chips of `npu-smi info -m` that have a logic id; a leading TAB per line is optional."""
    lines = text.splitlines()
    at, columns = _mapping_header(lines)
    rows: list[MappingRow] = []
    for index in range(at + 1, len(lines)):
        if lines[index].strip() and (row := _mapping_row(lines[index], index + 1, columns)) is not None:
            rows.append(row)
    if not rows:
        raise parse_error("info -m", len(lines), "no chip with a logic id after the header (truncated output?)")
    return rows


def _mapping_header(lines: list[str]) -> tuple[int, list[str]]:
    for index, line in enumerate(lines):
        columns = re.split(r"\s{2,}|\t", line.strip())
        if all(name in columns for name in _MAPPING_COLUMNS) and columns[-1] == "Chip Name":
            return index, columns
    expected = f"no header with the columns {', '.join(_MAPPING_COLUMNS)} found"
    raise parse_error("info -m", None, f"{expected}; {output_opening(lines)}")


def _mapping_row(line: str, number: int, columns: list[str]) -> MappingRow | None:
    fields = line.split(maxsplit=len(columns) - 1)
    if len(fields) != len(columns):
        expected = f"{len(columns)} columns ({', '.join(columns)})"
        raise parse_error("info -m", number, f"expected {expected}, got {quoted_line(line)}")
    value = dict(zip(columns, (field.strip() for field in fields), strict=True))
    if value["Chip Logic ID"] in _ABSENT:
        return None  # the card's Mcu, or a chip the driver does not expose
    physical = value.get("Chip Phy-ID", "-")
    return MappingRow(
        card_id=_int(value["NPU ID"], "info -m", number, "the NPU ID"),
        chip_id=_int(value["Chip ID"], "info -m", number, "the Chip ID"),
        logic_id=_int(value["Chip Logic ID"], "info -m", number, "the Chip Logic ID"),
        chip_name=value["Chip Name"],
        physical_id=None if physical in _ABSENT else _int(physical, "info -m", number, "the Chip Phy-ID"),
        line=number,
    )


# ---------------------------------------------------------------- npu-smi info -t topo


def parse_topology(text: str) -> TopologyMatrix:
    """The link matrix and CPU affinity of `npu-smi info -t topo`; the legend after it is
    ignored."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    labels = _topology_labels(lines[at].split()) if at < len(lines) else ()
    if not labels:
        expected = "a header 'NPU0 NPU1 ... CPU Affinity'"
        raise parse_error("info -t topo", at + 1, f"expected {expected}, got {line_at(lines, at)}")
    rows = [_topology_row(lines, at + 1 + i, label, len(labels)) for i, label in enumerate(labels)]
    return TopologyMatrix(labels, tuple(links for links, _ in rows), tuple(affinity for _, affinity in rows))


def _topology_labels(words: list[str]) -> tuple[int, ...]:
    labels: list[int] = []
    for word in words:
        if not (found := _NPU_LABEL.fullmatch(word)):
            break
        labels.append(int(found.group(1)))
    return tuple(labels) if len(set(labels)) == len(labels) else ()


def _topology_row(lines: list[str], index: int, label: int, count: int) -> tuple[tuple[str, ...], str | None]:
    words = lines[index].split() if index < len(lines) else []
    links = tuple(words[1 : count + 1])
    if words[:1] != [f"NPU{label}"] or len(links) != count or not all(map(_LINK.fullmatch, links)):
        expected = f"the row 'NPU{label}' with {count} link words"
        raise parse_error("info -t topo", index + 1, f"expected {expected}, got {line_at(lines, index)}")
    affinity = words[count + 1] if len(words) > count + 1 else None
    return links, None if affinity in _ABSENT else affinity


def hccs_peers(topo: TopologyMatrix) -> dict[int, frozenset[int]]:
    """For each NPU label, the other labels it reaches over HCCS (`HCCS`, or `HCCS_*` on super-pods)
    or SIO, the on-package link between a 910C card's two dies (as the DCMI backend counts them
    too)."""
    peers: dict[int, frozenset[int]] = {}
    for label, links in zip(topo.labels, topo.links, strict=True):
        linked = zip(topo.labels, links, strict=True)
        peers[label] = frozenset(o for o, link in linked if o != label and _is_peer_link(link))
    return peers


def _is_peer_link(link: str) -> bool:
    word = link.upper()
    return word.startswith("HCCS") or word == "SIO"


# ---------------------------------------------------------------- combining them


def build_devices(
    info: Sequence[InfoRow], mapping: Sequence[MappingRow] | None, device_nodes: Collection[int] | None = None
) -> list[Device]:
    """Devices from `info` rows and `info -m` rows, sorted by physical id (rule in the module
    docstring).

    `mapping` None: `info -m` gave nothing, so each die's logic id is its position in `info`.
    `device_nodes`: the N of every /dev/davinciN present, when the caller listed them; used only
    when npu-smi prints no physical id at all. topology_group is left empty for the inventory to
    derive.
    """
    if mapping is None:
        matched = [(row, _mapping_from_info(row, position)) for position, row in enumerate(info)]
    else:
        chips = _index_mapping(mapping)
        matched = [(row, _mapping_for(row, chips)) for row in info]
    from_logic = _logic_to_physical([m.logic_id for _, m in matched], device_nodes)
    devices = [_device(row, chip, from_logic) for row, chip in matched]
    _check_unique(devices)
    return sorted(devices, key=lambda device: device.physical_id)


def _index_mapping(mapping: Sequence[MappingRow]) -> dict[tuple[int, int], MappingRow]:
    chips: dict[tuple[int, int], MappingRow] = {}
    for row in mapping:
        if (row.card_id, row.chip_id) in chips:
            raise parse_error("info -m", row.line, f"NPU {row.card_id} chip {row.chip_id} is listed twice")
        chips[(row.card_id, row.chip_id)] = row
    return chips


def _mapping_for(row: InfoRow, chips: dict[tuple[int, int], MappingRow]) -> MappingRow:
    if (chip := chips.get((row.card_id, row.chip_id))) is None:
        missing = f"NPU {row.card_id} chip {row.chip_id} (npu-smi info line {row.line})"
        raise parse_error("info -m", None, f"has no row for {missing}")
    return chip


def _mapping_from_info(row: InfoRow, position: int) -> MappingRow:
    """Stands in for a die's `info -m` row: logic id in `info` order; the physical id comes from
    `info`."""
    return MappingRow(row.card_id, row.chip_id, position, row.chip_name, None, row.line)


def _logic_to_physical(logic_ids: list[int], device_nodes: Collection[int] | None) -> dict[int, int]:
    nodes = sorted(set(device_nodes or ()))
    if len(nodes) != len(logic_ids):
        return {logic: logic for logic in logic_ids}
    return dict(zip(sorted(logic_ids), nodes, strict=True))


def _device(row: InfoRow, chip: MappingRow, from_logic: dict[int, int]) -> Device:
    printed = row.printed_id if row.printed_id is not None else chip.physical_id
    return Device(
        physical_id=printed if printed is not None else from_logic[chip.logic_id],
        chip_name=row.chip_name.removeprefix("Ascend").strip(),
        device_type=_device_type(row, chip),
        logic_id=chip.logic_id,
        card_id=row.card_id,
        chip_id=row.chip_id,
        memory=row.memory,
        pci_bus_id=row.pci_bus_id,
        driver_version=row.driver_version,
        health=row.health,
    )


def _device_type(row: InfoRow, chip: MappingRow) -> str:
    try:
        family = device_type_for_chip(row.chip_name)
    except ValueError:
        expected = "expected a 910, 310P or 310 name"
        raise parse_error("info", row.line, f"unsupported chip {row.chip_name!r}; {expected}") from None
    # A3 (910C) dies print as plain `Ascend910`; only the A3 layouts carry a Phy-ID column.
    if family == "Ascend910" and (row.id_column == "Phy-ID" or chip.physical_id is not None):
        return "Ascend910C"
    return family


def _check_unique(devices: list[Device]) -> None:
    seen: dict[int, Device] = {}
    for device in devices:
        if (other := seen.setdefault(device.physical_id, device)) is not device:
            first, second = (f"NPU {d.card_id} chip {d.chip_id}" for d in (other, device))
            raise NpuSmiParseError(f"npu-smi: {first} and {second} both resolve to physical id {device.physical_id}")
