"""The fake API server's Kubernetes version and DRAPartitionableDevices gate, over real HTTP:
/version, counters dropped on write while the gate is off (with the ratchet of kube-apiserver's
strategy), dryRun=All creates, and the counter rules of 1.34 against those of 1.35+."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fakeapi import FakeKubeAPI

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
COUNTERS = [{"name": "npu-0-counters", "counters": {"aicore": {"value": "20"}, "vnpus": {"value": "16"}}}]
CONSUMES = [{"counterSet": "npu-0-counters", "counters": {"aicore": {"value": "5"}, "vnpus": {"value": "1"}}}]


def request(api: FakeKubeAPI, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def a_slice(name: str, *, counters: bool = False, devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "npu.huawei.com",
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
    }
    if counters:
        spec["sharedCounters"] = COUNTERS
    if devices is not None:
        spec["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def a_device(name: str = "npu-0-vir05-1c-16g-0") -> dict[str, Any]:
    return {"name": name, "attributes": {"physicalId": {"int": 0}}, "consumesCounters": CONSUMES}


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeKubeAPI]:
    minor, gate = request.param
    with FakeKubeAPI(kubernetes_minor=minor, partitionable_devices=gate) as server:
        yield server


@pytest.mark.parametrize(
    ("api", "minor", "on"),
    [
        ((34, None), "34", False),
        ((35, None), "35", False),
        ((36, None), "36", True),
        ((35, True), "35", True),
        ((36, False), "36", False),
    ],
    indirect=["api"],
)
def test_version_and_the_gate_default(api: FakeKubeAPI, minor: str, on: bool) -> None:
    status, version = request(api, "GET", "/version")
    assert status == 200
    assert (version["major"], version["minor"]) == ("1", minor)
    assert version["gitVersion"].startswith(f"v1.{minor}.0")
    assert api.partitionable_devices is on


@pytest.mark.parametrize("api", [(35, False)], indirect=True)
def test_with_the_gate_off_writes_lose_counters_and_nothing_else(api: FakeKubeAPI) -> None:
    status, stored = request(api, "POST", SLICES, a_slice("counters", counters=True))
    assert status == 201
    assert "sharedCounters" not in stored["spec"]
    status, stored = request(api, "POST", SLICES, a_slice("devices", devices=[a_device()]))
    assert status == 201
    assert stored["spec"]["devices"] == [{"name": "npu-0-vir05-1c-16g-0", "attributes": {"physicalId": {"int": 0}}}]
    assert "consumesCounters" not in api.get_object("ResourceSlice", "devices")["spec"]["devices"][0]


@pytest.mark.parametrize("api", [(35, True)], indirect=True)
def test_an_update_keeps_counters_the_stored_slice_already_uses_after_the_gate_goes_off(api: FakeKubeAPI) -> None:
    request(api, "POST", SLICES, a_slice("devices", devices=[a_device()]))
    request(api, "POST", SLICES, a_slice("plain", devices=[{"name": "npu-1", "attributes": {}}]))
    api.set_kubernetes_version(35, partitionable_devices=False)
    body = api.get_object("ResourceSlice", "devices")
    body["spec"]["devices"].append(a_device("npu-0-vir05-1c-16g-1"))
    status, stored = request(api, "PUT", f"{SLICES}/devices", body)
    assert status == 200
    assert [d.get("consumesCounters") for d in stored["spec"]["devices"]] == [CONSUMES, CONSUMES]  # the ratchet
    plain = api.get_object("ResourceSlice", "plain")
    plain["spec"]["devices"] = [a_device()]
    assert "consumesCounters" not in request(api, "PUT", f"{SLICES}/plain", plain)[1]["spec"]["devices"][0]


@pytest.mark.parametrize("api", [(35, None), (36, None)], indirect=True)
def test_a_dry_run_create_answers_what_would_be_stored_and_stores_nothing(api: FakeKubeAPI) -> None:
    body = a_slice("", counters=True)
    body["metadata"] = {"generateName": "n1-npu.huawei.com-probe-"}
    status, answer = request(api, "POST", f"{SLICES}?dryRun=All", body)
    assert status == 201
    assert answer["metadata"]["name"].startswith("n1-npu.huawei.com-probe-")
    assert ("sharedCounters" in answer["spec"]) is api.partitionable_devices
    assert api.objects("ResourceSlice") == []
    assert request(api, "POST", f"{SLICES}?dryRun=Some", body)[0] == 400


def _reasons(answer: dict[str, Any]) -> list[str]:
    return [f"{c['field']}: {c['message']}" for c in answer["details"]["causes"]]


@pytest.mark.parametrize("api", [(34, True)], indirect=True)
def test_1_34_takes_counters_and_their_devices_in_one_slice_and_checks_the_references(api: FakeKubeAPI) -> None:
    assert request(api, "POST", SLICES, a_slice("combined", counters=True, devices=[a_device()]))[0] == 201
    stray = a_device()
    stray["consumesCounters"] = [{"counterSet": "npu-9-counters", "counters": {"aicore": {"value": "1"}}}]
    status, answer = request(api, "POST", SLICES, a_slice("stray", counters=True, devices=[stray]))
    assert status == 422
    assert _reasons(answer) == ['spec.devices[0].consumesCounters[0].counterSet: Not found: "npu-9-counters"']
    many = a_slice("many")
    many["spec"]["sharedCounters"] = [
        {"name": f"s{i}", "counters": {f"c{j}": {"value": "1"} for j in range(9)}} for i in range(4)
    ]
    status, answer = request(api, "POST", SLICES, many)
    assert status == 422
    assert _reasons(answer) == [
        "spec.sharedCounters: Invalid value: 36: the total number of shared counters must not exceed 32"
    ]


@pytest.mark.parametrize("api", [(35, True), (36, None)], indirect=True)
def test_1_35_and_later_keep_counters_and_devices_apart_and_limit_sets_and_consumptions(api: FakeKubeAPI) -> None:
    status, answer = request(api, "POST", SLICES, a_slice("combined", counters=True, devices=[a_device()]))
    assert status == 422
    assert "only one of `sharedCounters` or `devices` is allowed" in answer["message"]
    assert request(api, "POST", SLICES, a_slice("devices", devices=[a_device()]))[0] == 201  # sets are per pool
    nine = a_slice("nine")
    nine["spec"]["sharedCounters"] = [
        {"name": f"npu-{i}-counters", "counters": COUNTERS[0]["counters"]} for i in range(9)
    ]
    status, answer = request(api, "POST", SLICES, nine)
    assert (status, _reasons(answer)) == (422, ["spec.sharedCounters: Too many: 9: must have at most 8 items"])
    three = a_device()
    three["consumesCounters"] = [{**CONSUMES[0], "counterSet": f"s{i}"} for i in range(3)]
    status, answer = request(api, "POST", SLICES, a_slice("three", devices=[three]))
    assert (status, _reasons(answer)) == (
        422,
        ["spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items"],
    )
    no_node = a_slice("no-node", counters=True)
    del no_node["spec"]["nodeName"]
    assert request(api, "POST", SLICES, no_node)[0] == 422


def test_the_standalone_server_takes_a_version_and_a_gate() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "npu_plugin.sim.fakeapi",
            "--kubernetes-version",
            "1.36",
            "--feature-gates",
            "DRAPartitionableDevices=false",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        with urllib.request.urlopen(url + "/version", timeout=10) as answer:
            assert json.loads(answer.read())["minor"] == "36"
        body = json.dumps(a_slice("c", counters=True)).encode()
        post = urllib.request.Request(
            url + SLICES, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(post, timeout=10) as answer:
            assert "sharedCounters" not in json.loads(answer.read())["spec"]
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
