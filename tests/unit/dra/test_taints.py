"""dra/taints.py: the health and fault taints of a device, bounded to what the API accepts."""

from __future__ import annotations

import re

import pytest

from npu_plugin.ascend.device import Health
from npu_plugin.dra.taints import (
    VALUE_MAX_LENGTH,
    Effect,
    FaultPolicy,
    FaultRule,
    TaintRules,
    device_taints,
    fault_value,
)

DRIVER = "npu.huawei.com"
# A taint value is a label value: at most 63 characters, alphanumerics with -_. inside.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
EVICT = FaultPolicy((FaultRule(frozenset({0x80E01801}), Effect.NO_EXECUTE),))


@pytest.mark.parametrize(
    ("level", "healthy", "rules", "expected"),
    [
        (Health.OK, True, TaintRules(), []),
        (Health.WARNING, True, TaintRules(), [("health", "Warning", "None")]),
        (Health.WARNING, True, TaintRules(none_effect=False), []),
        (Health.ALARM, False, TaintRules(), [("health", "Alarm", "NoSchedule")]),
        (Health.CRITICAL, False, TaintRules(none_effect=False), [("health", "Critical", "NoSchedule")]),
        (Health.UNKNOWN, False, TaintRules(), [("health", "Unknown", "NoSchedule")]),
        # A device whose node vanished while its last sample read OK.
        (Health.OK, False, TaintRules(), [("health", "Unknown", "NoSchedule")]),
    ],
)
def test_the_health_taint_follows_the_level(
    level: Health, healthy: bool, rules: TaintRules, expected: list[tuple[str, str, str]]
) -> None:
    taints = device_taints(DRIVER, level, healthy, (), rules)
    assert [(t["key"].split("/")[1], t.get("value"), t["effect"]) for t in taints] == expected


@pytest.mark.parametrize(
    ("level", "healthy", "expected"),
    [
        (Health.OK, False, [("health", "LinkDown", "NoSchedule")]),
        (Health.WARNING, False, [("health", "LinkDown", "NoSchedule")]),  # the reason it is unhealthy
        (Health.CRITICAL, False, [("health", "Critical", "NoSchedule")]),  # the level says more
        (Health.OK, True, []),  # a record that only read a link down is no verdict
    ],
)
def test_a_link_down_device_says_linkdown(level: Health, healthy: bool, expected: list[tuple[str, str, str]]) -> None:
    taints = device_taints(DRIVER, level, healthy, (), TaintRules(none_effect=False), link_down=True)
    assert [(t["key"].split("/")[1], t.get("value"), t["effect"]) for t in taints] == expected
    assert all(LABEL_VALUE.fullmatch(t.get("value", "")) for t in taints)


@pytest.mark.parametrize(
    ("codes", "policy", "rules", "expected"),
    [
        ((), FaultPolicy(), TaintRules(), None),
        ((0x80E18402, 0x80E01801), FaultPolicy(), TaintRules(), ("80E01801_80E18402", "None")),
        ((0x80E01801,), EVICT, TaintRules(), ("80E01801", "NoExecute")),
        ((0x1, 0x80E01801), EVICT, TaintRules(none_effect=False), ("00000001_80E01801", "NoExecute")),
        ((0x1,), EVICT, TaintRules(none_effect=False), None),  # default effect None, unknown before 1.35
    ],
)
def test_fault_codes_make_the_fault_taint(
    codes: tuple[int, ...], policy: FaultPolicy, rules: TaintRules, expected: tuple[str, str] | None
) -> None:
    rules = TaintRules(none_effect=rules.none_effect, fault_policy=policy)
    taints = [t for t in device_taints(DRIVER, Health.OK, True, codes, rules) if t["key"] == f"{DRIVER}/fault"]
    assert [(t.get("value"), t["effect"]) for t in taints] == ([expected] if expected else [])


def test_the_strongest_effect_of_the_matching_rules_wins() -> None:
    policy = FaultPolicy(
        (
            FaultRule(frozenset({1, 2}), Effect.NO_SCHEDULE),
            FaultRule(frozenset({2}), Effect.NO_EXECUTE),
            FaultRule(frozenset({3}), Effect.NONE),
        )
    )
    assert [policy.effect_for(c) for c in ([1], [2], [3], [4], [1, 3])] == [
        Effect.NO_SCHEDULE,
        Effect.NO_EXECUTE,
        Effect.NONE,
        Effect.NONE,
        Effect.NO_SCHEDULE,
    ]


@pytest.mark.parametrize("count", [1, 6, 7, 8, 128])
def test_long_code_lists_are_cut_with_a_marker_and_stay_a_valid_value(count: int) -> None:
    value = fault_value(range(0x80E00000, 0x80E00000 + count))
    assert len(value) <= VALUE_MAX_LENGTH and LABEL_VALUE.fullmatch(value)
    codes = value.split("_")
    if count <= 7:  # 7 codes of 8 digits and 6 separators: 62 characters
        assert len(codes) == count and "more" not in codes
    else:
        assert codes[-1] == "more" and codes[:-1] == [f"{0x80E00000 + i:08X}" for i in range(len(codes) - 1)]


def test_duplicate_codes_count_once() -> None:
    assert fault_value([5, 5, 3]) == "00000003_00000005"
