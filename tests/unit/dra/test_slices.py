"""dra/slices.py (pure slice building) and the publisher's "already published?" comparison."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from npu_plugin.ascend.device import Device, Health
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.publisher import slices_match
from npu_plugin.dra.slices import SliceContent, SliceSettings, build_slices, device_entry, slice_specs
from npu_plugin.dra.taints import TaintRules
from npu_plugin.kubeapi.protocol import SliceDevice

DRIVER = "npu.huawei.com"
FULL = Device(
    physical_id=3,
    chip_name="910B3",
    device_type="Ascend910B",
    logic_id=1,
    card_id=2,
    chip_id=1,
    memory=64 * 2**30,
    ai_core=20,
    numa_node=6,
    pci_bus_id="0000:c1:00.0",
    topology_group="ring-0",
    driver_version="24.1.rc1",
)
BARE = Device(
    physical_id=0,
    chip_name="310P3",
    device_type="Ascend310P",
    logic_id=0,
    card_id=0,
    memory=24 * 2**30 + 1,
    topology_group="card-0",
)


def contents(chunks: list[list[SliceDevice]]) -> list[SliceContent]:
    return [SliceContent(chunk) for chunk in chunks]


def settings(policy: str = "remove", uid: str | None = "node-uid") -> SliceSettings:
    return SliceSettings(DRIVER, "node-a", uid, UnhealthyPolicy(policy))


def devices(count: int, unhealthy: frozenset[int] = frozenset()) -> list[tuple[Device, bool]]:
    return [(replace(FULL, physical_id=i), i not in unhealthy) for i in range(count)]


def test_a_full_device_publishes_every_attribute_typed() -> None:
    assert device_entry(DRIVER, FULL, healthy=True, policy=UnhealthyPolicy.REMOVE) == {
        "name": "npu-3",
        "attributes": {
            "chipName": {"string": "910B3"},
            "deviceType": {"string": "Ascend910B"},
            "physicalId": {"int": 3},
            "logicId": {"int": 1},
            "cardId": {"int": 2},
            "chipId": {"int": 1},
            "topologyGroup": {"string": "ring-0"},
            "numaNode": {"int": 6},
            "driverVersion": {"string": "24.1.rc1"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:c1:00.0"},
        },
        "capacity": {"memCapacity": {"value": "64Gi"}, "aiCore": {"value": "20"}},
    }


def test_unknown_optional_fields_are_left_out() -> None:
    entry = device_entry(DRIVER, BARE, healthy=True, policy=UnhealthyPolicy.REMOVE)
    assert entry is not None
    assert set(entry["attributes"]) == {
        "chipName",
        "deviceType",
        "physicalId",
        "logicId",
        "cardId",
        "chipId",
        "topologyGroup",
    }
    assert entry["capacity"] == {"memCapacity": {"value": str(24 * 2**30 + 1)}}


@pytest.mark.parametrize(
    ("identity", "attributes"),
    [
        ({}, {}),
        ({"device_ip": "192.168.100.104"}, {"deviceIP": {"string": "192.168.100.104"}}),
        (
            {"device_ip": "fd00::4", "super_pod_id": 7, "server_index": 0, "rack_id": 2},
            {
                "deviceIP": {"string": "fd00::4"},
                "superPodId": {"int": 7},
                "serverIndex": {"int": 0},
                "rackId": {"int": 2},
            },
        ),
        ({"super_pod_id": 0, "server_index": 3}, {"superPodId": {"int": 0}, "serverIndex": {"int": 3}}),
    ],
)
def test_network_identity_attributes_only_where_known(identity: dict[str, Any], attributes: dict[str, Any]) -> None:
    entry = device_entry(DRIVER, replace(FULL, **identity), healthy=True, policy=UnhealthyPolicy.REMOVE)
    full = device_entry(DRIVER, FULL, healthy=True, policy=UnhealthyPolicy.REMOVE)
    assert entry is not None and full is not None
    assert entry["attributes"] == full["attributes"] | attributes


def test_attribute_names_and_values_fit_the_api_limits() -> None:
    """Unqualified names are C identifiers of at most 32 characters; strings hold at most 64."""
    longest = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
    entry = device_entry(
        DRIVER,
        replace(FULL, device_ip=longest, super_pod_id=2**32 - 2, server_index=1, rack_id=1),
        healthy=True,
        policy=UnhealthyPolicy.REMOVE,
    )
    assert entry is not None
    for name, value in entry["attributes"].items():
        if "/" not in name:
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,31}", name), name
        assert len(str(value.get("string", ""))) <= 64


HEALTH_CRITICAL = {"key": "npu.huawei.com/health", "value": "Critical", "effect": "NoSchedule"}
HEALTH_WARNING = {"key": "npu.huawei.com/health", "value": "Warning", "effect": "None"}
FAULT = {"key": "npu.huawei.com/fault", "value": "80E01801", "effect": "None"}


@pytest.mark.parametrize(
    ("policy", "health", "healthy", "taints"),
    [
        ("remove", Health.OK, True, None),
        ("remove", Health.WARNING, True, None),
        ("taint", Health.OK, True, None),
        ("taint", Health.WARNING, True, [HEALTH_WARNING]),
        ("auto", Health.WARNING, True, [HEALTH_WARNING]),
        ("taint", Health.CRITICAL, False, [HEALTH_CRITICAL]),
        ("auto", Health.CRITICAL, False, [HEALTH_CRITICAL]),
    ],
)
def test_unhealthy_policy(policy: str, health: Health, healthy: bool, taints: list[dict[str, str]] | None) -> None:
    device = replace(FULL, health=health)
    entry = device_entry(DRIVER, device, healthy=healthy, policy=UnhealthyPolicy(policy))
    assert entry is not None and entry.get("taints") == taints


def test_fault_codes_become_a_second_taint_unless_removed() -> None:
    device = replace(FULL, health=Health.CRITICAL, faults=(0x80E01801,))
    entry = device_entry(DRIVER, device, healthy=False, policy=UnhealthyPolicy.TAINT)
    assert entry is not None and entry.get("taints") == [HEALTH_CRITICAL, FAULT]
    assert device_entry(DRIVER, replace(device, health=Health.OK), healthy=True, policy=UnhealthyPolicy.REMOVE) == (
        device_entry(DRIVER, replace(FULL, health=Health.OK), healthy=True, policy=UnhealthyPolicy.REMOVE)
    )


def test_servers_before_1_35_get_no_none_effect_taints() -> None:
    old = TaintRules(none_effect=False)
    warning = replace(FULL, health=Health.WARNING, faults=(1,))
    entry = device_entry(DRIVER, warning, healthy=True, policy=UnhealthyPolicy.TAINT, rules=old)
    assert entry is not None and "taints" not in entry
    critical = replace(FULL, health=Health.CRITICAL)
    entry = device_entry(DRIVER, critical, healthy=False, policy=UnhealthyPolicy.TAINT, rules=old)
    assert entry is not None and entry.get("taints") == [HEALTH_CRITICAL]


def test_remove_policy_drops_an_unhealthy_device() -> None:
    assert device_entry(DRIVER, FULL, healthy=False, policy=UnhealthyPolicy.REMOVE) is None


@pytest.mark.parametrize(
    ("count", "unhealthy", "policy", "sizes"),
    [
        (0, frozenset(), "remove", [0]),
        (1, frozenset(), "remove", [1]),
        (128, frozenset(), "remove", [128]),
        (129, frozenset(), "remove", [128, 1]),
        (300, frozenset(), "remove", [128, 128, 44]),
        (300, frozenset({5}), "remove", [128, 128, 43]),
        (300, frozenset(), "taint", [128, 128, 44]),
        (300, frozenset({5}), "taint", [64, 64, 64, 64, 44]),
        (64, frozenset({0}), "taint", [64]),
        (65, frozenset({0}), "taint", [64, 1]),
        (2, frozenset({0, 1}), "remove", [0]),
    ],
)
def test_chunking(count: int, unhealthy: frozenset[int], policy: str, sizes: list[int]) -> None:
    chunks = slice_specs(settings(policy), devices(count, unhealthy))
    assert [len(c) for c in chunks] == sizes
    assert [d["name"] for c in chunks for d in c] == [
        f"npu-{i}" for i in range(count) if policy == "taint" or i not in unhealthy
    ]


def test_devices_are_ordered_by_physical_id_whatever_the_input_order() -> None:
    chunks = slice_specs(settings(), list(reversed(devices(130))))
    assert [d["name"] for c in chunks for d in c] == [f"npu-{i}" for i in range(130)]


def test_every_slice_of_a_pool_carries_the_pool_and_the_node_owner() -> None:
    built = build_slices(settings(), devices(300), generation=7)
    assert len(built) == 3
    for item in built:
        assert item["apiVersion"] == "resource.k8s.io/v1" and item["kind"] == "ResourceSlice"
        assert item["metadata"] == {
            "generateName": "node-a-npu.huawei.com-",
            "labels": {"app.kubernetes.io/managed-by": "npu-plugin"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-uid", "controller": True}
            ],
        }
        assert item["spec"]["pool"] == {"name": "node-a", "generation": 7, "resourceSliceCount": 3}
        assert (item["spec"]["nodeName"], item["spec"]["driver"]) == ("node-a", DRIVER)


def test_without_a_node_uid_there_is_no_owner_reference() -> None:
    [item] = build_slices(settings(uid=None), devices(1), generation=1)
    assert "ownerReferences" not in item["metadata"]


def test_an_empty_pool_is_one_slice_without_devices() -> None:
    [item] = build_slices(settings(), [], generation=2)
    assert item["spec"]["devices"] == [] and item["spec"]["pool"]["resourceSliceCount"] == 1


def stored(
    devices_: list[dict[str, Any]], generation: int = 1, count: int = 1, uid: str = "node-uid", pool: str = "node-a"
) -> dict[str, Any]:
    return {
        "metadata": {"name": "x", "ownerReferences": [{"uid": uid}]},
        "spec": {"pool": {"name": pool, "generation": generation, "resourceSliceCount": count}, "devices": devices_},
    }


def test_stored_slices_match_in_any_order_and_with_server_defaults() -> None:
    desired = slice_specs(settings("taint"), devices(130, frozenset({1})))
    with_defaults = [
        {**d, "taints": [{**t, "timeAdded": "2026-01-01T00:00:00Z"} for t in d["taints"]]} if "taints" in d else d
        for d in desired[0]
    ]
    existing = [stored(desired[2], count=3), stored(with_defaults, count=3), stored(desired[1], count=3)]
    assert slices_match(existing, contents(desired), settings("taint"))


@pytest.mark.parametrize(
    "change",
    [
        {"count": 2},
        {"uid": "other-node-uid"},
        {"pool": "node-b"},
    ],
)
def test_a_differing_stored_slice_does_not_match(change: dict[str, Any]) -> None:
    desired = slice_specs(settings(), devices(2))
    assert slices_match([stored(desired[0])], contents(desired), settings())
    assert not slices_match([stored(desired[0], **change)], contents(desired), settings())


def test_slices_of_different_generations_do_not_match() -> None:
    desired = slice_specs(settings(), devices(129))
    assert slices_match([stored(desired[0], 4, 2), stored(desired[1], 4, 2)], contents(desired), settings())
    assert not slices_match([stored(desired[0], 4, 2), stored(desired[1], 5, 2)], contents(desired), settings())


def test_different_devices_or_slice_counts_do_not_match() -> None:
    desired = slice_specs(settings(), devices(2))
    assert not slices_match([stored(desired[0][:1])], contents(desired), settings())
    assert not slices_match([], contents(desired), settings())
    assert not slices_match([stored(desired[0]), stored([])], contents(desired), settings())
