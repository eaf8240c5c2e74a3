"""`--fault-policy FILE` read into a FaultPolicy (pure: text in, policy or one error line out).

The file is a YAML list of rules, each `{codes: [...], effect: ...}`: codes as integers
(`0x80E01801`) or hex strings (`"80E01801"`), 0 to 0xFFFFFFFF; effect one of None, NoSchedule,
NoExecute. An empty file is the default policy (every fault taint's effect is None).
"""

from __future__ import annotations

from typing import Any

import yaml

from npu_plugin.ascend.device import parse_fault_code
from npu_plugin.dra.taints import Effect, FaultPolicy, FaultRule
from npu_plugin.errors import ConfigError, clipped

_RULE_FIELDS = ("codes", "effect")


def parse_fault_policy(text: str, source: str) -> FaultPolicy:
    """The policy in `text`; ConfigError naming `source`, the line and the rule otherwise."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise ConfigError(f"{source}:{line}: not valid YAML: {problem}") from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"):
        return FaultPolicy()
    if not isinstance(root, yaml.SequenceNode):
        raise _error(source, root, "", "expected a list of {codes: [...], effect: ...} rules")
    return FaultPolicy(tuple(_rule(source, f"[{index}]", node) for index, node in enumerate(root.value)))


def _error(source: str, node: yaml.Node, path: str, problem: str) -> ConfigError:
    where = f" {path}:" if path else ""
    return ConfigError(f"{source}:{node.start_mark.line + 1}:{where} {problem}")


def _rule(source: str, path: str, node: yaml.Node) -> FaultRule:
    if not isinstance(node, yaml.MappingNode):
        raise _error(source, node, path, "expected a mapping {codes: [...], effect: ...}")
    fields: dict[str, yaml.Node] = {}
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else ""
        if name not in _RULE_FIELDS:
            raise _error(source, key, path, f"unknown field {clipped(repr(name))} (allowed: codes, effect)")
        if name in fields:
            raise _error(source, key, f"{path}.{name}", "given twice")
        fields[name] = value
    for name in _RULE_FIELDS:
        if name not in fields:
            raise _error(source, node, f"{path}.{name}", "required")
    codes = fields["codes"]
    if not isinstance(codes, yaml.SequenceNode) or not codes.value:
        raise _error(source, codes, f"{path}.codes", "expected a non-empty list of fault codes")
    effect = fields["effect"]
    allowed = ", ".join(e.value for e in Effect)
    if not isinstance(effect, yaml.ScalarNode) or effect.value not in {e.value for e in Effect}:
        shown = clipped(repr(effect.value)) if isinstance(effect, yaml.ScalarNode) else "a collection"
        raise _error(source, effect, f"{path}.effect", f"unknown effect {shown} (allowed: {allowed})")
    found = [_code(source, f"{path}.codes[{i}]", item) for i, item in enumerate(codes.value)]
    return FaultRule(frozenset(found), Effect(effect.value))


def _code(source: str, path: str, node: yaml.Node) -> int:
    if not isinstance(node, yaml.ScalarNode):
        raise _error(source, node, path, "expected a fault code")
    value: Any = yaml.SafeLoader("").construct_object(node) if node.tag != "tag:yaml.org,2002:str" else node.value
    try:
        return parse_fault_code(value)
    except ValueError as error:
        number = isinstance(value, int) and not isinstance(value, bool)
        problem = f"code {node.value} is out of range (0 to 0xFFFFFFFF)" if number else str(error)
        raise _error(source, node, path, clipped(problem)) from None
