"""What each chip serves under `--vnpu`: its vNPU facts from the backend, checked, and whether it is
split on demand (dynamic), serves the vNPUs it has as they are (static), or is offered whole.

The Device Plugin and DRA servers read the chips through `VnpuReader`; the checks and the policy are
pure functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import (
    AICORE,
    TEMPLATE_NAME,
    ChipMode,
    ChipVnpu,
    Vnpu,
    VnpuChips,
    VnpuMode,
    VnpuOrigin,
    VnpuTemplate,
    static_only_reason,
)
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.errors import ConfigError

log = logging.getLogger(__name__)


class Serving(StrEnum):
    """How a chip is served: split on demand, its existing vNPUs as they are, or whole."""

    DYNAMIC = "dynamic"
    STATIC = "static"
    WHOLE = "whole"


@dataclass(frozen=True, slots=True)
class ChipPlan:
    """A chip's checked vNPU facts and how it is served; `reason` says why a chip is not dynamic
    under --vnpu dynamic (None otherwise). `split_on_demand`: whether npu-plugin would split the
    chip were it empty; only there can a vNPU be foreign (on a chip served as it is, every vNPU is
    the administrator's)."""

    chip: ChipVnpu
    serving: Serving
    reason: str | None = None
    foreign: frozenset[int] = frozenset()  # ids of vNPUs npu-plugin did not create on a chip it would split
    split_on_demand: bool = False


def origins(plans: Mapping[int, ChipPlan], ours: frozenset[int]) -> list[tuple[Vnpu, VnpuOrigin]]:
    """Every vNPU with who made it: npu-plugin (`ours`, from the checkpoint), someone else on a chip
    npu-plugin would otherwise split on demand (foreign), or an administrator on a chip served as it
    is (static)."""
    return [
        (
            vnpu,
            VnpuOrigin.DYNAMIC
            if vnpu.vnpu_id in ours
            else VnpuOrigin.FOREIGN
            if vnpu.vnpu_id in plan.foreign
            else VnpuOrigin.STATIC,
        )
        for _physical_id, plan in sorted(plans.items())
        for vnpu in plan.chip.vnpus
    ]


def template_problem(chip: ChipVnpu, template: VnpuTemplate) -> str | None:
    """Why a template the backend lists cannot be offered, or None: its name must become a DNS
    label, it must use AI cores, and its uses must fit the chip's totals (resources the chip does
    not report are not counted)."""
    if not TEMPLATE_NAME.fullmatch(template.name):
        return "its name is not vir<2 digits>[_<lower-case part>...], so it cannot name a device"
    if template.aicore < 1:
        return "it uses no AI core"
    uses = {AICORE: Decimal(template.aicore), **template.uses}
    over = [name for name, amount in uses.items() if name in chip.totals and amount > chip.totals[name]]
    if over:
        return "it uses more than the chip has: " + ", ".join(
            f"{name} {uses[name]} > {chip.totals[name]}" for name in over
        )
    return None


def with_known_templates(chip: ChipVnpu) -> tuple[ChipVnpu, list[str]]:
    """The chip with only the templates it can offer, and a line for each one left out."""
    kept, problems = [], []
    for template in chip.templates:
        if (problem := template_problem(chip, template)) is None:
            kept.append(template)
        else:
            problems.append(f"npu-{chip.physical_id}: template {template.name!r} skipped: {problem}")
    return replace(chip, templates=tuple(kept)), problems


def serving(
    chip: ChipVnpu, mode: VnpuMode, static_reason: str | None, ours: frozenset[int] = frozenset()
) -> tuple[Serving, str | None]:
    """How a (checked) chip is served under `mode`, and why it is not dynamic where --vnpu dynamic
    asks for it.

    A chip with vNPUs is never offered whole. Dynamic needs container mode, the support matrix
    (`static_reason` None and the backend's `dynamic_supported`), a template to offer, and no vNPU
    that we did not create (`ours`: ids the checkpoint records): vNPUs of others are served as they
    are, never destroyed or packed around.
    """
    existing = Serving.STATIC if chip.vnpus else Serving.WHOLE
    if mode is not VnpuMode.DYNAMIC:
        return existing, None
    if chip.mode is not ChipMode.CONTAINER:
        return existing, f"the chip is in {chip.mode} mode; the driver creates vNPUs in container mode only"
    if static_reason is not None or not chip.dynamic_supported:
        return existing, static_reason or "the backend reports that the chip cannot create vNPUs on demand"
    if not chip.templates:
        return existing, "the chip offers no usable template"
    if foreign := sorted(v.vnpu_id for v in chip.vnpus if v.vnpu_id not in ours):
        return Serving.STATIC, f"it holds vNPUs not created by npu-plugin ({', '.join(map(str, foreign))})"
    return Serving.DYNAMIC, None


def unknown_offered(chip: ChipVnpu, offered: frozenset[str]) -> list[str]:
    """Names in --vnpu-templates that the chip does not offer."""
    names = {t.name for t in chip.templates}
    return sorted(offered - names)


class VnpuReader:
    """Reads each chip's vNPU facts from the backend and plans how it is served; each skipped
    template and each reason a chip is not dynamic is logged once, not at every read: once per
    reader, or once for all the readers sharing one `said` set (the lines already logged)."""

    def __init__(
        self,
        backend: VnpuBackend,
        mode: VnpuMode,
        offered: frozenset[str] | None = None,
        on_read: Callable[[list[tuple[Vnpu, VnpuOrigin]]], None] = lambda _vnpus: None,
        said: set[str] | None = None,
    ) -> None:
        self._backend, self._mode, self._offered, self._on_read = backend, mode, offered, on_read
        self._said: set[str] = set() if said is None else said

    def read(self, devices: Sequence[Device], ours: frozenset[int] = frozenset()) -> dict[int, ChipPlan]:
        """A plan for each chip that has vNPU facts (the others are whole NPUs). With --vnpu off,
        nothing: no backend call at all. ConfigError when --vnpu-templates names a template a
        dynamic chip does not offer."""
        if self._mode is VnpuMode.OFF:
            return {}
        plans = {}
        for device in devices:
            raw = self._backend.chip_vnpu(device.physical_id)
            if raw is None:
                continue
            chip, problems = with_known_templates(raw)
            self._say_once(problems)
            chips_on_card = sum(1 for d in devices if d.card_id == device.card_id)
            static_reason = static_only_reason(device.device_type, chips_on_card)
            how, reason = serving(chip, self._mode, static_reason, ours)
            split_on_demand = serving(replace(chip, vnpus=()), self._mode, static_reason)[0] is Serving.DYNAMIC
            foreign = (
                frozenset(v.vnpu_id for v in chip.vnpus if v.vnpu_id not in ours) if split_on_demand else frozenset()
            )
            if (
                how is Serving.DYNAMIC
                and self._offered is not None
                and (unknown := unknown_offered(chip, self._offered))
            ):
                offers = ", ".join(t.name for t in chip.templates)
                raise ConfigError(
                    f"--vnpu-templates {','.join(unknown)}: npu-{device.physical_id} ({device.chip_name}) offers "
                    f"{offers}"
                )
            plans[device.physical_id] = ChipPlan(chip, how, reason, foreign, split_on_demand)
        self._say_reasons(plans, devices)
        self._on_read(origins(plans, ours))
        return plans

    def _say_once(self, lines: Iterable[str]) -> None:
        for line in lines:
            if line not in self._said:
                self._said.add(line)
                log.warning("%s", line)

    def _say_reasons(self, plans: Mapping[int, ChipPlan], devices: Sequence[Device]) -> None:
        """One line per reason, naming the chips and their product, e.g. why a 300I Duo is static
        only."""
        names = {d.physical_id: d.chip_name for d in devices}
        by_reason: dict[str, list[int]] = {}
        for physical_id, plan in plans.items():
            if plan.reason is not None:
                by_reason.setdefault(plan.reason, []).append(physical_id)
        for reason, chips in by_reason.items():
            listed = ", ".join(f"npu-{p} ({names[p]})" for p in chips)
            line = f"--vnpu dynamic: {listed}: no vNPUs on demand: {reason}"
            if line not in self._said:
                self._said.add(line)
                log.info("%s", line, extra={"reason": reason})


def served_chips(
    plans: Mapping[int, ChipPlan],
    offered: frozenset[str] | None = None,
    shared: Callable[[int], bool] = lambda _physical_id: False,
) -> VnpuChips:
    """What the slice builder needs of the plans: each chip's facts and which chips are split on
    demand (never a `shared` one: a shared chip is never split)."""
    dynamic = frozenset(p for p, plan in plans.items() if plan.serving is Serving.DYNAMIC and not shared(p))
    return VnpuChips({p: plan.chip for p, plan in plans.items()}, dynamic, offered)


def published_templates(plans: Mapping[int, ChipPlan], offered: frozenset[str] | None = None) -> set[tuple[int, str]]:
    """The (physical id, template) of the node's vNPU devices: templates offered on dynamic chips,
    and those of existing vNPUs on static ones."""
    pairs = set()
    for physical_id, plan in plans.items():
        if plan.serving is Serving.STATIC:
            pairs |= {(physical_id, v.template) for v in plan.chip.vnpus}
        elif plan.serving is Serving.DYNAMIC:
            pairs |= {(physical_id, t.name) for t in plan.chip.templates if offered is None or t.name in offered}
    return pairs
