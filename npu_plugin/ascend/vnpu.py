"""Virtual NPUs: templates, the vNPUs a chip holds, candidate counts, device names and resource
suffixes (pure).

A chip is split by templates (`vir05_1c_16g`: 5 AI cores, 1 AI CPU, 16 GB). The backend tells, per
chip, which templates exist, the totals of each resource and the vNPUs that already exist; nothing
here is a table of the hardware. Resources are pooled (the driver checks sums, not placement), so
the number of instances of a template an empty chip can hold is the smallest `total // use` over the
resources the template uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

# Resources a template uses besides its AI cores, in the order npu-smi prints them.
TEMPLATE_RESOURCES = ("aicpu", "vpc", "venc", "vdec", "jpegd", "jpege", "pngd")
AICORE = "aicore"
VNPU_IDS = "vnpus"
# The only id the driver reads as "every vNPU of the chip" on destroy; never ours to pass.
DESTROY_ALL_ID = 0xFFFF
# Driver-side names must become DNS labels (`vir10_3c_16g_nm` → `vir10-3c-16g-nm`).
TEMPLATE_NAME = re.compile(r"vir[0-9]{2}(_[0-9a-z]+)*")


class VnpuMode(StrEnum):
    """`--vnpu`: off (whole NPUs only), static (serve existing vNPUs), dynamic (also create them on
    demand)."""

    OFF = "off"
    STATIC = "static"
    DYNAMIC = "dynamic"


class ChipMode(StrEnum):
    """The driver's vNPU mode of a chip: vNPUs are created only in container mode."""

    CONTAINER = "container"
    VM = "vm"
    UNSUPPORTED = "unsupported"


class VnpuOrigin(StrEnum):
    """Who made a vNPU: we (dynamic), the administrator (static, known), or nobody we know of
    (foreign)."""

    DYNAMIC = "dynamic"
    STATIC = "static"
    FOREIGN = "foreign"


@dataclass(frozen=True, slots=True)
class VnpuTemplate:
    """One way to split a chip, as the driver lists it."""

    name: str
    aicore: int
    memory: int  # bytes: the nominal ("show") memory the driver prints
    uses: Mapping[str, Decimal] = field(default_factory=dict)  # TEMPLATE_RESOURCES name -> amount; 0 omitted

    @property
    def dns_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def aicpu(self) -> Decimal:
        return self.uses.get("aicpu", Decimal(0))


@dataclass(frozen=True, slots=True)
class Vnpu:
    """One existing virtual device: /dev/vdavinci<vnpu_id>, carved from chip `physical_id`."""

    physical_id: int
    vnpu_id: int
    template: str


@dataclass(frozen=True, slots=True)
class ChipVnpu:
    """What the backend says about the vNPUs of one chip."""

    physical_id: int
    mode: ChipMode
    totals: Mapping[str, Decimal]  # aicore, and the TEMPLATE_RESOURCES the chip reports (not NA)
    templates: tuple[VnpuTemplate, ...]
    id_range: tuple[int, int]  # inclusive
    dynamic_supported: bool
    vnpus: tuple[Vnpu, ...] = ()

    def template(self, name: str) -> VnpuTemplate | None:
        return next((t for t in self.templates if t.name == name), None)


def default_id_range(physical_id: int, device_type: str) -> tuple[int, int]:
    """vNPU ids of a chip: `phy*16+100` to `+107` on inference chips (310P), to `+115` on training
    ones."""
    first = physical_id * 16 + 100
    return (first, first + (7 if device_type == "Ascend310P" else 15))


def static_only_reason(device_type: str, chips_on_card: int) -> str | None:
    """Why Huawei's support matrix allows only existing (static) vNPUs on a chip; None where the
    driver may also create and destroy them on demand: the 910B and 910C families, and 310P chips
    alone on their card (Atlas 300I Pro, 300V, 300V Pro). A 310P card with two dies is an Atlas 300I
    Duo."""
    if device_type in ("Ascend910B", "Ascend910C") or (device_type == "Ascend310P" and chips_on_card == 1):
        return None
    if device_type == "Ascend310P":
        return "Atlas 300I Duo (two 310P dies per card) supports static vNPUs only"
    if device_type == "Ascend910":
        return "Ascend 910 (910A) supports static vNPUs only"
    return f"{device_type} has no vNPUs"


