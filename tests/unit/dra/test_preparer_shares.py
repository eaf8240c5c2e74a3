"""Prepare and Unprepare of shares of a shared chip (--share-devices): one CDI device per claim,
device and share, the checkpoint holding each share, and the collisions refused per claim."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.dra.checkpoint import Checkpoint
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.dra.preparer import Preparer
from tests.support.cdi_validation import assert_valid_cdi
from tests.unit.dra.test_preparer import DRIVER, Claims, checkpoint_claims, make_preparer, ours

SHARE_A, SHARE_B = "0b7e6c2a-5f0e-4c1e-9a55-1f2d3c4b5a60", "7d1f3a9e-2c4b-4e8f-b6a1-0e9d8c7b6a50"


@pytest.fixture
def claims() -> Claims:
    return Claims()


@pytest.fixture
def preparer(tmp_path: Path, claims: Claims) -> Preparer:
    made = make_preparer(tmp_path, claims)
    made.shared = lambda physical_id: physical_id in (0, 1)
    return made


def share(device: str, share_id: str, request: str = "npu") -> dict[str, Any]:
    return {**ours(device, request), "shareID": share_id, "consumedCapacity": {"memory": "16Gi"}}


def spec(preparer: Preparer, uid: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((preparer.cdi_root / f"{DRIVER}-claim_{uid}.json").read_text())
    return document


def test_two_claims_share_a_chip_each_with_its_own_cdi_device(preparer: Preparer, claims: Claims) -> None:
    a = claims.add("a", "uid-a", [share("npu-0", SHARE_A)])
    b = claims.add("b", "uid-b", [share("npu-0", SHARE_B)])
    results = preparer.prepare([a, b])
    assert [d.share_id for r in results.values() for d in r.devices] == [SHARE_A, SHARE_B]
    assert results["uid-a"].devices[0].cdi_device_ids == (f"{DRIVER}/npu=uid-a-npu-0-{SHARE_A}",)
    for uid in ("uid-a", "uid-b"):
        document = spec(preparer, uid)
        assert_valid_cdi(document)
        (device,) = document["devices"]
        assert "ASCEND_VISIBLE_DEVICES=0" in device["containerEdits"]["env"]
    assert checkpoint_claims(preparer)["uid-a"]["devices"][0]["shareId"] == SHARE_A
    assert Checkpoint.from_bytes(preparer.store.path.read_bytes()).shares_held() == {0: 2}
    # Unprepare of one share leaves the other alone.
    assert preparer.unprepare([a]) == {"uid-a": ""}
    assert list(checkpoint_claims(preparer)) == ["uid-b"]
    assert spec(preparer, "uid-b")["devices"][0]["name"] == f"uid-b-npu-0-{SHARE_B}"
    assert preparer.prepare([b])["uid-b"].devices[0].share_id == SHARE_B


@pytest.mark.parametrize(
    ("held", "asked", "problem"),
    [
        (
            [share("npu-0", SHARE_A)],
            [share("npu-0", SHARE_A)],
            f"device npu-0: share {SHARE_A} is already prepared for claim uid-a",
        ),
        (
            [share("npu-0", SHARE_A)],
            [ours("npu-0")],
            "device npu-0: claim uid-a holds a share of it; it cannot be prepared whole",
        ),
        (
            [ours("npu-0")],
            [share("npu-0", SHARE_B)],
            f"device npu-0: claim uid-a holds it whole; share {SHARE_B} cannot be prepared",
        ),
    ],
    ids=["same-share", "whole-beside-shares", "share-beside-whole"],
)
def test_a_collision_is_refused_for_that_claim_only(
    preparer: Preparer, claims: Claims, held: list[dict[str, Any]], asked: list[dict[str, Any]], problem: str
) -> None:
    a = claims.add("a", "uid-a", held)
    assert not preparer.prepare([a])["uid-a"].error
    b = claims.add("b", "uid-b", asked)
    c = claims.add("c", "uid-c", [share("npu-1", SHARE_B)])
    results = preparer.prepare([b, c])
    assert results["uid-b"].error == f"claim ns/b: {problem}"
    assert not results["uid-c"].error
    assert sorted(checkpoint_claims(preparer)) == ["uid-a", "uid-c"]


@pytest.mark.parametrize(
    ("results", "problem"),
    [
        (
            [share("npu-2", SHARE_A)],
            f"device npu-2 is allocated as share {SHARE_A}, but npu-2 is not shared (--share-devices)",
        ),
        ([share("npu-0", "not/a uid")], "malformed allocation result: shareID 'not/a uid' of npu-0 is not a UID"),
        ([{**share("npu-0", SHARE_A), "shareID": 7}], "malformed allocation result: shareID 7 of npu-0 is not a UID"),
        (
            [share("npu-0", SHARE_A), share("npu-0", SHARE_A, "two")],
            f"device(s) npu-0 (share {SHARE_A}) allocated more than once in this claim",
        ),
        (
            [share("npu-0", SHARE_A), ours("npu-3")],
            "request 'npu' holds a share of a shared NPU together with other devices",
        ),
    ],
    ids=["unshared-chip", "malformed", "not-a-string", "twice", "not-alone"],
)
def test_a_bad_share_allocation_is_refused(
    preparer: Preparer, claims: Claims, results: list[dict[str, Any]], problem: str
) -> None:
    ref = claims.add("a", "uid-a", results)
    assert preparer.prepare([ref])["uid-a"].error.startswith(f"claim ns/a: {problem}")
    assert not preparer.store.path.exists() or checkpoint_claims(preparer) == {}


def test_two_shares_of_one_chip_in_two_requests_of_one_claim(preparer: Preparer, claims: Claims) -> None:
    ref = claims.add("a", "uid-a", [share("npu-0", SHARE_A, "one"), share("npu-0", SHARE_B, "two")])
    devices = preparer.prepare([ref])["uid-a"].devices
    assert [d.cdi_device_ids for d in devices] == [
        (f"{DRIVER}/npu=uid-a-npu-0-{SHARE_A}",),
        (f"{DRIVER}/npu=uid-a-npu-0-{SHARE_B}",),
    ]


def test_a_checkpoint_from_before_sharing_loads_and_holds_its_devices_whole(preparer: Preparer, claims: Claims) -> None:
    old = {
        "version": 1,
        "bootId": "boot",
        "claims": {
            "uid-old": {
                "namespace": "ns",
                "name": "old",
                "state": "PrepareCompleted",
                "devices": [
                    {"requestNames": ["npu"], "poolName": "node-a", "deviceName": "npu-0", "cdiDeviceIds": ["x"]}
                ],
            }
        },
    }
    preparer.store.path.write_text(json.dumps(old))
    loaded = Checkpoint.from_bytes(preparer.store.path.read_bytes())
    assert loaded.claims["uid-old"].devices[0].share_id is None
    ref = claims.add("a", "uid-a", [share("npu-0", SHARE_A)])
    assert preparer.prepare([ref])["uid-a"].error == (
        f"claim ns/a: device npu-0: claim uid-old holds it whole; share {SHARE_A} cannot be prepared"
    )
    assert preparer.prepare([ClaimRef("ns", "uid-old", "old")])["uid-old"].devices[0].share_id is None


def test_a_share_round_trips_through_the_checkpoint() -> None:
    from npu_plugin.dra.checkpoint import PREPARE_COMPLETED, ClaimEntry, PreparedDevice

    device = PreparedDevice(("npu",), "node-a", "npu-0", 0, ("c",), share_id=SHARE_A)
    checkpoint = Checkpoint("boot", {"u": ClaimEntry("ns", "n", PREPARE_COMPLETED, (device,))})
    assert Checkpoint.from_bytes(checkpoint.to_bytes()) == checkpoint
    whole = replace(device, share_id=None)
    assert (
        "shareId"
        not in json.loads(Checkpoint("b", {"u": ClaimEntry("ns", "n", PREPARE_COMPLETED, (whole,))}).to_bytes())[
            "claims"
        ]["u"]["devices"][0]
    )
