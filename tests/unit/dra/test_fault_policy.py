"""dra/fault_policy.py: `--fault-policy` files, good and bad (one line naming file and line)."""

from __future__ import annotations

import pytest

from npu_plugin.dra.fault_policy import parse_fault_policy
from npu_plugin.dra.taints import Effect, FaultPolicy, FaultRule
from npu_plugin.errors import ConfigError

SOURCE = "--fault-policy /etc/npu/faults.yaml"


def test_codes_as_numbers_or_hex_strings() -> None:
    text = "- codes: [0x80E01801, '80E18402', 17]\n  effect: NoExecute\n- codes: [1]\n  effect: None\n"
    assert parse_fault_policy(text, SOURCE) == FaultPolicy(
        (
            FaultRule(frozenset({0x80E01801, 0x80E18402, 17}), Effect.NO_EXECUTE),
            FaultRule(frozenset({1}), Effect.NONE),
        )
    )


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "[]\n", "~\n"])
def test_an_empty_file_is_the_default_policy(text: str) -> None:
    assert parse_fault_policy(text, SOURCE) == FaultPolicy()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- codes: [1]\n  effect: [\n", ":3: not valid YAML"),
        ("codes: [1]\n", ":1: expected a list of {codes: [...], effect: ...} rules"),
        (
            "- codes: [1]\n  effect: Evict\n",
            ":2: [0].effect: unknown effect 'Evict' (allowed: None, NoSchedule, NoExecute)",
        ),
        ("- codes: [1]\n  effect: None\n- codes: [2]\n", ":3: [1].effect: required"),
        ("- codes: [1, 0x100000000]\n  effect: None\n", ":1: [0].codes[1]: code 0x100000000 is out of range"),
        ("- codes: [-1]\n  effect: None\n", ":1: [0].codes[0]: code -1 is out of range"),
        ("- codes: [xyz]\n  effect: None\n", ":1: [0].codes[0]: 'xyz' is not a fault code (hex digits)"),
        ("- codes: []\n  effect: None\n", ":1: [0].codes: expected a non-empty list of fault codes"),
        ("- codes: [1]\n  effect: None\n  evict: true\n", ":3: [0]: unknown field 'evict' (allowed: codes, effect)"),
        ("- [1]\n", ":1: [0]: expected a mapping {codes: [...], effect: ...}"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_fault_policy(text, SOURCE)
    message = str(caught.value)
    assert message.startswith(SOURCE + expected.split(" ", 1)[0]), message
    assert expected in message and "\n" not in message