def counter_totals(chip: ChipVnpu) -> dict[str, Decimal]:
    """The chip's counter set: AI cores, every other reported resource with a total above 0, and
    vNPU ids.

    Memory is not a counter: the driver splits it itself, in proportion to the AI cores.
    """
    totals = {AICORE: chip.totals.get(AICORE, Decimal(0))}
    totals |= {name: chip.totals[name] for name in TEMPLATE_RESOURCES if chip.totals.get(name, Decimal(0)) > 0}
    totals[VNPU_IDS] = Decimal(chip.id_range[1] - chip.id_range[0] + 1)
    return totals


def consumption(chip: ChipVnpu, template: VnpuTemplate) -> dict[str, Decimal]:
    """What one instance of `template` takes from the chip's counter set (only counters the set
    has)."""
    totals = counter_totals(chip)
    used = {AICORE: Decimal(template.aicore)} | {k: v for k, v in template.uses.items() if k in totals and v > 0}
    used[VNPU_IDS] = Decimal(1)
    return used


def candidate_count(chip: ChipVnpu, template: VnpuTemplate) -> int:
    """How many instances of `template` an empty chip holds: the tightest counter decides."""
    totals = counter_totals(chip)
    return min(int(totals[name] // amount) for name, amount in consumption(chip, template).items())


def fits(chip: ChipVnpu, templates: Iterable[str]) -> bool:
    """Whether vNPUs of these templates (names, repeats allowed) fit on the chip together."""
    totals = counter_totals(chip)
    used: dict[str, Decimal] = {}
    for name in templates:
        template = chip.template(name)
        if template is None:
            return False
        for counter, amount in consumption(chip, template).items():
            used[counter] = used.get(counter, Decimal(0)) + amount
    return all(amount <= totals[counter] for counter, amount in used.items())


@dataclass(frozen=True, slots=True)
class Candidate:
    """A vNPU that could be created on an empty chip: the k-th instance of a template."""

    physical_id: int
    template: VnpuTemplate
    index: int

    @property
    def name(self) -> str:
        return candidate_name(self.physical_id, self.template.name, self.index)


def candidates(chip: ChipVnpu, offered: frozenset[str] | None = None) -> list[Candidate]:
    """Every candidate of the chip, smallest first, so the scheduler's first fit packs the lowest
    chip and hands a claim the smallest template that satisfies it. `offered` limits the templates
    (`--vnpu-templates`)."""
    chosen = [t for t in chip.templates if offered is None or t.name in offered]
    chosen.sort(key=lambda t: (t.aicore, t.aicpu, t.name))
    return [
        Candidate(chip.physical_id, template, k) for template in chosen for k in range(candidate_count(chip, template))
    ]


# ---- device names ----

_ID = "(0|[1-9][0-9]{0,5})"
_CANDIDATE = re.compile(f"npu-{_ID}-(vir[0-9]{{2}}(?:-[0-9a-z]+)*)-{_ID}")
_STATIC = re.compile(f"npu-{_ID}-vnpu-{_ID}")


def candidate_name(physical_id: int, template: str, index: int) -> str:
    """`npu-3-vir10-3c-16g-nm-1`: the index-th instance of a template on chip 3."""
    return f"npu-{physical_id}-{template.replace('_', '-')}-{index}"


def static_name(physical_id: int, vnpu_id: int) -> str:
    """`npu-3-vnpu-148`: an existing vNPU served as it is."""
    return f"npu-{physical_id}-vnpu-{vnpu_id}"


@dataclass(frozen=True, slots=True)
class CandidateName:
    physical_id: int
    template_dns: str
    index: int


@dataclass(frozen=True, slots=True)
class StaticName:
    physical_id: int
    vnpu_id: int


def parse_vnpu_name(name: str) -> CandidateName | StaticName | None:
    """The vNPU forms of a DRA device name, strictly (no leading zeros); None for anything else,
    whole NPUs included. Whether the template exists and the index fits is the chip's to say
    (`resolve_candidate`)."""
    if match := _STATIC.fullmatch(name):
        return StaticName(int(match.group(1)), int(match.group(2)))
    if match := _CANDIDATE.fullmatch(name):
        return CandidateName(int(match.group(1)), match.group(2), int(match.group(3)))
    return None


def resolve_candidate(chip: ChipVnpu, name: CandidateName, offered: frozenset[str] | None = None) -> Candidate:
    """The candidate a parsed name stands for on this chip; ValueError naming what does not fit."""
    device = candidate_name(name.physical_id, name.template_dns.replace("-", "_"), name.index)
    template = next((t for t in chip.templates if t.dns_name == name.template_dns), None)
    if template is None or (offered is not None and template.name not in offered):
        raise ValueError(f"{device}: chip npu-{chip.physical_id} offers no template {name.template_dns!r}")
    count = candidate_count(chip, template)
    if name.index >= count:
        raise ValueError(
            f"{device}: chip npu-{chip.physical_id} holds {count} of {template.name} (index 0-{count - 1})"
        )
    return Candidate(chip.physical_id, template, name.index)


# ---- Device Plugin resource names ----

_SUFFIX_TOKENS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"([0-9]+)c"), r"\1cpu"),
    (re.compile(r"([0-9]+)g"), r"\1g"),
    (re.compile(r"nm|ndvpp"), "ndvpp"),
    (re.compile(r"m|dvpp"), "dvpp"),
)


