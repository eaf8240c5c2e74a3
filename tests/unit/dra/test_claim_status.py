"""dra/claim_status.py: the status.devices entries of a prepared claim, and refusals told apart."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npu_plugin.ascend.vnpu import VnpuOrigin
from npu_plugin.dra.checkpoint import PreparedDevice, VnpuRecord
from npu_plugin.dra.claim_status import apply_body, device_statuses, missing_permission
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.errors import KubeApiError
from tests.support.fake_devices import profile_devices

DRIVER = "npu.huawei.com"
NOW = "2026-11-28T01:00:00Z"


def test_whole_npus_and_a_vnpu() -> None:
    vnpu = VnpuRecord(4, "vir05_1c_16g", 164, VnpuOrigin.DYNAMIC)
    devices = (
        PreparedDevice(("train",), "n1", "npu-2", 2, ("cdi-train",)),
        PreparedDevice(("train",), "n1", "npu-0", 0, ()),
        PreparedDevice(("infer",), "n1", "npu-4-vir05-1c-16g-0", 4, ("cdi-infer",), vnpu),
    )
    entries = device_statuses(DRIVER, devices, NOW)
    assert [(e["driver"], e["pool"], e["device"]) for e in entries] == [
        (DRIVER, "n1", "npu-2"),
        (DRIVER, "n1", "npu-0"),
        (DRIVER, "n1", "npu-4-vir05-1c-16g-0"),
    ]
    assert [e["data"] for e in entries] == [
        {"physicalId": 2, "visibleDevices": "0,2"},
        {"physicalId": 0, "visibleDevices": "0,2"},
        {"physicalId": 4, "visibleDevices": "164", "vnpuId": 164, "vnpuTemplate": "vir05_1c_16g"},
    ]
    assert entries[0]["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Prepared",
            "message": entries[0]["conditions"][0]["message"],
            "lastTransitionTime": NOW,
        }
    ]
    body = apply_body(ClaimRef("ns", "uid-1", "claim"), entries)
    assert body["metadata"] == {"name": "claim", "namespace": "ns"} and body["kind"] == "ResourceClaim"


def test_the_chips_network_identity_joins_the_data() -> None:
    a2 = {d.physical_id: d for d in profile_devices("atlas-800t-a2")}
    a2[1] = replace(a2[1], super_pod_id=2, server_index=5, rack_id=0)
    devices = (
        PreparedDevice(("npu",), "n1", "npu-1", 1, ("cdi-npu",)),
        PreparedDevice(("npu",), "n1", "npu-9", 9, ()),  # gone from the inventory: ids only
    )
    first, gone = (e["data"] for e in device_statuses(DRIVER, devices, NOW, a2.get))
    assert first == {
        "physicalId": 1,
        "deviceIP": "192.168.100.102",
        "superPodId": 2,
        "serverIndex": 5,
        "rackId": 0,
        "visibleDevices": "1,9",
    }
    assert gone == {"physicalId": 9, "visibleDevices": "1,9"}


@pytest.mark.parametrize(
    ("status", "message", "missing"),
    [
        (403, "forbidden", 'resource="resourceclaims/status", verb="patch"'),
        (
            422,
            'status.devices: Forbidden: changing status.devices requires resource="resourceclaims/driver", '
            'verb="[associated-node:patch arbitrary-node:patch]" permission: ...',
            'resource="resourceclaims/driver", verb="[associated-node:patch arbitrary-node:patch]"',
        ),
        (422, "status.devices[0]: Invalid value: must be an allocated device in the claim", None),
        (500, "boom", None),
    ],
)
def test_a_refusal_names_the_missing_permission(status: int, message: str, missing: str | None) -> None:
    assert missing_permission(KubeApiError("apply", status, message)) == missing


def test_a_share_is_named_by_its_share_id_and_sees_its_chip() -> None:
    devices = (PreparedDevice(("npu",), "n1", "npu-3", 3, ("cdi-share",), share_id="5f0b6d5e"),)
    [entry] = device_statuses(DRIVER, devices, NOW)
    assert (entry["device"], entry["shareID"], entry["data"]) == (
        "npu-3",
        "5f0b6d5e",
        {"physicalId": 3, "visibleDevices": "3"},
    )
