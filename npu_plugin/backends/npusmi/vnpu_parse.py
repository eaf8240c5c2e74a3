"""Pure parsers for npu-smi's vNPU commands: `info -t template-info`, `info -t info-vnpu`, `info -t
vnpu-mode`, and what `set -t create-vnpu` / `set -t destroy-vnpu` answer.

Text in, data out; nothing here runs a program. Malformed tables raise NpuSmiParseError naming the
command, the line and what was expected. A `set` command npu-smi refused is not malformed: it reads
as a SetOutcome carrying the DCMI code the same refusal has through the library, so both backends
report it alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.vnpu import ChipMode, VnpuTemplate
from npu_plugin.backends.npusmi.parse import line_at, output_opening, parse_error, quoted_line, table_cells
from npu_plugin.errors import NpuSmiParseError

GIB = 1 << 30
TEMPLATE_INFO = "info -t template-info"
INFO_VNPU = "info -t info-vnpu"
VNPU_MODE = "info -t vnpu-mode"
CREATE_VNPU = "set -t create-vnpu"
DESTROY_VNPU = "set -t destroy-vnpu"

_TEMPLATE_HEADER = (["Name", "AICORE", "Memory", "AICPU", "VPC", "VENC", "JPEGD"], ["GB", "PNGD", "VDEC", "JPEGE"])
# info-vnpu's resource columns, in print order, under the names the vNPU model uses.
_RESOURCES = ("aicore", "memory", "aicpu", "vpc", "venc", "vdec", "jpegd", "jpege", "pngd")
_VNPU_HEADER = ["Vnpu ID", "Vgroup ID", "Container ID", "Status", "Template Name"]
_COUNT = re.compile(r"\|?\s*Total number of vnpu:\s*([0-9]{1,4})\s*\|?")
_INT = re.compile(r"[0-9]{1,10}")
_AMOUNT = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")  # printf %g of the driver's floats: 3, 1.5
_FREE_TOTAL = re.compile(r"([0-9]{1,12})/([0-9]{1,12})")
_CONTAINER = re.compile(r"[0-9a-f]{12,16}")
_MODE = re.compile(r"\s*vnpu-mode\s*:\s*(\S+)\s*")
_MODES = {"docker": ChipMode.CONTAINER, "vm": ChipMode.VM}
_STATUS_OK = re.compile(r"Status\s*:\s*OK\b")
_CREATED = re.compile(r"Message\s*:\s*Create vnpu success")
_DESTROYED = re.compile(r"Message\s*:\s*Destroy vnpu ([0-9]{1,10}) success")


@dataclass(frozen=True, slots=True)
class VnpuRow:
    """One existing vNPU as `info -t info-vnpu` lists it; None where npu-smi prints NA."""

    vnpu_id: int
    vgroup_id: int | None
    container_id: str | None  # hex, as printed
    in_use: int | None  # the `Status` column: the driver's is_container_used
    template: str
    line: int


@dataclass(frozen=True, slots=True)
class ChipVnpuTable:
    """`info -t info-vnpu` of one chip: Free and Total per resource (NA ones absent), and the vNPUs.

    Memory is in GB as printed; on 910B npu-smi rounds its Total up to 32 or 64 while Free stays
    raw.
    """

    free: Mapping[str, Decimal]
    total: Mapping[str, Decimal]
    vnpus: tuple[VnpuRow, ...]


@dataclass(frozen=True, slots=True)
class SetOutcome:
    """What a `set -t create-vnpu|destroy-vnpu` run means: success, or a refusal with its DCMI
    code."""

    ok: bool
    code: int  # 0 when ok
    message: str  # npu-smi's own words on one line


# ---------------------------------------------------------------- info -t template-info


def parse_template_info(text: str) -> tuple[VnpuTemplate, ...]:
    """Every template of `info -t template-info`: two rows each, all ten columns (none when the
    table is empty)."""
    lines = text.splitlines()
    at = _template_header(lines)
    templates: list[VnpuTemplate] = []
    seen: dict[str, int] = {}
    index = at + 3
    while index < len(lines) and lines[index].strip().startswith("|"):
        template = _template_pair(lines, index)
        if (first := seen.setdefault(template.name, index + 1)) != index + 1:
            raise parse_error(
                TEMPLATE_INFO, index + 1, f"template {template.name!r} is listed twice (first at line {first})"
            )
        templates.append(template)
        index += 3
    return tuple(templates)


def _template_header(lines: list[str]) -> int:
    index = next((i for i, line in enumerate(lines) if _words(line) == _TEMPLATE_HEADER[0]), None)
    if index is None:
        expected = "no template table header '|Name AICORE Memory AICPU VPC VENC JPEGD|' found"
        raise parse_error(TEMPLATE_INFO, None, f"{expected}; {output_opening(lines)}")
    if index + 1 >= len(lines) or _words(lines[index + 1]) != _TEMPLATE_HEADER[1]:
        raise parse_error(
            TEMPLATE_INFO, index + 2, f"expected the header row 'GB PNGD VDEC JPEGE', got {line_at(lines, index + 1)}"
        )
    if not _is_rule(lines, index + 2, "="):
        raise parse_error(
            TEMPLATE_INFO, index + 3, f"expected a '|=====|' rule under the header, got {line_at(lines, index + 2)}"
        )
    return index


def _template_pair(lines: list[str], index: int) -> VnpuTemplate:
    first = _words(lines[index])
    if len(first) != 7:
        expected = "'|<name> <AICORE> <Memory GB> <AICPU> <VPC> <VENC> <JPEGD>|'"
        raise parse_error(TEMPLATE_INFO, index + 1, f"expected {expected}, got {quoted_line(lines[index])}")
    second = _words(lines[index + 1]) if index + 1 < len(lines) and lines[index + 1].strip().startswith("|") else []
    if len(second) != 3:
        expected = f"the second row of {first[0]} '|<PNGD> <VDEC> <JPEGE>|'"
        raise parse_error(TEMPLATE_INFO, index + 2, f"expected {expected}, got {line_at(lines, index + 1)}")
    if not _is_rule(lines, index + 2, "-"):
        expected = f"a '+-----+' rule closing template {first[0]}"
        raise parse_error(TEMPLATE_INFO, index + 3, f"expected {expected}, got {line_at(lines, index + 2)}")
    name, aicore, memory, aicpu, vpc, venc, jpegd = first
    pngd, vdec, jpege = second
    row, next_row = index + 1, index + 2
    uses = {
        "aicpu": _amount(aicpu, row, "AICPU"),
        "vpc": _amount(vpc, row, "VPC"),
        "venc": _amount(venc, row, "VENC"),
        "vdec": _amount(vdec, next_row, "VDEC"),
        "jpegd": _amount(jpegd, row, "JPEGD"),
        "jpege": _amount(jpege, next_row, "JPEGE"),
        "pngd": _amount(pngd, next_row, "PNGD"),
    }
    return VnpuTemplate(
        name=name,
        aicore=int(_amount(aicore, row, "AICORE", integer=True)),
        memory=int(_amount(memory, row, "Memory (GB)", integer=True)) * GIB,
        uses={resource: amount for resource, amount in uses.items() if amount},
    )


def _amount(word: str, line: int, column: str, *, integer: bool = False) -> Decimal:
    pattern = _INT if integer else _AMOUNT
    if not pattern.fullmatch(word):
        kind = "a whole number" if integer else "a number"
        raise parse_error(TEMPLATE_INFO, line, f"expected {column} ({kind}), got {word!r}")
    return Decimal(word)


# ---------------------------------------------------------------- info -t info-vnpu


def info_vnpu_refusal(text: str) -> ChipMode | None:
    """The mode npu-smi's refusal to list vNPUs implies (it exits 0 and prints one sentence); None
    otherwise."""
    if "is not in docker mode" in text:
        return ChipMode.VM
    if "working in SMP mode" in text:
        return ChipMode.UNSUPPORTED
    return None


def parse_info_vnpu(text: str) -> ChipVnpuTable:
    """Free/Total per resource, `Total number of vnpu: N` and the N vNPU rows of `info -t
    info-vnpu`."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if [w.lower() for w in _words(line)] == list(_RESOURCES)), None)
    if at is None:
        expected = "no resource header '| AICORE Memory AICPU VPC VENC VDEC JPEGD JPEGE PNGD |' found"
        raise parse_error(INFO_VNPU, None, f"{expected}; {output_opening(lines)}")
    if at + 1 >= len(lines) or _words(lines[at + 1]) != ["GB"]:
        raise parse_error(INFO_VNPU, at + 2, f"expected the header row 'GB', got {line_at(lines, at + 1)}")
    if not _is_rule(lines, at + 2, "="):
        raise parse_error(
            INFO_VNPU, at + 3, f"expected a '|=====|' rule under the header, got {line_at(lines, at + 2)}"
        )
    free, total = _free_total(lines, at + 3)
    count, index = _vnpu_count(lines, at + 4)
    vnpus = _vnpu_rows(lines, index, count)
    return ChipVnpuTable(free, total, vnpus)


