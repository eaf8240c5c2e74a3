"""Simulated Ascend hosts for the backend tests: a fake libdcmi.so (compiled from
tests/fakedcmi/fake_dcmi.c) with its host description, and a fake `npu-smi` shell script answering
from files beside it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).parents[1] / "fakedcmi" / "fake_dcmi.c"
CONFIG_ENV = "FAKE_DCMI_CONFIG"
NPU_SMI_FIXTURES = Path(__file__).parents[1] / "fixtures" / "npu-smi"
# The hccn_tool of a backend whose test gives it none: not the host's (on PATH or in the driver's
# tools), which would answer device IPs of its own; so the IPs are unknown, on every host.
NO_HCCN_TOOL = "/nonexistent/npu-plugin-tests/hccn_tool"

# Answers `info`, `info -m`, `info -t topo` and the vNPU commands from files beside it, so tests can
# rewrite them: `template-info-<card>.txt`, `info-vnpu-<card>-<chip>.txt`, `vnpu-mode.txt`,
# `create-vnpu.txt`, `destroy-vnpu.txt` (a missing file makes the query fail as an unsupported one
# does). `<name>.status` beside `<name>.txt` makes that query exit with the status it holds. `set`
# command lines are appended to set.log.
FAKE_NPU_SMI = """#!/bin/sh
dir=$(dirname "$0")
case "$*" in
  "info") name=info ;;
  "info -m") name=mapping ;;
  "info -t topo") name=topo ;;
  "info -t vnpu-mode") name=vnpu-mode ;;
  "info -t template-info -i "*) name="template-info-$5" ;;
  "info -t info-vnpu -i "*" -c "*) name="info-vnpu-$5-$7" ;;
  "info -t health -i "*" -c "*) name="health-$5-$7" ;;
  "info -t spod-info -i "*" -c "*) name="spod-info-$5-$7" ;;
  "set -t create-vnpu "*|"set -t destroy-vnpu "*) name=$3; echo "$*" >> "$dir/set.log" ;;
  *) echo "npu-smi: unknown command: $*" >&2; exit 2 ;;
esac
if [ -f "$dir/$name.status" ]; then cat "$dir/$name.txt"; exit "$(cat "$dir/$name.status")"; fi
cat "$dir/$name.txt"
"""


# hccn_tool answering `-i N -ip -g` and `-i N -net_health -g` from `ip-N.txt` and `net_health-N.txt`
# beside it (a missing file: the query fails, as on a die without
# a RoCE port); each run is appended to runs.log.
FAKE_HCCN_TOOL = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/runs.log"
case "$*" in
  "-i "*" -ip -g"|"-i "*" -net_health -g") name="${3#-}-$2" ;;
  *) echo "hccn_tool: unknown command: $*" >&2; exit 2 ;;
esac
if [ ! -f "$dir/$name.txt" ]; then echo "hccn_tool: device $2: no such device or not supported" >&2; exit 1; fi
cat "$dir/$name.txt"
"""


def fake_hccn_tool(directory: Path, ips: dict[int, str | None] | None = None) -> Path:
    """A fake hccn_tool in `directory`; `ips` writes `hccn_tool -i N -ip -g`'s answers (None: the
    query fails)."""
    directory.mkdir(parents=True, exist_ok=True)
    for physical_id, ip in (ips or {}).items():
        if ip is not None:
            (directory / f"ip-{physical_id}.txt").write_text(f"ipaddr:{ip}\nnetmask:255.255.255.0\n")
    return script(directory / "hccn_tool", FAKE_HCCN_TOOL)


class CompilerMissingError(RuntimeError):
    """gcc is needed to build the fake DCMI library."""


