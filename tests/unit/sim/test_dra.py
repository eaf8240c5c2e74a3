"""The DRA simulators' pure parts: the kubelet's registration checks and the scheduler's device
choice."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from npu_plugin._proto import pluginregistration_v1_pb2 as reg_pb
from npu_plugin.sim.dra_kubelet import KUBELET_SERVICES, choose_service, pick_health_service, validate_info
from npu_plugin.sim.plugin_watcher import RegistrationRejectedError
from npu_plugin.sim.scheduler import (
    DeviceRequest,
    UnschedulableError,
    allocated_keys,
    cel_device,
    claim_body,
    pick,
    published_devices,
    select,
    what_was_seen,
)

SOCKET = Path("/reg/npu.huawei.com-reg.sock")


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v1.DRAPlugin", "v1beta1.DRAPlugin"], "v1.DRAPlugin"),
        (["v1beta1.DRAPlugin"], "v1beta1.DRAPlugin"),
        (["v1beta1.DRAPlugin", "v1.DRAPlugin"], "v1beta1.DRAPlugin"),  # the plugin's order decides
        (["v2.DRAPlugin", "v1.DRAPlugin"], "v1.DRAPlugin"),
    ],
)
def test_the_kubelet_takes_the_first_service_it_knows(offered: list[str], chosen: str) -> None:
    assert choose_service(offered, KUBELET_SERVICES) == chosen


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v1beta1.DRAPlugin"], None),
        ([], None),
        (["v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"], "v1alpha1.DRAResourceHealth"),
        (["v1beta1.DRAPlugin", "v1.DRAResourceHealth"], "v1.DRAResourceHealth"),
        (["v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"], "v1.DRAResourceHealth"),  # the newest wins
        (["v1beta1.DRAResourceHealth"], None),
    ],
)
def test_the_kubelet_opens_the_newest_health_service_advertised(offered: list[str], chosen: str | None) -> None:
    """As kubernetes/kubernetes#139477's TestPickHealthService."""
    assert pick_health_service(offered) == chosen


def info(**fields: Any) -> reg_pb.PluginInfo:
    values = {
        "type": "DRAPlugin",
        "name": "npu.huawei.com",
        "endpoint": "/plugins/dra.sock",
        "supported_versions": ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
    } | fields
    return reg_pb.PluginInfo(**values)


def test_a_good_plugin_is_accepted() -> None:
    assert validate_info(info(), SOCKET, KUBELET_SERVICES, []) == ("/plugins/dra.sock", "v1.DRAPlugin")
    assert validate_info(info(endpoint=""), SOCKET, KUBELET_SERVICES, [])[0] == str(SOCKET)


@pytest.mark.parametrize(
    ("plugin", "taken", "message"),
    [
        (info(type="CSIPlugin"), [], "no handler registered for plugin type: CSIPlugin"),
        (info(supported_versions=[]), [], "empty list of supported gRPC services"),
        (info(supported_versions=["1.0.0"]), [], "none of services supported by the plugin (['1.0.0'])"),
        (info(), ["/plugins/dra.sock"], "endpoint /plugins/dra.sock already registered"),
    ],
)
def test_rejections_carry_the_kubelets_words(plugin: reg_pb.PluginInfo, taken: list[str], message: str) -> None:
    with pytest.raises(RegistrationRejectedError) as raised:
        validate_info(plugin, SOCKET, KUBELET_SERVICES, taken)
    assert message in str(raised.value) and str(raised.value).startswith("RegisterPlugin error -- ")


def device(name: str, numa: int, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "attributes": {
            "numaNode": {"int": numa},
            "chipName": {"string": "910B3"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:0{numa}:00.0"},
        },
        "capacity": {"memCapacity": {"value": "64Gi"}},
    }
    return entry | ({"taints": taints} if taints else {})


def slice_(
    devices: list[dict[str, Any]],
    generation: int = 1,
    count: int = 1,
    pool: str = "node-a",
    driver: str = "npu.huawei.com",
) -> dict[str, Any]:
    return {
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        }
    }


def names(chosen: list[Any]) -> list[str]:
    return [d.entry["name"] for d in chosen]


def test_only_complete_pools_at_their_newest_generation_untainted_count() -> None:
    slices = [
        slice_([device("old-0", 0)], generation=1),
        slice_([device("npu-0", 0), device("npu-1", 1, [{"key": "k", "effect": "NoSchedule"}])], generation=2),
        slice_([device("half-0", 0)], count=2, pool="incomplete"),
    ]
    assert names(published_devices(slices)) == ["npu-0"]


