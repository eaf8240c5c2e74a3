"""The fake API server's DeviceClasses per release, over real HTTP: `extendedResourceName` (KEP-5004,
gate DRAExtendedResource) is dropped on write before 1.36, where the gate is off by default, unless
the stored class already has it (the strategy's ratchet); kept from 1.36; list and watch work as the
API server's do for the daemon's own client (resume from a resourceVersion, bookmarks, 410 once
compacted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.client import KubeClient, connect
from tests.integration.test_fakeapi_partitionable import request
from tests.support.fakeapi import FakeKubeAPI

CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def a_class(name: str, resource: str | None = "huawei.com/Ascend910") -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": 'device.driver == "npu.huawei.com"'}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(kubernetes_minor=request.param) as server:
        yield server


@pytest.mark.parametrize(("api", "kept"), [(34, False), (35, False), (36, True), (37, True)], indirect=["api"])
def test_extended_resource_name_is_kept_from_1_36(api: FakeKubeAPI, kept: bool) -> None:
    status, stored = request(api, "POST", CLASSES, a_class("ascend910.extended.npu.huawei.com"))
    assert status == 201
    assert ("extendedResourceName" in stored["spec"]) is kept
    assert stored["spec"]["selectors"] == a_class("x")["spec"]["selectors"]
    assert stored["metadata"]["generation"] == 1
    status, listed = request(api, "GET", CLASSES)
    assert status == 200 and [c["metadata"]["name"] for c in listed["items"]] == ["ascend910.extended.npu.huawei.com"]


@pytest.mark.parametrize("api", [35], indirect=True)
def test_an_update_keeps_the_field_a_stored_class_already_has(api: FakeKubeAPI) -> None:
    """`draExtendedResourceFeatureInUse(oldClass)`: a class stored while the gate was on keeps the
    field through updates after it was turned off."""
    api.put_object("DeviceClass", a_class("c"))  # stored as a gate-on server stored it
    _, current = request(api, "GET", f"{CLASSES}/c")
    current["spec"]["extendedResourceName"] = "huawei.com/Ascend310P"
    status, updated = request(api, "PUT", f"{CLASSES}/c", current)
    assert status == 200
    assert updated["spec"]["extendedResourceName"] == "huawei.com/Ascend310P"
    assert updated["metadata"]["generation"] == 2


def test_the_daemons_client_watches_classes_from_a_resource_version(tmp_path: Path) -> None:
    """What the DeviceClass informer relies on: a watch from the LIST's resourceVersion replays every
    later change in order (cluster-scoped, no selector), ends with a bookmark carrying the newest
    resourceVersion, and a compacted resourceVersion is an in-stream 410 (a relist)."""
    with FakeKubeAPI(kubernetes_minor=37) as api:
        api.write_kubeconfig(tmp_path / "kubeconfig")
        client = KubeClient(connect(tmp_path / "kubeconfig", {}))
        try:
            api.put_object("DeviceClass", a_class("before"))
            listed = client.list_device_classes()
            assert [c["metadata"]["name"] for c in listed.items] == ["before"]
            api.put_object("DeviceClass", a_class("c"))
            api.put_object("DeviceClass", a_class("c", "huawei.com/Ascend310P"))
            api.delete_object("DeviceClass", "c")
            api.limit_watches(0.2)  # end the watch soon after the replay, as its timeout would
            events = list(client.watch_device_classes(listed.resource_version, 300))
            seen = [(e.type, e.object and e.object["spec"].get("extendedResourceName")) for e in events]
            assert seen == [
                ("ADDED", "huawei.com/Ascend910"),
                ("MODIFIED", "huawei.com/Ascend310P"),
                ("DELETED", "huawei.com/Ascend310P"),
                ("BOOKMARK", None),
            ]
            versions = [int(e.resource_version) for e in events]
            assert versions == sorted(versions) and versions[0] > int(listed.resource_version)
            api.compact_history()
            with pytest.raises(KubeApiError) as gone:
                list(client.watch_device_classes(listed.resource_version, 300))
            assert gone.value.status == 410
        finally:
            client.close()
