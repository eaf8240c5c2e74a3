"""The fake API server's per-release rules for what this plugin writes (Kubernetes 1.34 to 1.37):
device taints dropped while DRADeviceTaints is off (with the ratchet of `dropDisabledFields`), the
taint effect None from 1.35, ResourceClaim status.devices as a server-side-applied map validated
against the allocation, and the per-driver authorization of status.devices from 1.36."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.support.fakeapi import FakeKubeAPI
from tests.support.fakeapi.authz import Caller, Rule

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIM_STATUS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1/status"
NODE = "node-a"
DRIVER = "npu.huawei.com"
TOKEN = "t0ken"


def request(api: FakeKubeAPI, method: str, path: str, body: Any, **options: str) -> tuple[int, Any]:
    headers = {"Content-Type": options.pop("content_type", "application/json")}
    if options.pop("token", ""):
        headers["Authorization"] = f"Bearer {TOKEN}"
    query = "&".join(f"{k}={v}" for k, v in options.items())
    req = urllib.request.Request(
        api.url + path + (f"?{query}" if query else ""), data=json.dumps(body).encode(), method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(req) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


def tainted_slice(effect: str = "NoSchedule") -> dict[str, Any]:
    taint = {"key": f"{DRIVER}/health", "value": "Critical", "effect": effect}
    device = {"name": "npu-0", "attributes": {}, "capacity": {}, "taints": [taint]}
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s1"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": pool, "devices": [device]},
    }


@pytest.mark.parametrize(("minor", "kept"), [(34, False), (35, False), (36, True), (37, True)])
def test_taints_are_kept_from_1_36_by_default(minor: int, kept: bool) -> None:
    with FakeKubeAPI(kubernetes_minor=minor) as api:
        code, stored = request(api, "POST", SLICES, tainted_slice())
        assert code == 201 and bool(stored["spec"]["devices"][0].get("taints")) is kept


def test_an_update_keeps_taints_stored_while_the_gate_was_on() -> None:
    with FakeKubeAPI(kubernetes_minor=35, device_taints=True) as api:
        request(api, "POST", SLICES, tainted_slice())
        api.set_kubernetes_version(35, device_taints=False)
        body = tainted_slice() | {"metadata": {"name": "s1"}}
        body["spec"]["devices"][0]["taints"][0]["value"] = "Alarm"
        code, stored = request(api, "PUT", f"{SLICES}/s1", body)
        assert code == 200 and stored["spec"]["devices"][0]["taints"][0]["value"] == "Alarm"


@pytest.mark.parametrize(("minor", "accepted"), [(34, False), (35, True), (36, True), (37, True)])
def test_the_effect_none_exists_from_1_35(minor: int, accepted: bool) -> None:
    with FakeKubeAPI(kubernetes_minor=minor, device_taints=True) as api:
        code, answer = request(api, "POST", SLICES, tainted_slice("None"))
        if accepted:
            assert code == 201
        else:
            assert code == 422
            assert answer["details"]["causes"] == [
                {
                    "reason": "FieldValueNotSupported",
                    "message": 'Unsupported value: "None": supported values: "NoExecute", "NoSchedule"',
                    "field": "spec.devices[0].taints[0].effect",
                }
            ]


def test_at_most_16_taints_and_label_value_limits() -> None:
    with FakeKubeAPI(kubernetes_minor=37) as api:
        body = tainted_slice()
        body["spec"]["devices"][0]["taints"] = [{"key": f"k{i}", "effect": "None"} for i in range(17)]
        code, answer = request(api, "POST", SLICES, body)
        assert code == 422 and answer["details"]["causes"][0]["reason"] == "FieldValueTooMany"
        body["spec"]["devices"][0]["taints"] = [{"key": "k", "value": "v" * 64, "effect": "None"}]
        code, answer = request(api, "POST", SLICES, body)
        assert code == 422 and answer["details"]["causes"][0]["field"] == "spec.devices[0].taints[0].value"


def allocated_claim(api: FakeKubeAPI, *results: tuple[str, str]) -> None:
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    allocation = {
        "devices": {"results": [{"request": "r", "driver": d, "pool": NODE, "device": n} for d, n in results]},
        "nodeSelector": selector,
    }
    api.put_object(
        "ResourceClaim", {"metadata": {"name": "c1"}, "spec": {"devices": {}}, "status": {"allocation": allocation}}
    )


def entry(driver: str, device: str, **data: Any) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True", "reason": "Prepared", "lastTransitionTime": "2026-11-28T00:00:00Z"}
    return {"driver": driver, "pool": NODE, "device": device, "conditions": [condition], "data": data}


def apply(api: FakeKubeAPI, manager: str, *entries: dict[str, Any], token: str = "") -> tuple[int, Any]:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "default"},
        "status": {"devices": list(entries)},
    }
    options = {"fieldManager": manager, "force": "true", "content_type": "application/apply-patch+yaml", "token": token}
    return request(api, "PATCH", CLAIM_STATUS, body, **options)


def devices(answer: Any) -> list[tuple[str, str]]:
    return [(d["driver"], d["device"]) for d in answer["status"].get("devices", [])]


def test_status_devices_is_a_map_each_manager_applies_its_own_entries() -> None:
    with FakeKubeAPI(kubernetes_minor=37) as api:
        allocated_claim(api, (DRIVER, "npu-0"), (DRIVER, "npu-1"), ("other.example.com", "gpu-0"))
        assert apply(api, "other", entry("other.example.com", "gpu-0"))[0] == 200
        code, answer = apply(api, DRIVER, entry(DRIVER, "npu-0", a=1), entry(DRIVER, "npu-1"))
        assert code == 200 and devices(answer) == [("other.example.com", "gpu-0"), (DRIVER, "npu-0"), (DRIVER, "npu-1")]
        code, answer = apply(api, DRIVER, entry(DRIVER, "npu-0", a=2))
        assert devices(answer) == [("other.example.com", "gpu-0"), (DRIVER, "npu-0")]
        assert answer["status"]["devices"][1]["data"] == {"a": 2}
        code, answer = apply(api, DRIVER)
        assert code == 200 and devices(answer) == [("other.example.com", "gpu-0")]
        assert answer["status"]["allocation"]["devices"]["results"][0]["device"] == "npu-0"


def test_a_status_entry_must_name_an_allocated_device() -> None:
    with FakeKubeAPI(kubernetes_minor=34) as api:
        allocated_claim(api, (DRIVER, "npu-0"))
        code, answer = apply(api, DRIVER, entry(DRIVER, "npu-7"))
        assert code == 422
        assert answer["details"]["causes"][0]["message"].endswith("must be an allocated device in the claim")
        too_many = entry(DRIVER, "npu-0")
        too_many["conditions"] = too_many["conditions"] * 9
        assert apply(api, DRIVER, too_many)[1]["details"]["causes"][0]["reason"] == "FieldValueTooMany"


def test_a_status_entry_names_a_share_by_its_share_id() -> None:
    share = "5f0b6d5e-2c0a-4b7c-9a53-0d0e8f1f2a11"
    with FakeKubeAPI(kubernetes_minor=34) as api:
        result = {"request": "r", "driver": DRIVER, "pool": NODE, "device": "npu-0", "shareID": share}
        status = {"allocation": {"devices": {"results": [result]}}}
        api.put_object("ResourceClaim", {"metadata": {"name": "c1"}, "spec": {"devices": {}}, "status": status})
        code, answer = apply(api, DRIVER, entry(DRIVER, "npu-0"))
        assert code == 422, answer
        assert answer["details"]["causes"][0]["message"].endswith("must be an allocated device in the claim")
        code, answer = apply(api, DRIVER, {**entry(DRIVER, "npu-0"), "shareID": share})
        assert code == 200, answer
        assert answer["status"]["devices"][0]["shareID"] == share


STATUS_ONLY = (Rule("resource.k8s.io", frozenset({"resourceclaims/status"}), frozenset({"patch"})),)
DRIVER_RULE = Rule(
    "resource.k8s.io", frozenset({"resourceclaims/driver"}), frozenset({"associated-node:patch"}), frozenset({DRIVER})
)


@pytest.mark.parametrize(
    ("minor", "rules", "node", "code"),
    [
        (34, (), NODE, 403),  # RBAC: no resourceclaims/status
        (35, STATUS_ONLY, NODE, 200),  # no per-driver check before 1.36
        (36, STATUS_ONLY, NODE, 422),
        (36, (*STATUS_ONLY, DRIVER_RULE), NODE, 200),
        (37, (*STATUS_ONLY, DRIVER_RULE), "node-b", 422),  # associated-node is for the claim's node only
    ],
)
def test_status_device_writes_are_authorized_per_release(
    minor: int, rules: tuple[Rule, ...], node: str, code: int
) -> None:
    with FakeKubeAPI(kubernetes_minor=minor) as api:
        allocated_claim(api, (DRIVER, "npu-0"))
        api.authorize_as(Caller("system:serviceaccount:npu-plugin:npu-plugin", rules, node, TOKEN))
        answered, answer = apply(api, DRIVER, entry(DRIVER, "npu-0"), token="yes")
        assert answered == code, answer
        if code == 422:
            assert 'requires resource="resourceclaims/driver"' in answer["message"]
        # Unauthenticated requests (a test's own scheduler) stay unchecked.
        assert apply(api, "admin", entry(DRIVER, "npu-0"))[0] == 200
