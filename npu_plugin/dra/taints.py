"""The taints a device carries in a ResourceSlice (pure): its health level and its fault codes.

`<driver>/health` holds the health level: effect `None` for Warning (the device stays usable and
the reason is visible), `NoSchedule` for Alarm, Critical and Unknown; a device unhealthy because its
RoCE link stayed down (`--link-down-timeout`) while its level is healthy holds `LinkDown`,
`NoSchedule`. `<driver>/fault` lists the
fault codes the backend reports, as 8 hex digits joined by `_`, cut to the 63 characters a taint
value may hold with a `_more` marker; its effect comes from the fault policy (`fault_policy.py`),
`None` by default, so nothing is evicted unless an operator asks for it. A taint whose effect is
`None` is left out on an API server that does not know that effect (before Kubernetes 1.35).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from npu_plugin.ascend.device import Health
from npu_plugin.kubeapi.protocol import DeviceTaint

HEALTH_KEY_SUFFIX = "health"
FAULT_KEY_SUFFIX = "fault"
VALUE_MAX_LENGTH = 63  # a taint value is a label value
LINK_DOWN_VALUE = "LinkDown"
CODE_SEPARATOR = "_"
MORE_MARKER = "more"
NONE_EFFECT_FROM_MINOR = 35


class Effect(StrEnum):
    """Device taint effects, weakest first."""

    NONE = "None"
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"

    @property
    def rank(self) -> int:
        return list(Effect).index(self)


@dataclass(frozen=True, slots=True)
class FaultRule:
    codes: frozenset[int]
    effect: Effect


@dataclass(frozen=True, slots=True)
class FaultPolicy:
    """`--fault-policy`: the effect of the fault taint for the codes it names."""

    rules: tuple[FaultRule, ...] = ()

    def effect_for(self, codes: Iterable[int]) -> Effect:
        """The strongest effect any rule gives one of `codes`; `None` when no rule names one."""
        found = set(codes)
        effects = [rule.effect for rule in self.rules if rule.codes & found]
        return max(effects, key=lambda effect: effect.rank, default=Effect.NONE)


@dataclass(frozen=True, slots=True)
class TaintRules:
    """What the API server accepts (`none_effect`: it knows the effect `None`) and the fault
    policy."""

    none_effect: bool = True
    fault_policy: FaultPolicy = field(default_factory=FaultPolicy)


def format_code(code: int) -> str:
    return f"{code:08X}"


def fault_value(codes: Iterable[int]) -> str:
    """The codes, ascending, as one taint value; cut with a `_more` marker when they do not fit."""
    shown = [format_code(code) for code in sorted(set(codes))]
    whole = CODE_SEPARATOR.join(shown)
    if len(whole) <= VALUE_MAX_LENGTH:
        return whole
    kept: list[str] = []
    for code in shown:
        if len(CODE_SEPARATOR.join([*kept, code, MORE_MARKER])) > VALUE_MAX_LENGTH:
            break
        kept.append(code)
    return CODE_SEPARATOR.join([*kept, MORE_MARKER])


def health_effect(level: Health) -> Effect | None:
    """The health taint's effect for a level; None when the level takes no taint (OK)."""
    if level is Health.OK:
        return None
    return Effect.NONE if level.healthy else Effect.NO_SCHEDULE


def device_taints(
    driver: str, level: Health, healthy: bool, faults: Iterable[int], rules: TaintRules, *, link_down: bool = False
) -> list[DeviceTaint]:
    """A device's taints: health first, then faults. An unhealthy verdict always takes NoSchedule:
    `LinkDown` when its link is the reason, else a device whose last sample read healthy (its node
    vanished) says Unknown."""
    taints: list[DeviceTaint] = []
    health_key = f"{driver}/{HEALTH_KEY_SUFFIX}"
    if not healthy and level.healthy and link_down:
        taints.append({"key": health_key, "value": LINK_DOWN_VALUE, "effect": Effect.NO_SCHEDULE.value})
        level = Health.OK  # said by LinkDown
    elif not healthy and level.healthy:
        level = Health.UNKNOWN
    effect = health_effect(level)
    if effect is not None and (effect is not Effect.NONE or rules.none_effect):
        taints.append({"key": health_key, "value": level.value, "effect": effect.value})
    codes = sorted(set(faults))
    if codes:
        effect = rules.fault_policy.effect_for(codes)
        if effect is not Effect.NONE or rules.none_effect:
            taints.append({"key": f"{driver}/{FAULT_KEY_SUFFIX}", "value": fault_value(codes), "effect": effect.value})
    return taints
