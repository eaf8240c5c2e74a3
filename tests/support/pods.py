"""Nodes with an address and pods bound to them on the fake API server, for the tests of
MindCluster's pod annotations and --volcano."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.support.fakeapi import FakeKubeAPI

NODE, NODE_ADDRESS = "node-a", "192.168.1.10"


def node_with_address(api: FakeKubeAPI, name: str = NODE, address: str = NODE_ADDRESS) -> None:
    """The Node, with the InternalIP the annotations name as server_id and host_ip."""
    api.put_object(
        "Node", {"metadata": {"name": name}, "status": {"addresses": [{"type": "InternalIP", "address": address}]}}
    )


def put_pod(
    api: FakeKubeAPI,
    name: str,
    *,
    node: str = NODE,
    namespace: str = "ns",
    annotations: Mapping[str, str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    """A pending pod bound to `node`; the stored copy (with its uid)."""
    return api.put_object(
        "Pod",
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": dict(annotations or {}),
                "creationTimestamp": created,
            },
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"},
        },
    )


def annotations_of(api: FakeKubeAPI, name: str, namespace: str = "ns") -> dict[str, str]:
    pod = api.get_object("Pod", name, namespace)
    assert pod is not None, f"no pod {namespace}/{name}"
    return dict(pod["metadata"].get("annotations", {}))
