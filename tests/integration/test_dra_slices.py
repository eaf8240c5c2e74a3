"""ResourceSlices a DRA daemon publishes through the fake API: shape, chunking, CEL,
reconciliation."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from npu_plugin.sim.scheduler import published_devices, select
from tests.support.daemon import REPO, Launcher, wait_until, write_inventory
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    dra_args,
    node_slices,
    pool_settled,
    published_names,
    with_health,
)
from tests.support.fake_devices import many_devices, profile_devices
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
A2 = profile_devices("atlas-800t-a2")


def settled(api: FakeKubeAPI, names: list[str], timeout: float = 10.0) -> list[dict[str, Any]]:
    """The slices once the pool is consistent and publishes exactly `names`."""
    wait_until(lambda: pool_settled(api) and published_names(api) == names, timeout, f"slices with {names}")
    slices = pool_settled(api)
    assert slices is not None
    return slices


def generation(slices: list[dict[str, Any]]) -> int:
    generations = {s["spec"]["pool"]["generation"] for s in slices}
    assert len(generations) == 1, f"one generation across the pool, got {generations}"
    return int(generations.pop())


def test_a_slice_has_the_contracted_shape(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    launch_daemon(*dra_args(workspace, pod_uid="pod-uid-1"))
    [published] = settled(fake_api, [f"npu-{i}" for i in range(8)])
    node_uid = fake_api.get_object("Node", NODE)["metadata"]["uid"]  # type: ignore[index]
    metadata, spec = published["metadata"], published["spec"]
    assert metadata["generateName"] == f"{NODE}-{DRIVER}-" and metadata["name"].startswith(f"{NODE}-{DRIVER}-")
    assert metadata["annotations"] == {"npu.huawei.com/publisher": "pod-uid-1"}  # who wrote it last
    assert metadata["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
    ]
    assert (spec["nodeName"], spec["driver"]) == (NODE, DRIVER)
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert spec["devices"][5] == {
        "name": "npu-5",
        "attributes": {
            "chipName": {"string": "910B3"},
            "deviceType": {"string": "Ascend910B"},
            "physicalId": {"int": 5},
            "logicId": {"int": 5},
            "cardId": {"int": 5},
            "chipId": {"int": 0},
            "topologyGroup": {"string": "ring-0"},
            "numaNode": {"int": 2},
            "driverVersion": {"string": "24.1.rc1"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:02:00.0"},
            "deviceIP": {"string": "192.168.100.106"},
        },
        "capacity": {"memCapacity": {"value": "64Gi"}, "aiCore": {"value": "20"}},
    }


def test_optional_attributes_are_left_out_when_unknown(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    entry = "{physicalId: 0, logicId: 3, cardId: 1, chipName: 910B3, memory: 32Gi}"
    workspace.inventory.write_text(f"devices:\n  - {entry}\n")
    launch_daemon(*dra_args(workspace))
    [device] = settled(fake_api, ["npu-0"])[0]["spec"]["devices"]
    assert set(device["attributes"]) == {
        "chipName",
        "deviceType",
        "physicalId",
        "logicId",
        "cardId",
        "chipId",
        "topologyGroup",
    }
    assert device["attributes"]["logicId"] == {"int": 3} and device["attributes"]["cardId"] == {"int": 1}
    assert device["capacity"] == {"memCapacity": {"value": "32Gi"}}


def test_network_identity_attributes_and_a_device_without_ip(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    workspace.inventory.write_text(
        "devices:\n"
        "  - {physicalId: 0, chipName: '910', deviceType: Ascend910C, deviceIP: 10.0.0.1, superPodId: 7,"
        " serverIndex: 3, rackId: 2}\n"
        "  - {physicalId: 1, chipName: '910', deviceType: Ascend910C, superPodId: 7, serverIndex: 3}\n"
    )
    daemon = launch_daemon(*dra_args(workspace))
    slices = settled(fake_api, ["npu-0", "npu-1"])
    first, second = slices[0]["spec"]["devices"]
    identity = ("deviceIP", "superPodId", "serverIndex", "rackId")
    assert {k: v for k, v in first["attributes"].items() if k in identity} == {
        "deviceIP": {"string": "10.0.0.1"},
        "superPodId": {"int": 7},
        "serverIndex": {"int": 3},
        "rackId": {"int": 2},
    }
    assert {k: v for k, v in second["attributes"].items() if k in identity} == {
        "superPodId": {"int": 7},
        "serverIndex": {"int": 3},
    }
    # An attribute a device lacks is a CEL runtime error, as in Kubernetes: selectors guard with has().
    attributes = 'device.attributes["npu.huawei.com"]'
    cel = f'has({attributes}.deviceIP) && {attributes}.deviceIP == "10.0.0.1"'
    assert [d.entry["name"] for d in select(published_devices(slices), [cel])] == ["npu-0"]
    same_pod = 'device.attributes["npu.huawei.com"].superPodId == 7'
    assert [d.entry["name"] for d in select(published_devices(slices), [same_pod])] == ["npu-0", "npu-1"]
    assert daemon.log().count("no device IP for") == 1 and "no device IP for npu-1:" in daemon.log()


def test_300_devices_are_chunked_at_128(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    write_inventory(workspace.inventory, many_devices(300))
    launch_daemon(*dra_args(workspace))
    slices = settled(fake_api, [f"npu-{i}" for i in range(300)])
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert generation(slices) == 1


def test_taints_halve_the_chunk_size(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    fake_api.set_kubernetes_version(34, device_taints=True)
    write_inventory(workspace.inventory, with_health(many_devices(300), {7}))
    launch_daemon(*dra_args(workspace, "--unhealthy-policy", "taint"))
    slices = settled(fake_api, [f"npu-{i}" for i in range(300)])
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 64, 64, 64, 44]
    tainted = {d["name"]: d["taints"] for s in slices for d in s["spec"]["devices"] if d.get("taints")}
    assert list(tainted) == ["npu-7"]
    assert [{k: t[k] for k in ("key", "value", "effect")} for t in tainted["npu-7"]] == [
        {"key": "npu.huawei.com/health", "value": "Critical", "effect": "NoSchedule"}
    ]


SEED_EXPECTATIONS = [
    ('device.driver == "npu.huawei.com"', range(300)),
    ('device.attributes["npu.huawei.com"].numaNode == 6', range(48, 56)),
    (
        'has(device.attributes["npu.huawei.com"].numaNode) && device.attributes["npu.huawei.com"].numaNode == 6',
        range(48, 56),
    ),
    ('device.attributes["npu.huawei.com"].chipName == "910B3"', range(300)),
    (
        'device.attributes["npu.huawei.com"].chipName.startsWith("910B") && '
        'device.attributes["npu.huawei.com"].cardId == 7',
        range(14, 16),
    ),
    ('device.attributes["npu.huawei.com"].topologyGroup == "ring-3"', range(24, 32)),
    ('device.attributes["npu.huawei.com"].deviceType == "Ascend910B"', range(300)),
    ('device.attributes["npu.huawei.com"].physicalId >= 296', range(296, 300)),
    ('device.attributes["resource.kubernetes.io"].pciBusID == "0000:00:06.1"', range(49, 50)),
    ('device.capacity["npu.huawei.com"].memCapacity.compareTo(quantity("64Gi")) >= 0', range(300)),
    ('device.capacity["npu.huawei.com"].memCapacity.compareTo(quantity("65Gi")) >= 0', range(0)),
]


def manifest_selectors() -> list[str]:
    """Every CEL expression in the shipped DeviceClasses and examples."""
    found = []
    for path in sorted((REPO / "manifests").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            found += _expressions(document)
    return found


def _expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        cel = node.get("cel")
        own = [cel["expression"]] if isinstance(cel, dict) and "expression" in cel else []
        return own + [e for value in node.values() for e in _expressions(value)]
    if isinstance(node, list):
        return [e for item in node for e in _expressions(item)]
    return []


def test_seed_selectors_select_exactly_the_right_published_devices(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    write_inventory(workspace.inventory, many_devices(300))
    launch_daemon(*dra_args(workspace))
    devices = published_devices(settled(fake_api, [f"npu-{i}" for i in range(300)]))
    for expression, expected in SEED_EXPECTATIONS:
        chosen = [d.entry["name"] for d in select(devices, [expression])]
        assert chosen == [f"npu-{i}" for i in expected], expression
    shipped = manifest_selectors()
    assert shipped, "the manifests carry CEL selectors"
    # They compile and evaluate without error over what we publish. The 300 devices carry the same
    # attributes with other values, so one NUMA node's eight show every shape at an eighth of the
    # cost of all of them (about 7,000 CEL evaluations, most of this test's time).
    assert {frozenset(d.entry["attributes"]) for d in devices} == {frozenset(devices[0].entry["attributes"])}
    for expression in shipped:
        select(devices[:8], [expression])


def test_health_fault_and_recovery_reconcile_with_a_generation_bump(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    everything = [f"npu-{i}" for i in range(8)]
    assert generation(settled(fake_api, everything)) == 1
    write_inventory(workspace.inventory, with_health(A2, {3}))
    assert generation(settled(fake_api, [n for n in everything if n != "npu-3"])) == 2
    write_inventory(workspace.inventory, A2)
    assert generation(settled(fake_api, everything)) == 3


def test_taint_policy_keeps_an_unhealthy_device_with_a_taint(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(34, device_taints=True)
    launch_daemon(*dra_args(workspace, "--unhealthy-policy", "taint"))
    everything = [f"npu-{i}" for i in range(8)]
    settled(fake_api, everything)
    write_inventory(workspace.inventory, with_health(A2, {3}))

    def tainted() -> list[str]:
        return [d["name"] for s in node_slices(fake_api) for d in s["spec"]["devices"] if d.get("taints")]

    wait_until(lambda: tainted() == ["npu-3"], 10, "npu-3 tainted")
    assert published_names(fake_api) == everything
    write_inventory(workspace.inventory, A2)
    wait_until(lambda: not tainted(), 10, "taint removed")


def test_slices_deleted_by_someone_else_are_back_within_5s(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    write_inventory(workspace.inventory, many_devices(200))
    launch_daemon(*dra_args(workspace))
    names = [f"npu-{i}" for i in range(200)]
    before = generation(settled(fake_api, names))
    doomed = node_slices(fake_api)[1]["metadata"]["name"]
    fake_api.delete_object("ResourceSlice", doomed)
    after = settled(fake_api, names, timeout=5.0)
    assert generation(after) > before
    for item in node_slices(fake_api):
        fake_api.delete_object("ResourceSlice", item["metadata"]["name"])
    settled(fake_api, names, timeout=5.0)


def test_a_slice_edited_by_someone_else_is_restored(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    everything = [f"npu-{i}" for i in range(8)]
    [published] = settled(fake_api, everything)
    published["spec"]["devices"] = published["spec"]["devices"][:2]
    fake_api.put_object("ResourceSlice", published)
    wait_until(lambda: published_names(fake_api) == ["npu-0", "npu-1"], 5, "the edit stored")
    settled(fake_api, everything, timeout=5.0)


def test_slices_stay_when_the_daemon_stops(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))
    settled(fake_api, [f"npu-{i}" for i in range(8)])
    code, _ = daemon.signal(signal.SIGTERM, timeout=10)
    assert code == 0
    assert published_names(fake_api) == [f"npu-{i}" for i in range(8)]


def strip_server_fields(item: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in item["metadata"].items() if k in ("generateName",)}
    spec = {**item["spec"], "pool": {k: v for k, v in item["spec"]["pool"].items() if k != "generation"}}
    return {**item, "metadata": metadata, "spec": spec}


def test_inventory_command_prints_what_the_daemon_publishes(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_plugin",
            "inventory",
            "--output",
            "resourceslice",
            "--node-name",
            NODE,
            "--backend",
            "fake",
            "--fake-profile",
            "atlas-800t-a2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(REPO),
    ).stdout
    documents = list(yaml.safe_load_all(printed))
    for document in documents:
        kubernetes_validate.validate(document, "1.34", strict=True)
    launch_daemon(*dra_args(workspace))
    published = settled(fake_api, [f"npu-{i}" for i in range(8)])
    for item in published:
        kubernetes_validate.validate(item, "1.34", strict=True)
    assert [strip_server_fields(d) for d in documents] == [strip_server_fields(p) for p in published]
    assert all("ownerReferences" not in d["metadata"] for d in documents)


@pytest.mark.parametrize("policy", ["remove", "taint"])
def test_inventory_command_honours_the_unhealthy_policy(tmp_path: Path, policy: str) -> None:
    inventory = tmp_path / "inventory.yaml"
    write_inventory(inventory, with_health(A2, {2}))
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_plugin",
            "inventory",
            "--output",
            "resourceslice",
            "--node-name",
            NODE,
            "--backend",
            "fake",
            "--fake-inventory",
            str(inventory),
            "--unhealthy-policy",
            policy,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    [document] = list(yaml.safe_load_all(printed))
    kubernetes_validate.validate(document, "1.34", strict=True)
    devices = {d["name"]: d for d in document["spec"]["devices"]}
    if policy == "remove":
        assert "npu-2" not in devices and len(devices) == 7
    else:
        health = {"key": "npu.huawei.com/health", "value": "Critical", "effect": "NoSchedule"}
        assert devices["npu-2"]["taints"] == [health]