def _free_total(lines: list[str], index: int) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    words = _words(lines[index]) if index < len(lines) else []
    if len(words) != len(_RESOURCES):
        expected = f"{len(_RESOURCES)} '<free>/<total>' or 'NA/NA' values"
        raise parse_error(INFO_VNPU, index + 1, f"expected {expected}, got {line_at(lines, index)}")
    free: dict[str, Decimal] = {}
    total: dict[str, Decimal] = {}
    for resource, word in zip(_RESOURCES, words, strict=True):
        if word == "NA/NA":
            continue
        if not (found := _FREE_TOTAL.fullmatch(word)):
            raise parse_error(INFO_VNPU, index + 1, f"expected {resource} as '<free>/<total>' or 'NA/NA', got {word!r}")
        free[resource], total[resource] = Decimal(found.group(1)), Decimal(found.group(2))
    return free, total


def _vnpu_count(lines: list[str], index: int) -> tuple[int, int]:
    """N of `Total number of vnpu: N`, and where the rows after it begin."""
    for at in range(index, len(lines)):
        if _is_rule(lines, at, "-"):
            continue
        if found := _COUNT.fullmatch(lines[at].strip()):
            return int(found.group(1)), at + 1
        break
    else:
        at = len(lines)
    raise parse_error(INFO_VNPU, at + 1, f"expected '| Total number of vnpu: <N> |', got {line_at(lines, at)}")


