"""A shared chip in a slice: allowMultipleAllocations, shareCount and the capacities' request
policies, checked against the API server's validation rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.shared_devices import share_unit, shareable, shared_capacity
from npu_plugin.dra.slices import SliceSettings, device_entry, slice_specs
from npu_plugin.inventory.sharing import Sharing
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi.validation import _capacity

A2 = profile_devices("atlas-800t-a2")  # 910B3, 64Gi, 20 AI cores
GI = 2**30


def test_a_shared_chip_has_memory_in_share_units_and_one_core_by_default() -> None:
    assert shared_capacity(A2[0], 4) == {
        "memory": {
            "value": "64Gi",
            "requestPolicy": {"default": "16Gi", "validRange": {"min": "16Gi", "max": "64Gi", "step": "16Gi"}},
        },
        "aiCore": {
            "value": "20",
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "20", "step": "1"}},
        },
    }


@pytest.mark.parametrize(
    ("memory", "ai_core", "count"),
    [(64 * GI, 20, 4), (24 * GI, 8, 7), (24 * GI, 1, 100), (21534 * 2**20, None, 3), (3 * GI + 5, 2, 2)],
)
def test_every_policy_passes_the_api_servers_validation(memory: int, ai_core: int | None, count: int) -> None:
    device = replace(A2[0], memory=memory, ai_core=ai_core)
    capacity = shared_capacity(device, count)
    assert set(capacity) == {"memory", *(["aiCore"] if ai_core else [])}
    for name, value in capacity.items():
        assert _capacity(dict(value), f"capacity[{name}]", shared=True) == [], name
    assert share_unit(memory, count) * count <= memory


def test_too_little_memory_to_share_is_named() -> None:
    assert shareable(A2[0], 4) is None
    assert (
        shareable(replace(A2[0], memory=3 * 2**20), 4)
        == "npu-0 reports 3145728 bytes of memory, too little for 4 shares of a MiB"
    )


def test_shared_chips_are_published_as_such_only_while_the_server_keeps_it() -> None:
    settings = SliceSettings("npu.huawei.com", "n1", None, UnhealthyPolicy.REMOVE, sharing=Sharing.of("1", 4, A2))
    exclusive = slice_specs(settings, [(d, True) for d in A2[:2]])[0]
    assert [("allowMultipleAllocations" in d, "shareCount" in d["attributes"]) for d in exclusive] == [
        (False, False)
    ] * 2
    shared = slice_specs(replace(settings, share_capacity=True), [(d, True) for d in A2[:2]])[0]
    assert "allowMultipleAllocations" not in shared[0]
    assert shared[1]["allowMultipleAllocations"] is True
    assert shared[1]["attributes"]["shareCount"] == {"int": 4}
    assert set(shared[1]["capacity"]) == {"memory", "aiCore"}, "memCapacity would be consumed whole"
    assert device_entry("npu.huawei.com", A2[1], True, UnhealthyPolicy.REMOVE) == exclusive[1]


@pytest.mark.parametrize(
    ("capacity", "shared", "problem"),
    [
        ({"value": "4", "requestPolicy": {"default": "1"}}, False, "allowMultipleAllocations must be true"),
        (
            {"value": "4", "requestPolicy": {"validRange": {"min": "1"}}},
            True,
            "required when validValues or validRange",
        ),
        (
            {"value": "4", "requestPolicy": {"default": "2", "validRange": {"min": "1", "step": "2"}}},
            True,
            "not a multiple",
        ),
        (
            {"value": "4", "requestPolicy": {"default": "1", "validRange": {"min": "5"}}},
            True,
            "min is larger than capacity",
        ),
        (
            {"value": "4", "requestPolicy": {"default": "3", "validValues": ["1", "2"]}},
            True,
            "default value is not valid",
        ),
    ],
)
def test_the_fake_api_server_refuses_a_bad_request_policy(
    capacity: dict[str, object], shared: bool, problem: str
) -> None:
    errors = _capacity(capacity, "capacity[x]", shared=shared)
    assert errors and problem in str(errors[0])