def build(out_dir: Path, *, legacy: bool = False) -> Path:
    """Compile fake_dcmi.c into out_dir/libdcmi.so; legacy drops the symbols old drivers lack."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise CompilerMissingError("gcc not found on PATH: the DCMI backend tests compile a fake libdcmi.so")
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / "libdcmi.so"
    flags = ["-DFAKE_DCMI_LEGACY"] if legacy else []
    command = [gcc, "-Wall", "-Wextra", "-Werror", "-O1", "-shared", "-fPIC", *flags, "-o", str(library)]
    result = subprocess.run([*command, str(SOURCE)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building the fake libdcmi.so failed:\n{result.stderr}")
    return library


@dataclass
class FakeDie:
    """One `card ...` line of the fake's config."""

    card: int
    dev: int
    logic: int
    phy: int
    chip: str = "910B3"
    health: int = 0
    hbm_mb: int | None = 65536
    ddr_mb: int | None = None
    aicore: int = 20
    bus: str | None = None
    npu_name: str | None = None
    board: int | None = None
    faults: str | None = None  # "0x80E01801,0x80E18402", or "many:N" for N codes
    ip: str | None = None  # the RoCE port's address
    net_health: int | None = None  # dcmi_get_device_network_health's result
    spod: str | None = None  # "super pod id,server index,chassis id"

    def line(self) -> str:
        words = [f"card {self.card} dev {self.dev} logic {self.logic} phy {self.phy} chip {self.chip}"]
        words.append(f"health {self.health} aicore {self.aicore}")
        optional = {
            "hbm_mb": self.hbm_mb,
            "ddr_mb": self.ddr_mb,
            "bus": self.bus,
            "npu_name": self.npu_name,
            "faults": self.faults,
            "ip": self.ip,
            "net_health": self.net_health,
            "spod": self.spod,
        }
        words += [f"{key} {value}" for key, value in optional.items() if value is not None]
        if self.board is not None:
            words.append(f"board {self.board:#x}")
        return " ".join(words)


@dataclass(frozen=True)
class FakeResources:
    """A chip's vNPU totals or what a template takes, as DCMI reports them; -1 is NA (aicpu 0xFFFF,
    media -1.0)."""

    aic: int
    aicpu: int
    mem_mb: int
    vpc: int
    venc: int
    vdec: int
    jpegd: int
    jpege: int
    pngd: int

    def words(self) -> str:
        return " ".join(f"{name} {value}" for name, value in vars(self).items()).replace("mem_mb", "mem")


@dataclass(frozen=True)
class FakeTemplate:
    """A template: what a vNPU of it is given (DCMI), and the memory npu-smi's template-info shows
    (GB)."""

    name: str
    uses: FakeResources
    shown_gb: int


@dataclass
class FakeHost:
    """The whole config file: dies, driver version, topology, injected failures and vNPUs."""

    dies: list[FakeDie]
    driver: str | None = "24.1.rc2"
    topo_groups: list[tuple[int, list[int]]] = field(default_factory=list)
    topo_default: int | None = None
    fails: list[str] = field(default_factory=list)
    hang: tuple[str, Path] | None = None  # this call blocks while this file exists
    vnpu_mode: int | None = None  # 0 container, 1 VM
    vnpu_totals: dict[int, FakeResources] = field(default_factory=dict)  # by physical id
    vnpu_templates: list[FakeTemplate] = field(default_factory=list)
    vnpus: list[tuple[int, int, str]] = field(default_factory=list)  # physical id, vNPU id, template

    def die(self, phy: int) -> FakeDie:
        return next(d for d in self.dies if d.phy == phy)

    def render(self) -> str:
        lines = ["# written by tests/support/fake_hardware.py", *(d.line() for d in self.dies)]
        if self.driver is not None:
            lines.append(f"driver {self.driver}")
        lines += [f"topo_group {kind} {' '.join(map(str, phys))}" for kind, phys in self.topo_groups]
        if self.topo_default is not None:
            lines.append(f"topo_default {self.topo_default}")
        lines += [f"fail {spec}" for spec in self.fails]
        if self.hang is not None:
            lines.append(f"hang {self.hang[0]} {self.hang[1]}")
        return "\n".join(lines + self._vnpu_lines()) + "\n"

    def _vnpu_lines(self) -> list[str]:
        lines = [] if self.vnpu_mode is None else [f"vnpu_mode {self.vnpu_mode}"]
        for phy, total in self.vnpu_totals.items():
            die = self.die(phy)
            lines.append(f"vnpu_total card {die.card} dev {die.dev} {total.words()}")
        lines += [f"vnpu_template name {t.name} {t.uses.words()}" for t in self.vnpu_templates]
        for phy, vnpu_id, template in self.vnpus:
            die = self.die(phy)
            lines.append(f"vnpu card {die.card} dev {die.dev} id {vnpu_id} template {template}")
        return lines

    def write(self, path: Path) -> None:
        path.write_text(self.render())


