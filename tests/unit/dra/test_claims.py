"""dra/claims.py: from a ResourceClaim to our devices, with every refusal."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from npu_plugin.ascend.vnpu import ChipMode, ChipVnpu, Vnpu, VnpuChips, VnpuOrigin, VnpuTemplate
from npu_plugin.dra.claims import ClaimDevice, Holding, WantedVnpu, base_request, claim_devices, overlap_problem
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


# ---- vNPUs: a 910B3 table (chips 0 and 1 split on demand, chip 5 serving its vNPU 180 as it is)

V05 = VnpuTemplate(
    "vir05_1c_16g", 5, 16 * 2**30, {"aicpu": Decimal(1), "vpc": Decimal(2), "jpegd": Decimal(6), "jpege": Decimal(1)}
)
V10 = VnpuTemplate(
    "vir10_3c_32g",
    10,
    32 * 2**30,
    {"aicpu": Decimal(3), "vpc": Decimal(4), "vdec": Decimal(1), "jpegd": Decimal(12), "jpege": Decimal(2)},
)
TOTALS = {
    "aicore": Decimal(20),
    "aicpu": Decimal(7),
    "vpc": Decimal(9),
    "vdec": Decimal(2),
    "jpegd": Decimal(24),
    "jpege": Decimal(4),
}


def chip(physical_id: int, *vnpus: tuple[int, str]) -> ChipVnpu:
    first = physical_id * 16 + 100
    return ChipVnpu(
        physical_id,
        ChipMode.CONTAINER,
        TOTALS,
        (V05, V10),
        (first, first + 15),
        dynamic_supported=True,
        vnpus=tuple(Vnpu(physical_id, i, t) for i, t in vnpus),
    )


# Chip 3 is offered whole (say it is in VM mode).
SERVED = VnpuChips({0: chip(0), 1: chip(1), 3: chip(3), 5: chip(5, (180, "vir10_3c_32g"))}, frozenset({0, 1}))


def vnpu_claim(*results: dict[str, Any], reserved_for: int = 1) -> dict[str, Any]:
    raw = claim(*results)
    raw["status"]["reservedFor"] = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(reserved_for)]
    return raw


def vnpu_devices(raw: dict[str, Any], offered: frozenset[str] | None = None) -> list[ClaimDevice]:
    served = VnpuChips(SERVED.chips, SERVED.dynamic, offered)
    return claim_devices(raw, uid=UID, driver=DRIVER, pool=POOL, refuse_device=refuse_7, vnpus=served)


DYNAMIC_05 = WantedVnpu("vir05_1c_16g", VnpuOrigin.DYNAMIC)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            vnpu_claim(ours("npu-0-vir05-1c-16g-3", "vnpu")),
            [ClaimDevice("vnpu", POOL, "npu-0-vir05-1c-16g-3", 0, DYNAMIC_05)],
        ),
        (
            vnpu_claim(ours("npu-1-vir10-3c-32g-1", "big")),
            [ClaimDevice("big", POOL, "npu-1-vir10-3c-32g-1", 1, WantedVnpu("vir10_3c_32g", VnpuOrigin.DYNAMIC))],
        ),
        (
            vnpu_claim(ours("npu-5-vnpu-180", "vnpu")),
            [ClaimDevice("vnpu", POOL, "npu-5-vnpu-180", 5, WantedVnpu("vir10_3c_32g", VnpuOrigin.STATIC, 180))],
        ),
        (
            vnpu_claim(ours("npu-0-vir05-1c-16g-0", "a"), ours("npu-1", "b")),
            [ClaimDevice("a", POOL, "npu-0-vir05-1c-16g-0", 0, DYNAMIC_05), ClaimDevice("b", POOL, "npu-1", 1)],
        ),
        (
            vnpu_claim(ours("npu-0"), ours("npu-3")),
            [ClaimDevice("npu", POOL, "npu-0", 0), ClaimDevice("npu", POOL, "npu-3", 3)],
        ),
        (
            claim(ours("npu-0-vir05-1c-16g-0", "vnpu")),
            [ClaimDevice("vnpu", POOL, "npu-0-vir05-1c-16g-0", 0, DYNAMIC_05)],
        ),
    ],
    ids=["candidate", "other-template", "static", "vnpu-and-whole-in-two-requests", "whole", "no-reserved-for"],
)
def test_the_three_name_forms(raw: dict[str, Any], expected: list[ClaimDevice]) -> None:
    assert vnpu_devices(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            vnpu_claim(ours("npu-0-vir05-1c-16g-0"), ours("npu-0-vir05-1c-16g-1")),
            "request 'npu' holds more than one vNPU (npu-0-vir05-1c-16g-0, npu-0-vir05-1c-16g-1)",
        ),
        (
            vnpu_claim(ours("npu-0-vir05-1c-16g-0"), ours("npu-1")),
            "request 'npu' holds a vNPU together with whole NPUs (npu-0-vir05-1c-16g-0, npu-1)",
        ),
        (vnpu_claim(ours("npu-0-vir05-1c-16g-4")), "npu-0-vir05-1c-16g-4: chip npu-0 holds 4 of vir05_1c_16g"),
        (vnpu_claim(ours("npu-0-vir07-0")), "npu-0-vir07-0: chip npu-0 offers no template 'vir07'"),
        (
            vnpu_claim(ours("npu-0-vir05-1c-16g-0"), reserved_for=2),
            "device npu-0-vir05-1c-16g-0 (a vNPU of npu-0) is reserved for 2 consumers",
        ),
        (
            vnpu_claim(ours("npu-1", "whole"), ours("npu-0-vir05-1c-16g-0"), reserved_for=3),
            "device npu-0-vir05-1c-16g-0 (a vNPU of npu-0) is reserved for 3 consumers",
        ),
        (vnpu_claim(ours("npu-7-vir05-1c-16g-0")), "device npu-7-vir05-1c-16g-0: already prepared for claim other"),
        (vnpu_claim(ours("npu-2-vir05-1c-16g-0")), "device npu-2-vir05-1c-16g-0: npu-2 serves no vNPUs"),
        (
            vnpu_claim(ours("npu-3-vir05-1c-16g-0")),
            "device npu-3-vir05-1c-16g-0: npu-3 is not split on demand; it is offered whole",
        ),
        (
            vnpu_claim(ours("npu-5-vir05-1c-16g-0")),
            "device npu-5-vir05-1c-16g-0: npu-5 is not split on demand; it serves the vNPUs it has as they are",
        ),
        (vnpu_claim(ours("npu-5-vnpu-181")), "device npu-5-vnpu-181: vNPU 181 no longer exists on npu-5"),
        (vnpu_claim(ours("npu-0-vnpu-100")), "device npu-0-vnpu-100: vNPU 100 no longer exists on npu-0"),
        (vnpu_claim(ours("npu-5")), "device npu-5: npu-5 holds vNPUs (180) and is not offered whole"),
        (vnpu_claim(ours("npu-0-vnpu-0100")), "unknown device 'npu-0-vnpu-0100'"),
        (vnpu_claim(ours("npu-0-vir05_1c_16g-0")), "unknown device"),
    ],
    ids=[
        "two-vnpus-in-a-request",
        "vnpu-and-whole-in-a-request",
        "k-beyond-n",
        "unknown-template",
        "reserved-for-two",
        "reserved-for-three-after-a-whole-npu",
        "chip-refused",
        "chip-without-vnpus",
        "chip-not-dynamic",
        "chip-with-foreign-vnpus",
        "static-gone",
        "static-never-there",
        "whole-of-a-split-chip",
        "leading-zero",
        "underscores",
    ],
)
def test_vnpu_refusals_name_the_device_and_the_chip(raw: dict[str, Any], reason: str) -> None:
    with pytest.raises(ClaimError) as raised:
        vnpu_devices(raw)
    assert reason in str(raised.value)


def test_a_template_not_offered_is_unknown() -> None:
    with pytest.raises(ClaimError, match="offers no template 'vir10-3c-32g'"):
        vnpu_devices(vnpu_claim(ours("npu-0-vir10-3c-32g-0")), offered=frozenset({"vir05_1c_16g"}))


def test_without_vnpu_plans_a_vnpu_name_is_refused() -> None:
    with pytest.raises(ClaimError, match="npu-0 serves no vNPUs"):
        devices_of(claim(ours("npu-0-vir05-1c-16g-0")))


def wanted(device: str, physical_id: int, template: str | None) -> ClaimDevice:
    vnpu = WantedVnpu(template, VnpuOrigin.DYNAMIC) if template else None
    return ClaimDevice("npu", POOL, device, physical_id, vnpu)


GATE = "(is DRAPartitionableDevices enabled on kube-scheduler?)"


@pytest.mark.parametrize(
    ("chips", "held", "mine", "problem", "recorded"),
    [
        ({0: chip(0)}, [], [wanted("npu-0-vir05-1c-16g-0", 0, "vir05_1c_16g")], None, set()),
        ({0: chip(0)}, [Holding(0, "vir05_1c_16g")] * 3, [wanted("x", 0, "vir05_1c_16g")], None, set()),
        (
            {0: chip(0)},
            [Holding(0, "vir05_1c_16g")] * 4,
            [wanted("x", 0, "vir05_1c_16g")],
            "overlapping allocation on npu-0: vir05_1c_16g do not fit beside vir05_1c_16g, vir05_1c_16g, "
            f"vir05_1c_16g, vir05_1c_16g {GATE}",
            set(),
        ),
        ({0: chip(0)}, [Holding(0, "vir10_3c_32g")], [wanted("x", 0, "vir10_3c_32g")], None, set()),
        ({0: chip(0)}, [Holding(0, "vir10_3c_32g")] * 2, [wanted("x", 0, "vir05_1c_16g")], "do not fit beside", set()),
        (
            {0: chip(0)},
            [Holding(0, "vir05_1c_16g")],
            [wanted("npu-0", 0, None)],
            "the whole NPU is asked for while vNPUs",
            set(),
        ),
        (
            {0: chip(0)},
            [Holding(0)],
            [wanted("x", 0, "vir05_1c_16g")],
            "a vNPU is asked for while another claim holds the whole",
            set(),
        ),
        ({0: chip(0, (102, "vir05_1c_16g"))}, [], [wanted("npu-0", 0, None)], "while vNPUs hold part of it", set()),
        # A live vNPU no claim records counts against the totals (foreign, or left by a lost
        # checkpoint).
        (
            {0: chip(0, (102, "vir10_3c_32g"))},
            [Holding(0, "vir10_3c_32g")],
            [wanted("x", 0, "vir05_1c_16g")],
            "do not fit",
            set(),
        ),
        (
            {0: chip(0, (102, "vir10_3c_32g"))},
            [Holding(0, "vir10_3c_32g")],
            [wanted("x", 0, "vir10_3c_32g")],
            None,
            {102},
        ),
        ({}, [Holding(1)], [wanted("npu-0", 0, None)], None, set()),
        ({1: chip(1)}, [Holding(0, "vir10_3c_32g")] * 2, [wanted("x", 1, "vir10_3c_32g")], None, set()),
    ],
    ids=[
        "empty-chip",
        "fourth-fits",
        "fifth-overlaps",
        "second-big-fits",
        "no-room-left",
        "whole-after-vnpu",
        "vnpu-after-whole",
        "whole-beside-a-live-vnpu",
        "live-unrecorded-counts",
        "recorded-counts-once",
        "other-chip-whole",
        "other-chip-vnpus",
    ],
)
def test_overlap_check(
    chips: dict[int, ChipVnpu], held: list[Holding], mine: list[ClaimDevice], problem: str | None, recorded: set[int]
) -> None:
    found = overlap_problem(mine, chips, held, frozenset(recorded))
    assert (found is None) if problem is None else (found is not None and problem in found), found
