"""A plan as an operator reads it (`table`) or as a CI gate reads it (`json`, `yaml`: the stable
shape documented in docs/migration.md) (pure)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from npu_plugin.plan.planner import Plan

OUTPUTS = ("table", "json", "yaml")


def as_data(plan: Plan) -> dict[str, Any]:
    return {
        "target": plan.target,
        "nodes": [
            {
                "name": node.name,
                "mode": node.mode,
                "target": node.target,
                "verdict": node.verdict,
                "reasons": list(node.reasons),
                "pods": [
                    {"namespace": pod.namespace, "name": pod.name, "resources": dict(pod.resources)}
                    for pod in node.pods
                ],
                "steps": list(node.steps),
                "vnpu": node.vnpu,
            }
            for node in plan.nodes
        ],
        "findings": [
            {"kind": f.kind, "severity": f.severity, "message": f.message, "objects": list(f.objects)}
            for f in plan.findings
        ],
    }


def render(plan: Plan, output: str) -> str:
    if output == "json":
        # One line: the C encoder (an indent would take the pure-Python one, seconds on 5,000 nodes).
        return json.dumps(as_data(plan)) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump(as_data(plan), sort_keys=False, width=1000))
    return _table(plan)


def _table(plan: Plan) -> str:
    rows = [("NODE", "MODE", "TARGET", "VERDICT", "NPU PODS")]
    rows += [(n.name, n.mode, n.target, n.verdict, str(len(n.pods))) for n in plan.nodes]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if not plan.nodes:
        lines.append("(no NPU node)")
    for node in plan.nodes:
        lines.append("")
        lines.append(f"{node.name}: {node.verdict}")
        lines += [f"  - {reason}" for reason in node.reasons]
        lines += [f"  $ {step}" for step in node.steps]
    if plan.findings:
        lines.append("")
        lines.append("FINDINGS")
        lines += [f"{f.severity:<7}  {f.kind}: {f.message}" for f in plan.findings]
    return "\n".join(lines) + "\n"