def fake_npu_smi(directory: Path, info: str, mapping: str | None = None, topo: str | None = None) -> Path:
    """A fake npu-smi in `directory` answering with the named fixture files
    (tests/fixtures/npu-smi)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in (("info", info), ("mapping", mapping), ("topo", topo)):
        if source is not None:
            (directory / f"{name}.txt").write_text((NPU_SMI_FIXTURES / source).read_text())
    return script(directory / "npu-smi", FAKE_NPU_SMI)


def script(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(0o755)
    return path


# ---- the same host as npu-smi prints it (the A3 layout: `Chip  Phy-ID` rows, two dies per card)

_HEALTH_WORDS = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}
_TOPO_WORDS = {0: "X", 1: "SYS", 2: "PHB", 3: "HCCS", 4: "PXB", 5: "PIX", 6: "SIO", 7: "HCCS_SW"}
_RULE = "+" + "-" * 96 + "+"
_CARD_RULE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"


def _row(first: str, second: str, third: str) -> str:
    return f"| {first:<26}| {second:<14}| {third:<51}|"


def npu_smi_info(host: FakeHost) -> str:
    """`npu-smi info` of an A3 host, in the layout npu-smi 24.1 prints (dies in card, then chip
    order)."""
    version = host.driver or "24.1.rc3"
    lines = [
        _RULE,
        f"| {f'npu-smi {version}':<33}{f'Version: {version}':<62}|",
        "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+",
        _row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
        _row("Chip  Phy-ID", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        _CARD_RULE,
    ]
    dies = sorted(host.dies, key=lambda d: (d.card, d.dev))
    for index, die in enumerate(dies):
        power = "182.0" if die.dev == 0 else "-"
        lines.append(
            _row(
                f"{die.card:<5} {die.chip}", _HEALTH_WORDS.get(die.health, "UNKNOWN"), f"{power:<11} 36{'':16}0    / 0"
            )
        )
        hbm = f"3402 / {die.hbm_mb}" if die.hbm_mb is not None else "NA / NA"
        lines.append(_row(f"{die.dev:<5} {die.phy}", die.bus or "NA", f"0           0    / 0          {hbm}"))
        last_of_card = index + 1 == len(dies) or dies[index + 1].card != die.card
        lines.append(_CARD_RULE if last_of_card else _RULE)
    return "\n".join(lines) + "\n"


def npu_smi_mapping(host: FakeHost) -> str:
    """`npu-smi info -m` of an A3 host: TAB-led rows with a `Chip Phy-ID` column and each card's
    Mcu."""
    columns = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name")
    lines = ["\t" + "".join(f"{name:<31}" for name in columns)]
    for card in sorted({d.card for d in host.dies}):
        dies = sorted((d for d in host.dies if d.card == card), key=lambda d: d.dev)
        rows = [(card, d.dev, d.logic, d.phy, d.chip) for d in dies] + [(card, len(dies), "-", "-", "Mcu")]
        lines += ["\t" + "".join(f"{value!s:<31}" for value in row).rstrip() for row in rows]
    return "\n".join(lines) + "\n"


def npu_smi_topology(host: FakeHost) -> str:
    """`npu-smi info -t topo`: the link matrix by logic id, as the fake libdcmi answers pair by
    pair."""
    dies = sorted(host.dies, key=lambda d: d.logic)

    def link(first: FakeDie, second: FakeDie) -> str:
        if first is second:
            return "X"
        shared = (kind for kind, phys in host.topo_groups if {first.phy, second.phy} <= set(phys))
        return _TOPO_WORDS[next(shared, host.topo_default if host.topo_default is not None else 1)]

    lines = ["\t   " + "".join(f"{f'NPU{d.logic}':<11}" for d in dies) + "CPU Affinity"]
    lines += [f"{f'NPU{a.logic}':<11}" + "".join(f"{link(a, b):<11}" for b in dies) + "0-23" for a in dies]
    return "\n".join(lines) + "\n"


def npu_smi_template_info(host: FakeHost) -> str:
    """`npu-smi info -t template-info`, in the driver's printf formats (npu_card_info.c
    printf_template_info)."""
    rule = "+" + "-" * 90 + "+"
    lines = [
        rule,
        f"|{'NPU instance template info is:':<90}|",
        "|Name                AICORE    Memory    AICPU     VPC            VENC           JPEGD     |",
        "|                               GB                 PNGD           VDEC           JPEGE     |",
        "|" + "=" * 90 + "|",
    ]
    for t in host.vnpu_templates:
        u = t.uses
        lines.append(f"|{t.name:<19} {u.aic:<9} {t.shown_gb:<9} {u.aicpu:<9} {u.vpc:<14} {u.venc:<14} {u.jpegd:<10}|")
        lines += [f"|{'':<49} {u.pngd:<14} {u.vdec:<14} {u.jpege:<10}|", rule]
    return "\n".join(lines) + "\n"


def npu_smi_info_vnpu(host: FakeHost, phy: int) -> str:
    """`npu-smi info -t info-vnpu` of one die, in the driver's printf formats (npu_chip_info.c):
    Free/Total from the totals less the templates of its vNPUs, the 910B memory total rounded up to
    32 or 64 GB."""
    total = host.vnpu_totals[phy]
    vnpus = [(vnpu_id, name) for die, vnpu_id, name in host.vnpus if die == phy]
    templates = {t.name: t.uses for t in host.vnpu_templates}
    names = ("aic", "mem_mb", "aicpu", "vpc", "venc", "vdec", "jpegd", "jpege", "pngd")

    def cell(name: str) -> str:
        whole = getattr(total, name)
        if whole < 0:
            return "NA/NA"
        free = whole - sum(getattr(templates[template], name) for _, template in vnpus)
        if name == "mem_mb":
            shown = whole >> 10
            return f"{free >> 10}/{32 if shown < 32 else 64 if 32 < shown < 64 else shown}"
        return f"{free}/{whole}"

    rule = "+" + "-" * 79 + "+"
    lines = [
        rule,
        f"| {'NPU resource static info as follow:':<78}|",
        "| Format:Free/Total                   NA: Currently, query is not supported.    |",
        "| AICORE    Memory    AICPU    VPC    VENC    VDEC    JPEGD    JPEGE    PNGD    |",
        f"|{'GB':>14}{'':<65}|",
        "|" + "=" * 79 + "|",
        "| {:<9} {:<9} {:<8} {:<6} {:<7} {:<7} {:<8} {:<8} {:<8}|".format(*map(cell, names)),
        rule,
        f"| Total number of vnpu: {len(vnpus):<2}{'':<54}|",
        rule,
        "|  Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name       |",
    ]
    for group, (vnpu_id, template) in enumerate(vnpus):
        lines += [rule, f"|  {vnpu_id:<4}     |  {group:<12}  |  {'0' * 12}  |  0 {'':<6}|  {template:<15}     |"]
    return "\n".join([*lines, rule]) + "\n"


def npu_smi_health(die: FakeDie) -> str:
    """`npu-smi info -t health -i <card> -c <chip>` of a die: its level and fault codes."""
    codes = "NA"
    if die.faults and not die.faults.startswith("many:"):
        codes = " ".join(f"{int(code, 0):08X}" for code in die.faults.split(","))
    level = _HEALTH_WORDS.get(die.health, "UNKNOWN")
    return f"\t{'Health Status':<30} : {level}\n\t{'Error Code':<30} : {codes}\n\t{'Error Information':<30} : NA\n"


def npu_smi_for(directory: Path, host: FakeHost) -> Path:
    """A fake npu-smi printing `host`, the host the fake libdcmi.so simulates from the same
    FakeHost."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "info.txt").write_text(npu_smi_info(host))
    (directory / "mapping.txt").write_text(npu_smi_mapping(host))
    (directory / "topo.txt").write_text(npu_smi_topology(host))
    for die in host.dies:
        (directory / f"health-{die.card}-{die.dev}.txt").write_text(npu_smi_health(die))
    if host.vnpu_mode is not None:
        (directory / "vnpu-mode.txt").write_text(f"\t{'vnpu-mode':<30} : {('docker', 'VM')[host.vnpu_mode]}\n")
    for phy in host.vnpu_totals:
        die = host.die(phy)
        (directory / f"template-info-{die.card}.txt").write_text(npu_smi_template_info(host))
        (directory / f"info-vnpu-{die.card}-{die.dev}.txt").write_text(npu_smi_info_vnpu(host, phy))
    return script(directory / "npu-smi", FAKE_NPU_SMI)
