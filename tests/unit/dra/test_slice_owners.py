"""Which slices of our driver on our node are ours, and the publisher refusing to share the pool."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from npu_plugin.dra.publisher import SlicePublisher
from npu_plugin.dra.slice_owners import describe, foreign_slices, written_by_us
from npu_plugin.inventory.state import Inventory, Owner
from npu_plugin.kubeapi.protocol import ResourceSlice, StoredSlice
from tests.support.fake_devices import profile_devices
from tests.support.kube_fake import InMemoryKube

NODE, DRIVER = "node-a", "npu.huawei.com"
OURS = {"app.kubernetes.io/managed-by": "npu-plugin"}


def stored(name: str, labels: dict[str, str] | None = None, managers: tuple[str, ...] = ()) -> StoredSlice:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if labels is not None:
        metadata["labels"] = labels
    if managers:
        metadata["managedFields"] = [{"manager": m, "operation": "Update"} for m in managers]
    spec = {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1}}
    return {"metadata": metadata, "spec": spec}  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("labels", "managers", "ours"),
    [
        (OURS, (), True),  # written by this release
        (None, ("npu-plugin",), True),  # written before the label: the API server's record says who
        (None, ("npu-plugin", "kubectl-label"), True),  # an operator touched it later
        ({"app.kubernetes.io/managed-by": "mindcluster"}, (), False),
        (None, ("dra-plugin",), False),  # the kubeletplugin helper of another driver
        (None, ("kubectl-client-side-apply",), False),  # `inventory -o resourceslice | kubectl apply`
        ({}, (), False),
    ],
)
def test_ours_by_label_or_by_field_manager(
    labels: dict[str, str] | None, managers: tuple[str, ...], ours: bool
) -> None:
    assert written_by_us(stored("s", labels, managers)) is ours


def test_foreign_slices_are_named_with_pool_and_writer() -> None:
    found = foreign_slices([stored("b", OURS), stored("c", None, ("dra-plugin",)), stored("a")])
    assert [s["metadata"]["name"] for s in found] == ["a", "c"]
    assert describe(found) == f"a (pool {NODE}), c (pool {NODE}, written by dra-plugin)"


def test_the_publisher_writes_nothing_while_another_publishers_slice_is_there() -> None:
    api = InMemoryKube()
    api.add_node(NODE)
    foreign: ResourceSlice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": "mc-"},
        "spec": stored("x")["spec"],
    }
    planted = api.create_slice(foreign)
    inventory = Inventory(profile_devices("atlas-800t-a2"), failure_threshold=1, recovery_threshold=1, owners=Owner.DRA)
    heard: list[tuple[str, ...]] = []

    async def scenario() -> None:
        publisher = SlicePublisher(
            api, inventory, driver=DRIVER, node_name=NODE, unhealthy_policy="remove", on_foreign=heard.append
        )
        publisher._loop = asyncio.get_running_loop()
        publisher.informer.record(planted, planted["metadata"]["name"])
        assert publisher.reconcile() is False
        assert publisher.reconcile() is False  # told once
        api.delete_slice(planted["metadata"]["name"])
        publisher.informer.record(None, planted["metadata"]["name"])
        assert publisher.reconcile() is True
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert heard == [(planted["metadata"]["name"],), ()]
    assert api.calls["create_slice"] == 2  # the planted one, then ours
