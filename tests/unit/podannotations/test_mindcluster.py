"""MindCluster's annotations byte for byte: the expected strings are what Go's json.Marshal prints
for ascend-device-plugin's Instance struct (fields in its order, compact, device_id a string)."""

from __future__ import annotations

import json

import pytest

from npu_plugin.podannotations.mindcluster import (
    ASCEND_REAL,
    CONFIGURATION,
    KLT_DEV,
    AnnotatedDevice,
    NodeIdentity,
    configuration,
    device_targets,
    go_json,
    pod_annotations,
)
from npu_plugin.podannotations.writer import node_address

NODE = NodeIdentity("192.168.1.10")
A3 = NodeIdentity("192.168.1.11", super_pod_id=3, rack_id=1, server_index="2", server_ip="10.0.0.2")


@pytest.mark.parametrize(
    ("node", "devices", "expected"),
    [
        (
            NODE,
            [AnnotatedDevice(1, "10.20.0.2"), AnnotatedDevice(0, "10.20.0.1")],
            '{"pod_name":"train-0","server_id":"192.168.1.10","host_ip":"192.168.1.10","super_pod_id":-1,'
            '"devices":[{"device_id":"0","device_ip":"10.20.0.1"},{"device_id":"1","device_ip":"10.20.0.2"}],'
            '"rack_id":-1,"server_index":"","server_ip":""}',
        ),
        (
            A3,
            [AnnotatedDevice(5, "10.20.0.6", super_device_id=37)],
            '{"pod_name":"train-0","server_id":"192.168.1.11","host_ip":"192.168.1.11","super_pod_id":3,'
            '"devices":[{"device_id":"5","device_ip":"10.20.0.6","super_device_id":"37"}],'
            '"rack_id":1,"server_index":"2","server_ip":"10.0.0.2"}',
        ),
        (
            NODE,
            [],
            '{"pod_name":"train-0","server_id":"192.168.1.10","host_ip":"192.168.1.10","super_pod_id":-1,'
            '"devices":[],"rack_id":-1,"server_index":"","server_ip":""}',
        ),
    ],
)
def test_the_configuration_is_what_go_marshals(
    node: NodeIdentity, devices: list[AnnotatedDevice], expected: str
) -> None:
    text = configuration("train-0", node, devices)
    assert text == expected
    assert all(isinstance(d["device_id"], str) for d in json.loads(text)["devices"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": "<&>"}, '{"a":"\\u003c\\u0026\\u003e"}'),
        ({"a": "é\u2028"}, '{"a":"é\\u2028"}'),
        ({"a": [1, -1], "b": None}, '{"a":[1,-1],"b":null}'),
    ],
)
def test_go_json_escapes_as_go_does(value: object, expected: str) -> None:
    assert go_json(value) == expected


def test_all_three_annotations_for_devices_with_ips() -> None:
    got = pod_annotations(
        "p", NODE, ["Ascend910-3", "Ascend910-0"], ["Ascend910-0", "Ascend910-3"], [AnnotatedDevice(0, "1.1.1.1")]
    )
    assert got.without_configuration is None
    assert got.values[KLT_DEV] == "Ascend910-3,Ascend910-0"
    assert got.values[ASCEND_REAL] == "Ascend910-0,Ascend910-3"
    assert json.loads(got.values[CONFIGURATION])["devices"] == [{"device_id": "0", "device_ip": "1.1.1.1"}]


@pytest.mark.parametrize("missing", [None, ""])
def test_a_device_without_ip_leaves_the_configuration_out_and_says_which(missing: str | None) -> None:
    got = pod_annotations(
        "p",
        NODE,
        ["Ascend910-0", "Ascend910-1"],
        ["Ascend910-0", "Ascend910-1"],
        [AnnotatedDevice(0, "1.1.1.1"), AnnotatedDevice(1, missing)],
    )
    assert set(got.values) == {KLT_DEV, ASCEND_REAL}
    assert got.without_configuration == "npu-1 has no device IP"


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (
            {
                "status": {
                    "addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "10.0.0.5"}]
                }
            },
            "10.0.0.5",
        ),
        ({"status": {"addresses": [{"type": "Hostname", "address": "n"}]}}, "n"),
        ({"status": {"addresses": "bad"}}, None),
        ({}, None),
    ],
)
def test_node_address_prefers_the_internal_ip(node: dict[str, object], expected: str | None) -> None:
    assert node_address(node) == expected


@pytest.mark.parametrize(
    ("reserved_for", "expected"),
    [
        ([{"resource": "pods", "name": "p", "uid": "u1"}], [("ns", "p", "u1")]),
        ([{"resource": "pods", "name": "p", "uid": "u1", "apiGroup": "apps"}], []),
        ([{"resource": "jobs", "name": "j"}, "junk", {"resource": "pods"}], []),
        (None, []),
        ("pods", []),
    ],
)
def test_device_targets_are_the_pods_a_claim_is_reserved_for(
    reserved_for: object, expected: list[tuple[str, str, str]]
) -> None:
    assert [(p.namespace, p.name, p.uid) for p in device_targets(reserved_for, "ns")] == expected


def test_claim_jobs_give_each_pod_the_npus_of_all_its_claims() -> None:
    from npu_plugin.podannotations.mindcluster import PodRef
    from npu_plugin.podannotations.writer import claim_jobs
    from tests.support.fake_devices import profile_devices

    devices = {d.physical_id: d for d in profile_devices("atlas-800t-a2")}
    a, b = PodRef("ns", "a", "ua"), PodRef("ns", "b", "ub")
    jobs = claim_jobs(
        [
            ("ns/one", [a], [devices[5], devices[1]]),
            ("ns/two", [a, b], [devices[0]]),
            ("ns/three", [], [devices[7]]),
        ]
    )
    assert [(j.pod, j.kubelet_ids, j.what) for j in jobs] == [
        (a, ("Ascend910-0", "Ascend910-1", "Ascend910-5"), "claims ns/one, ns/two"),
        (b, ("Ascend910-0",), "claim ns/two"),
    ]
    assert all(j.real_ids == j.kubelet_ids and not j.extra for j in jobs)


def test_the_server_fields_come_from_the_devices_and_default_to_mindclusters_none() -> None:
    from dataclasses import replace

    from npu_plugin.podannotations.mindcluster import annotated, server_of
    from tests.support.fake_devices import profile_devices

    a2 = profile_devices("atlas-800t-a2")[:2]
    assert server_of(a2) == NodeIdentity("", super_pod_id=-1, rack_id=-1, server_index="")
    a3 = [replace(d, super_pod_id=3, server_index=1, rack_id=0) for d in a2]
    assert server_of(a3) == NodeIdentity("", super_pod_id=3, rack_id=0, server_index="1")
    assert annotated(a2[1]) == AnnotatedDevice(1, "192.168.100.102")
