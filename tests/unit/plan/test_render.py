"""The three outputs of a plan: json and yaml carry the same documented data, the table the same
facts for people."""

from __future__ import annotations

import json

import yaml

from npu_plugin.plan.planner import Finding, NodePlan, Plan, PodRef
from npu_plugin.plan.render import as_data, render

PLAN = Plan(
    "dra",
    (
        NodePlan(
            "n1",
            "device-plugin",
            "dra",
            "ready-after-drain",
            ("1 pod(s) ... must move: ml/p",),
            (PodRef("ml", "p", (("huawei.com/Ascend910", 2),)),),
            ("kubectl cordon n1", "kubectl uncordon n1"),
            False,
        ),
    ),
    (Finding("quota", "warning", "ResourceQuota ml/q limits ...", ("ml/resourcequota/q",)),),
)


def test_json_and_yaml_carry_the_documented_shape() -> None:
    data = as_data(PLAN)
    assert data == {
        "target": "dra",
        "nodes": [
            {
                "name": "n1",
                "mode": "device-plugin",
                "target": "dra",
                "verdict": "ready-after-drain",
                "reasons": ["1 pod(s) ... must move: ml/p"],
                "pods": [{"namespace": "ml", "name": "p", "resources": {"huawei.com/Ascend910": 2}}],
                "steps": ["kubectl cordon n1", "kubectl uncordon n1"],
                "vnpu": False,
            }
        ],
        "findings": [
            {
                "kind": "quota",
                "severity": "warning",
                "message": "ResourceQuota ml/q limits ...",
                "objects": ["ml/resourcequota/q"],
            }
        ],
    }
    assert json.loads(render(PLAN, "json")) == data == yaml.safe_load(render(PLAN, "yaml"))
    assert render(PLAN, "json").count("\n") == 1


def test_the_table() -> None:
    assert render(PLAN, "table").splitlines() == [
        "NODE  MODE           TARGET  VERDICT            NPU PODS",
        "n1    device-plugin  dra     ready-after-drain  1",
        "",
        "n1: ready-after-drain",
        "  - 1 pod(s) ... must move: ml/p",
        "  $ kubectl cordon n1",
        "  $ kubectl uncordon n1",
        "",
        "FINDINGS",
        "warning  quota: ResourceQuota ml/q limits ...",
    ]
    assert render(Plan("dra", (), ()), "table").splitlines() == [
        "NODE  MODE  TARGET  VERDICT  NPU PODS",
        "(no NPU node)",
    ]