def _vnpu_rows(lines: list[str], index: int, count: int) -> tuple[VnpuRow, ...]:
    rows: list[VnpuRow] = []
    header = False
    for at in range(index, len(lines)):
        line = lines[at].strip()
        if not line or _is_rule(lines, at, "-"):
            continue
        if not line.startswith("|"):
            break
        if table_cells(line) == _VNPU_HEADER:
            header = True
        elif header:
            rows.append(_vnpu_row(table_cells(line), at + 1, line))
        else:
            raise parse_error(
                INFO_VNPU, at + 1, f"expected the header '| Vnpu ID | Vgroup ID | ... |', got {quoted_line(line)}"
            )
    if len(rows) != count:
        last = rows[-1].line if rows else index
        raise parse_error(
            INFO_VNPU, last, f"'Total number of vnpu: {count}' but {len(rows)} vNPU rows follow (truncated?)"
        )
    _check_unique_ids(rows)
    return tuple(rows)


def _vnpu_row(cells: list[str], number: int, line: str) -> VnpuRow:
    if len(cells) != len(_VNPU_HEADER) or not _INT.fullmatch(cells[0]) or not cells[4]:
        expected = "'| <Vnpu ID> | <Vgroup ID> | <Container ID> | <Status> | <Template Name> |'"
        raise parse_error(INFO_VNPU, number, f"expected {expected}, got {quoted_line(line)}")
    vnpu_id, vgroup, container, status, template = cells
    if container != "NA" and not _CONTAINER.fullmatch(container):
        raise parse_error(INFO_VNPU, number, f"expected a hexadecimal Container ID or NA, got {container!r}")
    return VnpuRow(
        vnpu_id=int(vnpu_id),
        vgroup_id=_optional_int(vgroup, number, "Vgroup ID"),
        container_id=None if container == "NA" else container,
        in_use=_optional_int(status, number, "Status"),
        template=template,
        line=number,
    )


def _optional_int(word: str, number: int, column: str) -> int | None:
    if word == "NA":
        return None
    if not _INT.fullmatch(word):
        raise parse_error(INFO_VNPU, number, f"expected {column} (a number or NA), got {word!r}")
    return int(word)