def test_the_cel_device_splits_qualified_attributes_and_counts_bytes() -> None:
    [published] = published_devices([slice_([device("npu-0", 3)])])
    assert cel_device(published) == {
        "driver": "npu.huawei.com",
        "attributes": {
            "npu.huawei.com": {"numaNode": 3, "chipName": "910B3"},
            "resource.kubernetes.io": {"pciBusID": "0000:03:00.0"},
        },
        "capacity": {"npu.huawei.com": {"memCapacity": 64 * 2**30}},
        "allowMultipleAllocations": False,
    }


def test_requests_take_distinct_devices_matching_their_selectors() -> None:
    devices = published_devices([slice_([device(f"npu-{i}", i % 2) for i in range(4)])])
    requests = [
        DeviceRequest("odd", 2, ('device.attributes["npu.huawei.com"].numaNode == 1',)),
        DeviceRequest("any", 1, (), subrequest="one"),
    ]
    assert pick(devices, requests, ('device.driver == "npu.huawei.com"',)) == [
        {"request": "odd", "driver": "npu.huawei.com", "pool": "node-a", "device": "npu-1"},
        {"request": "odd", "driver": "npu.huawei.com", "pool": "node-a", "device": "npu-3"},
        {"request": "any/one", "driver": "npu.huawei.com", "pool": "node-a", "device": "npu-0"},
    ]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('device.attributes["npu.huawei.com"].missing == 1', "CEL runtime error on device npu-0"),
        ("device.driver ==", "does not compile"),
    ],
)
def test_a_broken_selector_fails_the_allocation(expression: str, message: str) -> None:
    devices = published_devices([slice_([device("npu-0", 0)])])
    with pytest.raises(UnschedulableError, match=message):
        select(devices, [expression])


def test_plain_requests_need_no_cel(monkeypatch: pytest.MonkeyPatch) -> None:
    """`npu-plugin simulate` allocates on installations without the dev extras (cel-python)."""
    monkeypatch.setitem(sys.modules, "celpy", None)
    devices = published_devices([slice_([device("npu-0", 0)])])
    assert pick(devices, [DeviceRequest("npu")], ())[0]["device"] == "npu-0"
    with pytest.raises(ImportError):
        select(devices, ["true"])


def test_too_few_devices_is_unschedulable() -> None:
    devices = published_devices([slice_([device("npu-0", 0)])])
    with pytest.raises(UnschedulableError, match="1 of 2 devices available"):
        pick(devices, [DeviceRequest("npu", 2)], ())


def test_claims_hold_their_allocated_devices() -> None:
    allocated = {
        "status": {
            "allocation": {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", "device": "npu-1"}]}}
        }
    }
    assert allocated_keys([allocated, {"status": {}}, {}]) == {("d", "p", "npu-1")}


def test_a_refusal_says_what_the_allocator_saw() -> None:
    tainted = device("npu-1", 1, taints=[{"key": "npu.huawei.com/health", "value": "Critical", "effect": "NoSchedule"}])
    slices = [{"metadata": {"name": "s1"}} | slice_([device("npu-0", 0), tainted], generation=2, count=2)]
    claim = {
        "metadata": {"namespace": "default", "name": "c"},
        "status": {"allocation": {"devices": {"results": [{"driver": "d", "pool": "p", "device": "npu-0"}]}}},
    }
    assert what_was_seen(slices, [claim], "node-a") == (
        "node node-a's slices: s1 (driver npu.huawei.com, pool node-a generation 2 of 2 slice(s), 2 device(s), "
        "1 tainted); claims: default/c holding ['npu-0']"
    )
    assert what_was_seen([], [], "node-a") == "node node-a's slices: none; claims: none"


def test_the_claim_body_asks_exactly_or_first_available() -> None:
    body = claim_body("ns", "c", [DeviceRequest("a", 2, ("true",)), DeviceRequest("b", subrequest="small")])
    assert body["spec"]["devices"]["requests"] == [
        {
            "name": "a",
            "exactly": {
                "deviceClassName": "npu.huawei.com",
                "count": 2,
                "selectors": [{"cel": {"expression": "true"}}],
            },
        },
        {"name": "b", "firstAvailable": [{"name": "small", "deviceClassName": "npu.huawei.com", "count": 1}]},
    ]
    kubernetes_validate.validate(body, "1.34", strict=True)