def dp_suffix(template: str) -> str | None:
    """The suffix Ascend's device plugin gives a template's resource: `vir10_3c_16g_nm` →
    `10c.3cpu.16g.ndvpp`, so the resource is `huawei.com/Ascend910-10c.3cpu.16g.ndvpp`. None for a
    name the rule does not cover."""
    head, *rest = template.split("_")
    if not re.fullmatch(r"vir[0-9]{2}", head):
        return None
    parts = [f"{int(head[3:])}c"]
    for token in rest:
        for pattern, replacement in _SUFFIX_TOKENS:
            if pattern.fullmatch(token):
                parts.append(pattern.sub(replacement, token))
                break
        else:
            return None
    return ".".join(parts)


@dataclass(frozen=True, slots=True)
class DpVnpuId:
    """A Device Plugin vNPU id's parts: `Ascend910-5c.1cpu.16g-164-4`."""

    prefix: str
    suffix: str
    vnpu_id: int
    physical_id: int


_DP_VNPU_ID = re.compile(f"(Ascend910|Ascend310P)-([0-9]+c(?:\\.[0-9a-z]+)*)-{_ID}-{_ID}")


def dp_vnpu_id(prefix: str, suffix: str, vnpu_id: int, physical_id: int) -> str:
    """Ascend's id of a vNPU in Device Plugin mode, `<prefix>-<suffix>-<vnpuId>-<physicalId>`."""
    return f"{prefix}-{suffix}-{vnpu_id}-{physical_id}"


def parse_dp_vnpu_id(device_id: str) -> DpVnpuId | None:
    """The parts of a Device Plugin vNPU id, strictly (no leading zeros); None for anything else."""
    if match := _DP_VNPU_ID.fullmatch(device_id):
        return DpVnpuId(match.group(1), match.group(2), int(match.group(3)), int(match.group(4)))
    return None


def format_counter(value: Decimal) -> str:
    """A counter value as a canonical Kubernetes quantity: 20 → `20`, 1.5 → `1500m`."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


@dataclass(frozen=True, slots=True)
class VnpuChips:
    """Each chip's vNPU facts, the chips split on demand (`dynamic`) and the templates offered there
    (None: all). A chip with vNPUs that is not dynamic serves them as they are; a chip without facts
    or vNPUs is offered whole."""

    chips: Mapping[int, ChipVnpu]
    dynamic: frozenset[int] = frozenset()
    offered: frozenset[str] | None = None
