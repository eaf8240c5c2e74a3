"""What the planner decides from what could not be read (pure: snapshots built by hand)."""

from __future__ import annotations

import pytest

from npu_plugin.plan.planner import UnknownNodeError, make_plan
from npu_plugin.plan.snapshot import NodeInfo, ServerInfo, Snapshot, Unreadable

NODE = NodeInfo("n1", "device-plugin", (1, 36), True, False, (("huawei.com/Ascend910", 8),))


def snapshot(**fields: object) -> Snapshot:
    found = Snapshot(driver="npu.huawei.com", server=ServerInfo((1, 36), ("v1",)), nodes=[NODE])
    for name, value in fields.items():
        setattr(found, name, value)
    return found


def test_an_unknown_node_is_named() -> None:
    with pytest.raises(UnknownNodeError, match=r"^node n2 does not exist$"):
        make_plan(snapshot(), "dra", ["n1", "n2"])


def test_without_nodes_nothing_is_planned_and_nothing_is_called_unknown() -> None:
    plan = make_plan(snapshot(nodes=[], unreadable=[Unreadable("nodes", "cannot list nodes: ...")]), "dra", ["n1"])
    assert plan.nodes == () and not plan.ready
    assert [(f.kind, f.severity) for f in plan.findings] == [("unreadable", "error")]
    assert plan.findings[0].message == "cannot list nodes: ...; not made: every node verdict"


def test_an_old_api_server_is_an_error_toward_dra_only() -> None:
    old = snapshot(server=ServerInfo((1, 33), ()))
    dra = make_plan(old, "dra")
    assert [f.message for f in dra.findings if f.kind == "version-floor"] == [
        "the API server is 1.33; DRA (resource.k8s.io/v1) needs 1.34 or newer"
    ]
    assert (
        "the API server does not serve resource.k8s.io/v1 (Kubernetes 1.34+): upgrade it first" in dra.nodes[0].reasons
    )
    assert not [f for f in make_plan(old, "device-plugin").findings if f.kind == "version-floor"]
