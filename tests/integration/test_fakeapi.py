"""The fake API server, driven through the real `kubernetes` client over a real socket."""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from npu_plugin.sim import fakeapi
from tests.support.daemon import wait_until
from tests.support.fakeapi import FakeKubeAPI

DRIVER = "npu.huawei.com"
NODE = "node-a"


@dataclass
class Kube:
    api_client: client.ApiClient
    core: client.CoreV1Api
    resource: client.ResourceV1Api


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(device_taints=True) as server:  # 1.34 with its alpha DRADeviceTaints on
        server.add_node(NODE)
        yield server


def connect(api: FakeKubeAPI, tmp_path: Path) -> client.ApiClient:
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    api_client = config.new_client_from_config(str(kubeconfig))
    api_client.configuration.retries = 0  # so a refused connection surfaces at once
    return api_client


@pytest.fixture
def kube(api: FakeKubeAPI, tmp_path: Path) -> Iterator[Kube]:
    api_client = connect(api, tmp_path)
    yield Kube(api_client, client.CoreV1Api(api_client), client.ResourceV1Api(api_client))
    api_client.close()


def device(index: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"npu-{index}",
        "attributes": {"physicalId": {"int": index}, "chipName": {"string": "910B3"}},
        "capacity": {"memCapacity": {"value": "64Gi"}},
        **extra,
    }


def slice_body(node: str = NODE, driver: str = DRIVER, devices: int = 2, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{driver}-"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [device(i) for i in range(devices)],
        },
    }
    body["spec"].update(spec)
    return body


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


def expect_api_error(code: int, call: Callable[[], object]) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == code, caught.value.body
    status = status_of(caught.value)
    assert status["kind"] == "Status"
    assert status["status"] == "Failure"
    assert status["code"] == code
    return status


# ---- nodes


def test_node_read_returns_the_uid_add_node_reported(api: FakeKubeAPI, kube: Kube) -> None:
    added = api.add_node("node-b", labels={"zone": "z1"})
    node = kube.core.read_node("node-b")
    assert node.metadata.uid == added["metadata"]["uid"]
    assert node.metadata.labels == {"zone": "z1"}


def test_missing_node_is_a_404_status(kube: Kube) -> None:
    status = expect_api_error(404, lambda: kube.core.read_node("nope"))
    assert status["reason"] == "NotFound"
    assert status["message"] == 'nodes "nope" not found'
    assert status["details"] == {"name": "nope", "kind": "nodes"}


# ---- ResourceSlice CRUD


def test_create_with_generate_name_fills_system_fields(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    prefix = f"{NODE}-{DRIVER}-"
    assert created.metadata.name.startswith(prefix)
    assert len(created.metadata.name) == len(prefix) + 5
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.generation == 1
    assert int(created.metadata.resource_version) > 0


def test_create_accepts_a_client_model_as_well_as_a_dict(kube: Kube) -> None:
    model = client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(name="from-model"),
        spec=client.V1ResourceSliceSpec(
            driver=DRIVER,
            node_name=NODE,
            pool=client.V1ResourcePool(name=NODE, generation=0, resource_slice_count=1),
            devices=[client.V1Device(name="npu-0", attributes={"physicalId": client.V1DeviceAttribute(int=0)})],
        ),
    )
    created = kube.resource.create_resource_slice(model)
    assert created.spec.devices[0].attributes["physicalId"].int == 0


def test_duplicate_name_is_409_already_exists(kube: Kube) -> None:
    body = slice_body()
    body["metadata"] = {"name": "fixed"}
    kube.resource.create_resource_slice(body)
    status = expect_api_error(409, lambda: kube.resource.create_resource_slice(body))
    assert status["reason"] == "AlreadyExists"
    assert status["details"] == {"name": "fixed", "group": "resource.k8s.io", "kind": "resourceslices"}


def test_create_with_resource_version_set_is_refused(kube: Kube) -> None:
    body = slice_body()
    body["metadata"]["resourceVersion"] = "7"
    expect_api_error(500, lambda: kube.resource.create_resource_slice(body))


