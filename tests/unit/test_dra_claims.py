"""dra/claims.py: from a ResourceClaim to our devices, with every refusal."""

from __future__ import annotations

from typing import Any

import pytest

from npu_plugin.dra.claims import ClaimDevice, base_request, claim_devices
from npu_plugin.errors import ClaimError

UID, DRIVER, POOL = "9a0b", "npu.huawei.com", "node-a"


def claim(*results: dict[str, Any], uid: str = UID) -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "status": {"allocation": {"devices": {"results": list(results)}}}}


def ours(device: str, request: str = "npu", pool: str = POOL) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": pool, "device": device}


def refuse_7(physical_id: int) -> str | None:
    return "already prepared for claim other" if physical_id == 7 else None


def devices_of(raw: dict[str, Any]) -> list[ClaimDevice]:
    return claim_devices(raw, uid=UID, driver=DRIVER, pool=POOL, refuse_device=refuse_7)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (claim(ours("npu-1")), [ClaimDevice("npu", POOL, "npu-1", 1)]),
        (
            claim(ours("npu-1", "a"), ours("npu-2", "b"), ours("npu-3", "a")),
            [
                ClaimDevice("a", POOL, "npu-1", 1),
                ClaimDevice("b", POOL, "npu-2", 2),
                ClaimDevice("a", POOL, "npu-3", 3),
            ],
        ),
        (claim(ours("npu-4", "npu/small")), [ClaimDevice("npu", POOL, "npu-4", 4)]),
        (
            claim({"request": "gpu", "driver": "gpu.example.com", "pool": "x", "device": "gpu-0"}, ours("npu-5")),
            [ClaimDevice("npu", POOL, "npu-5", 5)],
        ),
        (claim("not a mapping", ours("npu-6")), [ClaimDevice("npu", POOL, "npu-6", 6)]),  # type: ignore[arg-type]
    ],
    ids=["one", "several-requests", "subrequest", "other-driver-ignored", "junk-entry-ignored"],
)
def test_our_results_become_claim_devices(raw: dict[str, Any], expected: list[ClaimDevice]) -> None:
    assert devices_of(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (claim(ours("npu-1"), uid="other"), "claim UID mismatch: the kubelet asked for 9a0b, the API has other"),
        ({"metadata": {"uid": UID}}, "the claim is not allocated"),
        ({"metadata": {"uid": UID}, "status": {"allocation": None}}, "the claim is not allocated"),
        ({"metadata": {"uid": UID}, "status": "weird"}, "the claim is not allocated"),
        ({"metadata": {"uid": UID}, "status": {"allocation": {"devices": {"results": {}}}}}, "is not a list"),
        (claim(), "no allocation results for driver npu.huawei.com"),
        (
            claim({"request": "gpu", "driver": "gpu.example.com", "pool": "x", "device": "gpu-0"}),
            "no allocation results for driver",
        ),
        (claim(ours("npu-1", pool="node-b")), "device npu-1 is in pool 'node-b', not this node's pool 'node-a'"),
        (claim(ours("gpu-1")), "unknown device 'gpu-1'"),
        (claim(ours("npu-x")), "unknown device 'npu-x'"),
        (claim(ours("npu-7")), "device npu-7: already prepared for claim other"),
        (claim({"driver": DRIVER, "pool": POOL, "device": "npu-1"}), "request and device must be strings"),
        (claim({"request": "", "driver": DRIVER, "pool": POOL, "device": "npu-1"}), "request and device"),
        (claim({"request": "npu", "driver": DRIVER, "pool": POOL, "device": 1}), "request and device"),
        (claim(ours("npu-1"), ours("npu-7")), "device npu-7: already prepared"),
        # Other spellings of device 7 must not slip past the holder check, which compares names.
        (claim(ours("npu-07")), "unknown device 'npu-07'"),
        (claim(ours("npu-7\n")), "unknown device"),
        (claim(ours("npu-\u0667")), "unknown device"),
        # The base request name becomes part of a CDI device name.
        (claim(ours("npu-1", "Big NPU")), "request name 'Big NPU' is not a DNS label"),
        (claim(ours("npu-1", "npu/../x")), "is not a DNS label"),
        (claim(ours("npu-1", "n" * 64)), "is not a DNS label"),
        (claim(ours("npu-1"), ours("npu-2"), ours("npu-1", "other")), "device(s) npu-1 allocated more than once"),
    ],
)
def test_refusals(raw: dict[str, Any], reason: str) -> None:
    with pytest.raises(ClaimError) as raised:
        devices_of(raw)
    assert reason in str(raised.value)


@pytest.mark.parametrize(("name", "base"), [("npu", "npu"), ("npu/small", "npu"), ("a/b/c", "a")])
def test_base_request(name: str, base: str) -> None:
    assert base_request(name) == base