def _check_unique_ids(rows: list[VnpuRow]) -> None:
    seen: dict[int, VnpuRow] = {}
    for row in rows:
        if (first := seen.setdefault(row.vnpu_id, row)) is not row:
            raise parse_error(INFO_VNPU, row.line, f"vNPU {row.vnpu_id} is listed twice (first at line {first.line})")


# ---------------------------------------------------------------- info -t vnpu-mode


def parse_vnpu_mode(text: str) -> ChipMode:
    """`vnpu-mode : docker` → container, `VM` → vm."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if found := _MODE.fullmatch(line):
            if (mode := _MODES.get(found.group(1).lower())) is None:
                raise parse_error(VNPU_MODE, number, f"expected the mode 'docker' or 'VM', got {found.group(1)!r}")
            return mode
    raise parse_error(VNPU_MODE, None, f"no 'vnpu-mode : <docker|VM>' line; {output_opening(lines)}")


# ---------------------------------------------------------------- set -t create-vnpu / destroy-vnpu

# npu-smi's refusals, by the words it prints, and the DCMI code the library gives the same refusal.
# npu-smi's exit status is its own code's low byte, so the words are what tells. Order matters: the
# first match wins.
_REFUSALS: tuple[tuple[str, str, int], ...] = (
    ("both", "is not in docker mode", driver_codes.OPER_NOT_PERMITTED),
    ("both", "working in smp mode", driver_codes.NOT_SUPPORT),
    ("both", "does not support setting", driver_codes.NOT_SUPPORT),
    ("both", "permission denied", driver_codes.OPER_NOT_PERMITTED),
    ("both", "operation not permitted", driver_codes.OPER_NOT_PERMITTED),
    ("create", "insufficient number of", driver_codes.INNER_ERR),
    ("create", "parameter of -", driver_codes.INVALID_PARAMETER),
    ("destroy", "error parameter of -v", driver_codes.DEVICE_NOT_EXIST),
)


def parse_create_vnpu(text: str, exit_status: int) -> SetOutcome:
    """`set -t create-vnpu`: `Status : OK` / `Message : Create vnpu success`, or a refusal."""
    if exit_status == 0 and _STATUS_OK.search(text):
        if not _CREATED.search(text):
            raise NpuSmiParseError(
                f"npu-smi {CREATE_VNPU}: 'Status : OK' without 'Create vnpu success': {_one_line(text)}"
            )
        return SetOutcome(ok=True, code=0, message="Create vnpu success")
    return _refusal("create", text, exit_status)


def parse_destroy_vnpu(text: str, exit_status: int, vnpu_id: int) -> SetOutcome:
    """`set -t destroy-vnpu`: `Message : Destroy vnpu <id> success` for the id asked, or a refusal;
    npu-smi says `Error parameter of -v.` for an id the chip does not have."""
    if exit_status == 0 and _STATUS_OK.search(text):
        found = _DESTROYED.search(text)
        if found is None or int(found.group(1)) != vnpu_id:
            expected = f"'Destroy vnpu {vnpu_id} success'"
            raise NpuSmiParseError(f"npu-smi {DESTROY_VNPU}: 'Status : OK' without {expected}: {_one_line(text)}")
        return SetOutcome(ok=True, code=0, message=found.group(0).split(":", 1)[1].strip())
    return _refusal("destroy", text, exit_status)


def _refusal(command: str, text: str, exit_status: int) -> SetOutcome:
    said = _one_line(text)
    lowered = said.lower()
    code = next(
        (code for where, words, code in _REFUSALS if where in ("both", command) and words in lowered),
        driver_codes.INNER_ERR,
    )
    status = f" (exit status {exit_status})" if exit_status else ""
    return SetOutcome(ok=False, code=code, message=f"{said or 'no output'}{status}")


# ---------------------------------------------------------------- shared


def _words(line: str) -> list[str]:
    return line.strip().strip("|+").split()


def _is_rule(lines: list[str], index: int, fill: str) -> bool:
    """`+-----+`, `|=====|` or `+=====+`."""
    if index >= len(lines):
        return False
    body = lines[index].strip()
    return len(body) > 2 and body[0] in "+|" and body[-1] in "+|" and set(body[1:-1]) == {fill}


def _one_line(text: str) -> str:
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())[:300]