def test_get_and_missing_get(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    assert kube.resource.read_resource_slice(created.metadata.name).metadata.uid == created.metadata.uid
    status = expect_api_error(404, lambda: kube.resource.read_resource_slice("missing"))
    assert status["message"] == 'resourceslices.resource.k8s.io "missing" not found'


def test_list_by_field_selector(api: FakeKubeAPI, kube: Kube) -> None:
    mine = kube.resource.create_resource_slice(slice_body())
    kube.resource.create_resource_slice(slice_body(node="node-b"))
    kube.resource.create_resource_slice(slice_body(driver="other.example.com"))
    listed = kube.resource.list_resource_slice(field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}")
    assert [s.metadata.name for s in listed.items] == [mine.metadata.name]
    assert listed.metadata.resource_version == str(api.resource_version)
    assert len(kube.resource.list_resource_slice(field_selector=f"spec.driver!={DRIVER}").items) == 1
    assert len(kube.resource.list_resource_slice().items) == 3


def test_unsupported_field_selector_is_400(kube: Kube) -> None:
    status = expect_api_error(400, lambda: kube.resource.list_resource_slice(field_selector="spec.bogus=1"))
    assert status["reason"] == "BadRequest"


def test_list_by_label_selector(kube: Kube) -> None:
    labelled = slice_body()
    labelled["metadata"]["labels"] = {"tier": "a"}
    kube.resource.create_resource_slice(labelled)
    kube.resource.create_resource_slice(slice_body())
    assert len(kube.resource.list_resource_slice(label_selector="tier=a").items) == 1
    assert len(kube.resource.list_resource_slice(label_selector="tier in (a,b)").items) == 1
    assert len(kube.resource.list_resource_slice(label_selector="!tier").items) == 1


def test_update_with_stale_resource_version_is_409_conflict(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    fresh = kube.resource.read_resource_slice(created.metadata.name)
    fresh.spec.pool.generation = 1
    updated = kube.resource.replace_resource_slice(created.metadata.name, fresh)
    assert updated.metadata.generation == 2
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    created.spec.pool.generation = 5  # still carries the old resourceVersion
    status = expect_api_error(409, lambda: kube.resource.replace_resource_slice(created.metadata.name, created))
    assert status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]


def test_update_generation_and_no_op_semantics(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    created.metadata.labels = {"x": "y"}
    relabelled = kube.resource.replace_resource_slice(created.metadata.name, created)
    assert relabelled.metadata.generation == 1  # metadata-only change
    again = kube.resource.replace_resource_slice(created.metadata.name, relabelled)
    assert again.metadata.resource_version == relabelled.metadata.resource_version  # nothing changed


def test_update_without_resource_version_is_unconditional_unless_required(
    api: FakeKubeAPI, kube: Kube, tmp_path: Path
) -> None:
    created = kube.resource.create_resource_slice(slice_body()).to_dict(serialize=True)
    del created["metadata"]["resourceVersion"]
    created["spec"]["pool"]["generation"] = 3
    assert kube.resource.replace_resource_slice(created["metadata"]["name"], created).spec.pool.generation == 3
    with FakeKubeAPI(require_resource_version=True) as strict:
        strict_client = client.ResourceV1Api(connect(strict, tmp_path))
        made = strict_client.create_resource_slice(slice_body()).to_dict(serialize=True)
        del made["metadata"]["resourceVersion"]
        status = expect_api_error(422, lambda: strict_client.replace_resource_slice(made["metadata"]["name"], made))
        assert status["details"]["causes"][0]["field"] == "metadata.resourceVersion"
        strict_client.api_client.close()


def test_update_of_a_missing_slice_is_404(kube: Kube) -> None:
    body = slice_body()
    body["metadata"] = {"name": "ghost"}
    expect_api_error(404, lambda: kube.resource.replace_resource_slice("ghost", body))


def test_update_with_name_different_from_url_is_400(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    expect_api_error(400, lambda: kube.resource.replace_resource_slice("other-name", created))


def test_patch_with_a_dict_merges(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    patched = kube.resource.patch_resource_slice(
        created.metadata.name, {"metadata": {"labels": {"a": "b"}}, "spec": {"pool": {"generation": 4}}}
    )
    assert patched.metadata.labels == {"a": "b"}
    assert patched.spec.pool.generation == 4
    assert patched.spec.pool.resource_slice_count == 1
    assert patched.metadata.generation == 2


def test_merge_patch_and_json_patch_content_types(kube: Kube) -> None:
    name = kube.resource.create_resource_slice(slice_body()).metadata.name
    kube.resource.patch_resource_slice(
        name, {"spec": {"pool": {"generation": 2}}}, _content_type="application/merge-patch+json"
    )
    operations = [
        {"op": "replace", "path": "/spec/pool/generation", "value": 9},
        {"op": "remove", "path": "/spec/devices/1"},
    ]
    patched = kube.resource.patch_resource_slice(name, operations)
    assert patched.spec.pool.generation == 9
    assert [d.name for d in patched.spec.devices] == ["npu-0"]
    failing = [{"op": "test", "path": "/spec/pool/generation", "value": 1}]
    expect_api_error(422, lambda: kube.resource.patch_resource_slice(name, failing))


def test_patch_with_stale_resource_version_is_409(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    kube.resource.patch_resource_slice(created.metadata.name, {"spec": {"pool": {"generation": 1}}})
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version}, "spec": {"pool": {"generation": 2}}}
    expect_api_error(409, lambda: kube.resource.patch_resource_slice(created.metadata.name, stale))


def test_delete_answers_with_the_object_then_404(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    deleted = kube.resource.delete_resource_slice(created.metadata.name)
    assert deleted.metadata.uid == created.metadata.uid
    expect_api_error(404, lambda: kube.resource.delete_resource_slice(created.metadata.name))
    expect_api_error(404, lambda: kube.resource.read_resource_slice(created.metadata.name))


def test_delete_with_uid_precondition(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    wrong = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="00000000-0000-0000-0000-000000000000"))
    expect_api_error(409, lambda: kube.resource.delete_resource_slice(created.metadata.name, body=wrong))


def test_delete_collection_by_field_selector(api: FakeKubeAPI, kube: Kube) -> None:
    kube.resource.create_resource_slice(slice_body())
    kube.resource.create_resource_slice(slice_body(node="node-b"))
    kube.resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={NODE}")
    assert [s["spec"]["nodeName"] for s in api.objects("ResourceSlice")] == ["node-b"]


# ---- decoding: unknown fields, types (raw HTTP: client 37 refuses such bodies before sending them)

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def raw(api: fakeapi.FakeKubeAPI, method: str, path: str, body: object = None) -> tuple[int, Any, dict[str, Any]]:
    """One plain HTTP request, as a daemon sending hand-built JSON would make it."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        api.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.headers, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers, json.load(error)


def test_unknown_fields_are_dropped_with_a_warning_by_default(api: FakeKubeAPI) -> None:
    body = slice_body()
    body["spec"]["bogus"] = 1
    body["spec"]["devices"][0]["alsoBogus"] = True
    code, headers, created = raw(api, "POST", SLICES, body)
    assert code == 201
    warnings = headers.get_all("Warning")
    assert sorted(warnings) == [
        '299 - "unknown field \\"spec.bogus\\""',
        '299 - "unknown field \\"spec.devices[0].alsoBogus\\""',
    ]
    assert "bogus" not in created["spec"]
    assert "alsoBogus" not in created["spec"]["devices"][0]


def test_unknown_fields_under_strict_field_validation_are_400(api: FakeKubeAPI) -> None:
    body = slice_body()
    body["spec"]["bogus"] = 1
    code, _, status = raw(api, "POST", SLICES + "?fieldValidation=Strict", body)
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert 'strict decoding error: unknown field "spec.bogus"' in status["message"]


def test_wrong_json_type_is_400(api: FakeKubeAPI) -> None:
    body = slice_body()
    body["spec"]["pool"]["generation"] = "1"
    code, _, status = raw(api, "POST", SLICES, body)
    assert code == 400
    assert "spec.pool.generation" in status["message"]


def test_malformed_quantity_is_400(api: FakeKubeAPI) -> None:
    body = slice_body()
    body["spec"]["devices"][0]["capacity"]["memCapacity"]["value"] = "64 GiB"
    assert raw(api, "POST", SLICES, body)[0] == 400


def test_wrong_api_version_is_400(api: FakeKubeAPI) -> None:
    body = slice_body() | {"apiVersion": "resource.k8s.io/v1beta1"}
    assert raw(api, "POST", SLICES, body)[0] == 400


def test_raw_dict_without_type_meta_is_accepted(api: FakeKubeAPI) -> None:
    body = slice_body()
    del body["apiVersion"], body["kind"]
    code, _, created = raw(api, "POST", SLICES, body)
    assert code == 201
    assert (created["apiVersion"], created["kind"]) == ("resource.k8s.io/v1", "ResourceSlice")


# ---- validation: 422 Invalid with causes


def _with(mutate: Callable[[dict[str, Any]], object], devices: int = 2) -> dict[str, Any]:
    body = slice_body(devices=devices)
    mutate(body)
    return body


def _attrs(body: dict[str, Any], **attributes: Any) -> None:
    body["spec"]["devices"][0]["attributes"] = attributes


def _taint(**taint: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        body["spec"]["devices"][0]["taints"] = [taint]

    return mutate


TAINT = {"key": "npu.huawei.com/health", "value": "Critical", "effect": "NoSchedule"}
INVALID_SLICES = {
    "129 devices": (_with(lambda b: None, devices=129), "spec.devices", "FieldValueTooMany"),
    "65 devices, one tainted": (
        _with(lambda b: b["spec"]["devices"][0].update(taints=[TAINT]), devices=65),
        "spec.devices",
        "FieldValueTooMany",
    ),
    "device name not a DNS label": (
        _with(lambda b: b["spec"]["devices"][0].update(name="NPU_0")),
        "spec.devices[0].name",
        "FieldValueInvalid",
    ),
    "device name too long": (
        _with(lambda b: b["spec"]["devices"][0].update(name="n" * 64)),
        "spec.devices[0].name",
        "FieldValueInvalid",
    ),
    "duplicate device names": (
        _with(lambda b: b["spec"]["devices"][1].update(name="npu-0")),
        "spec.devices[1]",
        "FieldValueDuplicate",
    ),
    "metadata.name": (_with(lambda b: b.update(metadata={"name": "Bad_Name"})), "metadata.name", "FieldValueInvalid"),
    "metadata.generateName": (
        _with(lambda b: b.update(metadata={"generateName": "Bad_"})),
        "metadata.generateName",
        "FieldValueInvalid",
    ),
    "no name at all": (_with(lambda b: b.update(metadata={})), "metadata.name", "FieldValueRequired"),
    "33 attributes and capacities": (
        _with(lambda b: _attrs(b, **{f"a{i}": {"int": i} for i in range(32)})),
        "spec.devices[0]",
        "FieldValueInvalid",
    ),
    "attribute name not a C identifier": (
        _with(lambda b: _attrs(b, **{"bad-name": {"int": 1}})),
        "spec.devices[0].attributes",
        "FieldValueInvalid",
    ),
    "attribute name longer than 32": (
        _with(lambda b: _attrs(b, **{"a" * 33: {"int": 1}})),
        "spec.devices[0].attributes",
        "FieldValueTooLong",
    ),
    "attribute domain not a DNS subdomain": (
        _with(lambda b: _attrs(b, **{"Bad_Domain/x": {"int": 1}})),
        "spec.devices[0].attributes",
        "FieldValueInvalid",
    ),
    "attribute with two values": (
        _with(lambda b: _attrs(b, x={"int": 1, "string": "a"})),
        "spec.devices[0].attributes[x]",
        "FieldValueInvalid",
    ),
    "attribute with no value": (_with(lambda b: _attrs(b, x={})), "spec.devices[0].attributes[x]", "FieldValueInvalid"),
    "string value longer than 64": (
        _with(lambda b: _attrs(b, x={"string": "s" * 65})),
        "spec.devices[0].attributes[x].string",
        "FieldValueTooLong",
    ),
    "version not semver": (
        _with(lambda b: _attrs(b, x={"version": "1.2"})),
        "spec.devices[0].attributes[x].version",
        "FieldValueInvalid",
    ),
    "driver not a DNS subdomain": (
        _with(lambda b: b["spec"].update(driver="Not_A_Domain")),
        "spec.driver",
        "FieldValueInvalid",
    ),
    "driver missing": (_with(lambda b: b["spec"].pop("driver")), "spec.driver", "FieldValueRequired"),
    "pool name missing": (_with(lambda b: b["spec"]["pool"].pop("name")), "spec.pool.name", "FieldValueRequired"),
    "pool generation negative": (
        _with(lambda b: b["spec"]["pool"].update(generation=-1)),
        "spec.pool.generation",
        "FieldValueInvalid",
    ),
    "resourceSliceCount zero": (
        _with(lambda b: b["spec"]["pool"].update(resourceSliceCount=0)),
        "spec.pool.resourceSliceCount",
        "FieldValueInvalid",
    ),
    "no node selection": (_with(lambda b: b["spec"].pop("nodeName")), "spec", "FieldValueRequired"),
    "two node selections": (_with(lambda b: b["spec"].update(allNodes=True)), "spec", "FieldValueInvalid"),
    "allNodes false": (
        _with(lambda b: (b["spec"].pop("nodeName"), b["spec"].update(allNodes=False))),
        "spec.allNodes",
        "FieldValueInvalid",
    ),
    "taint key not a qualified name": (
        _with(_taint(key="bad key", effect="NoSchedule")),
        "spec.devices[0].taints[0].key",
        "FieldValueInvalid",
    ),
    "taint effect unsupported": (
        _with(_taint(key="k", effect="PreferNoSchedule")),
        "spec.devices[0].taints[0].effect",
        "FieldValueNotSupported",
    ),
    "taint effect missing": (_with(_taint(key="k")), "spec.devices[0].taints[0].effect", "FieldValueRequired"),
    "owner reference without uid": (
        _with(
            lambda b: b["metadata"].update(
                ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "", "controller": True}]
            )
        ),
        "metadata.ownerReferences.uid",
        "FieldValueInvalid",
    ),
}


# Bodies the client's own model validation refuses to send: they go over raw HTTP.
CLIENT_REFUSES = {"driver missing", "pool name missing", "taint effect missing"}


@pytest.mark.parametrize("case", list(INVALID_SLICES))
def test_invalid_slice_is_422_with_field_cause(api: FakeKubeAPI, kube: Kube, case: str) -> None:
    body, field, reason = INVALID_SLICES[case]
    if case in CLIENT_REFUSES:
        code, _, status = raw(api, "POST", SLICES, body)
        assert code == 422
    else:
        status = expect_api_error(422, lambda: kube.resource.create_resource_slice(body))
    assert status["reason"] == "Invalid"
    assert status["details"]["group"] == "resource.k8s.io"
    assert status["details"]["kind"] == "ResourceSlice"
    assert {"field": field, "reason": reason} in [
        {"field": c["field"], "reason": c["reason"]} for c in status["details"]["causes"]
    ], status["details"]["causes"]
    assert status["message"].startswith("ResourceSlice.resource.k8s.io ")


@pytest.mark.parametrize(
    "body",
    [
        slice_body(devices=128),
        _with(lambda b: b["spec"]["devices"][0].update(taints=[TAINT]), devices=64),
        _with(lambda b: _attrs(b, **{f"a{i}": {"int": i} for i in range(31)})),  # + 1 capacity = 32
        _with(
            lambda b: _attrs(
                b, **{"resource.kubernetes.io/pciBusID": {"string": "0000:c1:00.0"}, "v": {"version": "1.2.3-rc.1"}}
            )
        ),
        _with(_taint(key="npu.huawei.com/fault", value="v" * 63, effect="NoExecute")),
    ],
    ids=["128 devices", "64 tainted devices", "32 attributes and capacities", "qualified names", "taint value 63"],
)
def test_limits_are_inclusive(kube: Kube, body: dict[str, Any]) -> None:
    kube.resource.create_resource_slice(body)


def test_update_cannot_change_immutable_fields(kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    created.spec.driver = "other.example.com"
    status = expect_api_error(422, lambda: kube.resource.replace_resource_slice(created.metadata.name, created))
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.driver"]


# ---- watch


def _events(
    kube: Kube, resource_version: str | None = None, timeout: int = 1, **selectors: str
) -> list[tuple[str, str]]:
    kwargs: dict[str, Any] = {"timeout_seconds": timeout, **selectors}
    if resource_version is not None:
        kwargs["resource_version"] = resource_version
    stream = watch.Watch().stream(kube.resource.list_resource_slice, **kwargs)
    return [(event["type"], event["object"].metadata.name) for event in stream]


def test_watch_replays_added_modified_deleted_after_a_resource_version(api: FakeKubeAPI, kube: Kube) -> None:
    start = kube.resource.list_resource_slice().metadata.resource_version
    first = kube.resource.create_resource_slice(slice_body()).metadata.name
    second = kube.resource.create_resource_slice(slice_body()).metadata.name
    kube.resource.patch_resource_slice(first, {"spec": {"pool": {"generation": 1}}})
    kube.resource.delete_resource_slice(first)
    api.delete_object("ResourceSlice", second)  # as the kubelet would
    assert _events(kube, start) == [
        ("ADDED", first),
        ("ADDED", second),
        ("MODIFIED", first),
        ("DELETED", first),
        ("DELETED", second),
    ]


def test_watch_without_resource_version_starts_with_the_current_state(kube: Kube) -> None:
    name = kube.resource.create_resource_slice(slice_body()).metadata.name
    assert _events(kube) == [("ADDED", name)]


def test_watch_honours_the_field_selector(kube: Kube) -> None:
    start = kube.resource.list_resource_slice().metadata.resource_version
    mine = kube.resource.create_resource_slice(slice_body()).metadata.name
    kube.resource.create_resource_slice(slice_body(node="node-b"))
    assert _events(kube, start, field_selector=f"spec.nodeName={NODE}") == [("ADDED", mine)]


def test_watch_delivers_live_events_including_python_side_edits(api: FakeKubeAPI, kube: Kube) -> None:
    start = kube.resource.list_resource_slice().metadata.resource_version
    seen: queue.Queue[tuple[str, str]] = queue.Queue()

    def run() -> None:
        for event in watch.Watch().stream(kube.resource.list_resource_slice, resource_version=start, timeout_seconds=5):
            seen.put((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                return

    watcher = threading.Thread(target=run)
    watcher.start()
    created = api.put_object("ResourceSlice", slice_body())
    name = created["metadata"]["name"]
    assert seen.get(timeout=3) == ("ADDED", name)
    created["spec"]["pool"]["generation"] = 7
    api.put_object("ResourceSlice", created)  # an admin edit
    assert seen.get(timeout=3) == ("MODIFIED", name)
    api.delete_object("ResourceSlice", name)
    assert seen.get(timeout=3) == ("DELETED", name)
    watcher.join(timeout=5)
    assert not watcher.is_alive()


def test_watch_from_a_compacted_resource_version_is_410_gone(api: FakeKubeAPI, kube: Kube) -> None:
    start = kube.resource.list_resource_slice().metadata.resource_version
    kube.resource.create_resource_slice(slice_body())
    api.compact_history()
    with pytest.raises(ApiException) as caught:
        _events(kube, start)
    assert caught.value.status == 410


def test_bounded_history_expires_old_resource_versions(tmp_path: Path) -> None:
    with FakeKubeAPI(history_limit=2) as api:
        api_client = connect(api, tmp_path)
        kube = Kube(api_client, client.CoreV1Api(api_client), client.ResourceV1Api(api_client))
        start = str(api.resource_version)
        for _ in range(3):
            kube.resource.create_resource_slice(slice_body())
        with pytest.raises(ApiException) as caught:
            _events(kube, start)
        assert caught.value.status == 410
        api_client.close()


def _raw_watch(api: FakeKubeAPI, query: str) -> tuple[str | None, list[dict[str, Any]]]:
    with urllib.request.urlopen(f"{api.url}{SLICES}?{query}") as response:
        return response.headers.get("Transfer-Encoding"), [json.loads(line) for line in response]


def test_watch_wire_format_is_chunked_newline_delimited_json(api: FakeKubeAPI) -> None:
    start = api.resource_version
    created = api.put_object("ResourceSlice", slice_body())
    encoding, events = _raw_watch(api, f"watch=1&resourceVersion={start}&timeoutSeconds=1")
    assert encoding == "chunked"
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", created["metadata"]["name"])]
    assert events[0]["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_too_old_resource_version_is_an_error_event_with_a_410_status(api: FakeKubeAPI) -> None:
    start = api.resource_version
    api.put_object("ResourceSlice", slice_body())
    api.compact_history()
    _, events = _raw_watch(api, f"watch=true&resourceVersion={start}&timeoutSeconds=5")
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["kind"] == "Status"
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")


def test_watch_ends_after_timeout_seconds(kube: Kube) -> None:
    began = time.monotonic()
    assert _events(kube, timeout=1) == []
    assert 0.9 <= time.monotonic() - began < 3


def test_stop_ends_open_watches_promptly(api: FakeKubeAPI, kube: Kube) -> None:
    done = threading.Event()

    def run() -> None:
        try:
            for _ in watch.Watch().stream(kube.resource.list_resource_slice, resource_version="1", timeout_seconds=60):
                pass
        except (ApiException, urllib3.exceptions.HTTPError):
            pass
        done.set()

    watcher = threading.Thread(target=run)
    watcher.start()
    _wait_for(lambda: any(r.query.get("watch") for r in api.requests))
    began = time.monotonic()
    api.stop()
    assert done.wait(timeout=3)
    assert time.monotonic() - began < 3
    watcher.join()


def _wait_for(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# ---- ResourceClaims


def claim_body(name: str = "claim-1") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": "npu.huawei.com"}}]}},
    }


ALLOCATION = {
    "allocation": {
        "devices": {"results": [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-0"}]},
    }
}


def test_claim_status_is_written_through_the_status_subresource(api: FakeKubeAPI, kube: Kube) -> None:
    created = kube.resource.create_namespaced_resource_claim("default", claim_body())
    assert created.status is None
    body = created.to_dict(serialize=True) | {"status": ALLOCATION}
    kube.resource.replace_namespaced_resource_claim_status("claim-1", "default", body)
    claim = kube.resource.read_namespaced_resource_claim("claim-1", "default")
    assert claim.status.allocation.devices.results[0].device == "npu-0"
    # The main resource ignores status changes.
    wiped = claim.to_dict(serialize=True) | {"status": {}}
    kept = kube.resource.replace_namespaced_resource_claim("claim-1", "default", wiped)
    assert kept.status.allocation is not None
    kube.resource.patch_namespaced_resource_claim_status("claim-1", "default", {"status": {"allocation": None}})
    stored = api.get_object("ResourceClaim", "claim-1")
    assert stored is not None
    assert "allocation" not in stored.get("status", {})


def test_claim_spec_is_immutable(kube: Kube) -> None:
    created = kube.resource.create_namespaced_resource_claim("default", claim_body()).to_dict(serialize=True)
    created["spec"]["devices"]["requests"][0]["name"] = "other"
    expect_api_error(422, lambda: kube.resource.replace_namespaced_resource_claim("claim-1", "default", created))


def test_put_object_plants_an_allocated_claim(api: FakeKubeAPI, kube: Kube) -> None:
    planted = api.put_object("ResourceClaim", claim_body("c2") | {"status": ALLOCATION})
    claim = kube.resource.read_namespaced_resource_claim("c2", "default")
    assert claim.metadata.uid == planted["metadata"]["uid"]
    assert claim.status.allocation.devices.results[0].pool == NODE
    expect_api_error(404, lambda: kube.resource.read_namespaced_resource_claim("c2", "other-namespace"))
    listed = kube.resource.list_resource_claim_for_all_namespaces()
    assert [c.metadata.name for c in listed.items] == ["c2"]


def test_finalizers_delay_claim_deletion(api: FakeKubeAPI, kube: Kube) -> None:
    body = claim_body()
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    kube.resource.create_namespaced_resource_claim("default", body)
    marked = kube.resource.delete_namespaced_resource_claim("claim-1", "default")
    assert marked.metadata.deletion_timestamp is not None
    assert api.get_object("ResourceClaim", "claim-1") is not None
    kube.resource.patch_namespaced_resource_claim("claim-1", "default", {"metadata": {"finalizers": None}})
    assert api.get_object("ResourceClaim", "claim-1") is None


# ---- faults


def test_fail_next_fails_matching_requests_then_recovers(api: FakeKubeAPI, kube: Kube) -> None:
    api.fail_next(2, status=503, path_contains="/resourceslices")
    kube.core.read_node(NODE)  # does not match the path filter
    for _ in range(2):
        status = expect_api_error(503, kube.resource.list_resource_slice)
        assert status["reason"] == "ServiceUnavailable"
    kube.resource.list_resource_slice()


def test_latency_delays_requests(api: FakeKubeAPI, kube: Kube) -> None:
    api.set_latency(0.3)
    began = time.monotonic()
    kube.core.read_node(NODE)
    assert time.monotonic() - began >= 0.3
    api.set_latency(0)


def test_down_refuses_connections_and_keeps_objects(api: FakeKubeAPI, kube: Kube) -> None:
    name = kube.resource.create_resource_slice(slice_body()).metadata.name
    api.set_down(True)
    with pytest.raises(urllib3.exceptions.HTTPError):
        kube.resource.read_resource_slice(name)
    api.set_down(False)
    assert kube.resource.read_resource_slice(name).metadata.name == name


def test_down_with_503_answers_every_request(api: FakeKubeAPI, kube: Kube) -> None:
    api.set_down(True, refuse=False)
    expect_api_error(503, lambda: kube.core.read_node(NODE))
    api.set_down(False, refuse=False)
    kube.core.read_node(NODE)


def test_force_conflicts_fails_the_next_updates(api: FakeKubeAPI, kube: Kube) -> None:
    created = kube.resource.create_resource_slice(slice_body())
    api.force_conflicts(2)
    expect_api_error(409, lambda: kube.resource.replace_resource_slice(created.metadata.name, created))
    expect_api_error(409, lambda: kube.resource.patch_resource_slice(created.metadata.name, {"metadata": {}}))
    kube.resource.replace_resource_slice(created.metadata.name, created)


def test_requests_are_recorded(api: FakeKubeAPI, kube: Kube) -> None:
    api.clear_requests()
    kube.resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}")
    expect_api_error(404, lambda: kube.resource.read_resource_slice("nope"))
    recorded = api.requests
    assert [(r.method, r.path, r.status) for r in recorded] == [
        ("GET", "/apis/resource.k8s.io/v1/resourceslices", 200),
        ("GET", "/apis/resource.k8s.io/v1/resourceslices/nope", 404),
    ]
    assert recorded[0].query == {"fieldSelector": f"spec.nodeName={NODE}"}


def test_unknown_path_is_404_and_wrong_method_405(api: FakeKubeAPI) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{api.url}/apis/example.com/v1/things")
    assert caught.value.code == 404
    request = urllib.request.Request(f"{api.url}/api/v1/nodes/{NODE}", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    assert caught.value.code == 405


# ---- fault injection added for the daemon's informer, and the request log


def test_a_watch_asking_for_bookmarks_gets_one_as_its_timeout_ends(api: FakeKubeAPI) -> None:
    start = api.resource_version
    created = api.put_object("ResourceSlice", slice_body())
    _, events = _raw_watch(api, f"watch=1&allowWatchBookmarks=true&resourceVersion={start}&timeoutSeconds=1")
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_answer_next_sends_any_status_headers_and_body_to_the_matching_verb(api: FakeKubeAPI) -> None:
    api.answer_next(1, "GET /api/v1/nodes/", status=429, body=b"slow down", headers={"Retry-After": "7"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{api.url}/api/v1/nodes/{NODE}")
    assert (caught.value.code, caught.value.headers["Retry-After"], caught.value.read()) == (429, "7", b"slow down")
    caught.value.close()
    api.answer_next(1, "WATCH ")
    assert raw(api, "GET", f"{SLICES}")[0] == 200, "a LIST is not a WATCH"
    with urllib.request.urlopen(f"{api.url}{SLICES}?watch=1") as response:
        assert response.read() == b"<html><body>502 Bad Gateway</body></html>"
    assert raw(api, "GET", f"/api/v1/nodes/{NODE}")[0] == 200


@pytest.mark.parametrize(
    ("fault", "last_line"),
    [
        ("garbage", b"<html><body>502 Bad Gateway</body></html>\n"),
        ("error-event", b'"code": 410'),
        ("version-backwards", b'"resourceVersion": "1"'),
    ],
)
def test_break_next_watch(api: FakeKubeAPI, fault: str, last_line: bytes) -> None:
    api.put_object("ResourceSlice", slice_body())
    api.break_next_watch(fault)
    with urllib.request.urlopen(f"{api.url}{SLICES}?watch=1&timeoutSeconds=5") as response:
        lines = list(response)
    assert [json.loads(line)["type"] for line in lines[:-1]] == ["ADDED"]
    assert last_line in lines[-1]


def test_a_watch_reset_mid_event_cuts_the_connection_inside_a_line(api: FakeKubeAPI) -> None:
    api.break_next_watch("reset-mid-event")
    with (
        pytest.raises(http.client.IncompleteRead),
        urllib.request.urlopen(f"{api.url}{SLICES}?watch=1&resourceVersion={api.resource_version}") as response,
    ):
        response.read()


def test_limit_watches_ends_open_watches_and_caps_new_ones(api: FakeKubeAPI) -> None:
    api.limit_watches(0.2)
    began = time.monotonic()
    _raw_watch(api, f"watch=1&resourceVersion={api.resource_version}&timeoutSeconds=600")
    assert time.monotonic() - began < 5


def _watch_in_thread(api: FakeKubeAPI, query: str) -> threading.Thread:
    """A watch read to its end in a thread, started once the server streams it."""
    watches = sum(r.verb == "watch" for r in api.requests)
    thread = threading.Thread(target=_raw_watch, args=(api, query))
    thread.start()
    wait_until(lambda: sum(r.verb == "watch" for r in api.requests) > watches, 10, "the watch")
    return thread


def test_the_request_log_times_each_request_and_says_why_each_watch_ended(api: FakeKubeAPI) -> None:
    since = f"watch=1&resourceVersion={api.resource_version}"
    _raw_watch(api, f"{since}&timeoutSeconds=1")
    api.break_next_watch("error-event")
    _raw_watch(api, f"{since}&timeoutSeconds=5")
    api.limit_watches(0.2)
    _raw_watch(api, f"{since}&timeoutSeconds=600")
    api.limit_watches(None)
    open_watch = _watch_in_thread(api, f"{since}&timeoutSeconds=60")
    while open_watch.is_alive():  # a watch ended just as it starts streaming may not notice
        api.end_watches()
        open_watch.join(0.05)
    open_watch = _watch_in_thread(api, f"{since}&timeoutSeconds=60")
    api.set_down(True)
    open_watch.join()
    api.set_down(False)
    raw(api, "GET", SLICES)
    watches = [r for r in api.requests if r.verb == "watch"]
    ends = ["timeout", "error-event", "server limit", "ended by the server", "server stopped"]
    assert [r.end for r in watches] == ends
    wait_until(lambda: all(r.ended is not None for r in api.requests), 10, "every answer written")
    assert all(r.ended is not None and r.ended >= r.started for r in api.requests)
    assert watches[0].ended is not None and watches[0].ended - watches[0].started >= 1.0
    assert api.requests[-1].end == "", "only a watch says why it ended"


def test_hold_delays_matching_requests_and_most_in_flight_counts_them_at_once(api: FakeKubeAPI) -> None:
    api.hold(f"GET {SLICES}", 0.5)
    of_node_a = f"{SLICES}?fieldSelector=spec.nodeName%3D{NODE}"
    together = [threading.Thread(target=raw, args=(api, "GET", of_node_a)) for _ in range(2)]
    for thread in together:
        thread.start()
    for thread in together:
        thread.join()
    raw(api, "GET", f"{SLICES}?fieldSelector=spec.nodeName%3Dnode-b")
    raw(api, "GET", f"{SLICES}?fieldSelector=spec.nodeName%3Dnode-b")
    api.hold(f"GET {SLICES}", 0)
    raw(api, "GET", f"/api/v1/nodes/{NODE}")
    wait_until(lambda: all(r.ended is not None for r in api.requests), 10, "every answer written")
    lists = [r for r in api.requests if r.verb == "list"]
    assert all(r.ended is not None and r.ended - r.started >= 0.5 for r in lists)
    assert (api.most_in_flight("list", NODE), api.most_in_flight("list", "node-b")) == (2, 1)
    assert api.most_in_flight("list") == 2
    assert api.most_in_flight("get") == 1


def test_request_counts_name_verbs_as_the_audit_log_does(api: FakeKubeAPI) -> None:
    created = api.put_object("ResourceSlice", slice_body())
    name = created["metadata"]["name"]
    api.clear_requests()
    raw(api, "GET", SLICES)
    raw(api, "GET", f"{SLICES}/{name}")
    _raw_watch(api, f"watch=true&resourceVersion={api.resource_version}&timeoutSeconds=0")
    raw(api, "DELETE", f"{SLICES}/{name}")
    raw(api, "DELETE", SLICES)
    assert api.request_counts() == {
        f"list {SLICES}": 1,
        f"get {SLICES}/{name}": 1,
        f"watch {SLICES}": 1,
        f"delete {SLICES}/{name}": 1,
        f"deletecollection {SLICES}": 1,
    }


def test_the_small_server_refuses_selectors_it_does_not_serve() -> None:
    with fakeapi.FakeKubeAPI() as small:
        small.add_node(NODE)
        small.put_object("ResourceSlice", slice_body())
        small.put_object("ResourceSlice", slice_body(node="node-b"))
        listed = raw(small, "GET", f"{SLICES}?fieldSelector=spec.nodeName%3D{NODE}")[2]
        assert [item["spec"]["nodeName"] for item in listed["items"]] == [NODE]
        code, _, status = raw(small, "GET", f"{SLICES}?labelSelector=a%3Db")
        assert (code, status["message"]) == (400, "label selectors are not served by this fake API server")
        code, _, status = raw(small, "GET", f"{SLICES}?fieldSelector=spec.driver!%3Dx")
        assert code == 400


# ---- running as a process


def test_module_main_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "npu_plugin.sim.fakeapi",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--node",
            NODE,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        api_client = config.new_client_from_config(str(kubeconfig))
        assert client.CoreV1Api(api_client).read_node(NODE).metadata.uid
        api_client.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def server_side(port: int, client_port: int) -> list[int]:
    """The receive queue of the server's end of the connection from 127.0.0.1:`client_port`."""
    queues = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[2] == f"0100007F:{client_port:04X}":
            queues.append(int(fields[4].split(":")[1], 16))
    return queues


def test_a_client_hanging_up_before_its_error_answer_prints_no_traceback(
    api: FakeKubeAPI, capfd: pytest.CaptureFixture[str]
) -> None:
    """As daemons stopped while the server shuts down do (its 503s then find nobody to read
    them)."""
    api.hold("GET /api/v1/nodes/", 0.5)
    api.fail_next(1, 503, "/api/v1/nodes/")
    peer = socket.create_connection(("127.0.0.1", api.port))
    peer.sendall(f"GET /api/v1/nodes/{NODE} HTTP/1.1\r\nHost: fake\r\n\r\n".encode())
    client_port = peer.getsockname()[1]
    wait_until(lambda: server_side(api.port, client_port) == [0], 5, "the server reading the request")
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # a reset: the server's answer cannot be written
    wait_until(lambda: [r.ended is not None for r in api.requests] == [True], 10, "the answer's end")
    api.stop()  # joins the handler's thread: anything it had to print is printed
    assert [r.status for r in api.requests] == [503]
    assert "Traceback" not in capfd.readouterr().err


def blocked_signals(thread: threading.Thread) -> set[int]:
    """The signals a thread blocks, as the kernel reports them."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text(encoding="ascii")
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def test_the_servers_threads_leave_stop_signals_to_the_main_thread(api: FakeKubeAPI) -> None:
    """A stop signal one of its threads takes would reach a main thread in a blocking call only at
    its next bytecode; so the serving thread and the threads of open requests (here a watch) block them."""
    watch = threading.Thread(
        target=lambda: urllib.request.urlopen(f"{api.url}{SLICES}?watch=true&timeoutSeconds=2").read(), daemon=True
    )
    watch.start()
    wait_until(lambda: any("process_request_thread" in t.name for t in threading.enumerate()), 10, "a request thread")
    threads = [t for t in threading.enumerate() if t.name.startswith("fakeapi-") or "process_request_thread" in t.name]
    stop = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    assert len(threads) >= 2 and all(stop <= blocked_signals(t) for t in threads), threads
    assert not stop & blocked_signals(threading.main_thread())
    watch.join(10)
