"""--volcano's rules, as MindCluster's doWithVolcanoSchedule applies them (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from npu_plugin.deviceplugin.volcano import candidates, choose, predicate_time, remembered, token_map
from npu_plugin.podannotations.mindcluster import ASCEND_REAL, KLT_DEV, PREDICATE_TIME, USED_PREDICATE_TIME

RESOURCE = "huawei.com/Ascend910"


def pod(name: str, annotations: dict[str, str], phase: str = "Pending", created: str = "", **meta: Any) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "annotations": annotations,
            "creationTimestamp": created,
            **meta,
        },
        "status": {"phase": phase},
    }


def volcano(name: str, devices: str, time: str = "5", **options: Any) -> Any:
    return pod(name, {RESOURCE: devices, PREDICATE_TIME: time}, **options)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("17", 17), (USED_PREDICATE_TIME, None), ("", None), ("-1", None), ("1e9", None), ("9" * 21, None)],
)
def test_predicate_time_is_an_unused_uint64(value: str, expected: int | None) -> None:
    assert predicate_time(pod("p", {PREDICATE_TIME: value})) == expected


@pytest.mark.parametrize(
    ("pods", "count", "used", "expected"),
    [
        ([volcano("a", "Ascend910-5,Ascend910-6")], 2, (), ["a"]),
        ([volcano("a", "Ascend910-5,Ascend910-6")], 1, (), []),  # not the size the kubelet asked for
        ([volcano("a", "Ascend910-5", time=USED_PREDICATE_TIME)], 1, (), []),  # served already
        ([volcano("a", "Ascend910-5")], 1, ("uid-a",), []),  # served by this daemon, mark not yet stored
        ([volcano("a", "Ascend910-5", phase="Succeeded")], 1, (), []),
        ([volcano("a", "Ascend910-5", deletionTimestamp="2026-01-01T00:00:00Z")], 1, (), []),
        ([pod("a", {RESOURCE: "Ascend910-5"})], 1, (), []),  # no predicate-time: not Volcano's
        ([pod("a", {PREDICATE_TIME: "5"})], 1, (), []),  # no devices named
        ([volcano("a", " Ascend910-5 , ")], 1, (), ["a"]),
    ],
)
def test_candidates_follow_mindclusters_filter(
    pods: list[Any], count: int, used: tuple[str, ...], expected: list[str]
) -> None:
    assert [c.pod.name for c in candidates(pods, RESOURCE, count, used)] == expected


def test_the_oldest_predicate_time_wins_and_ties_are_reported() -> None:
    pods = [
        volcano("young", "Ascend910-1", time="9"),
        volcano("b", "Ascend910-2", time="3", created="2026-01-01T00:00:02Z"),
        volcano("a", "Ascend910-3", time="3", created="2026-01-01T00:00:02Z"),
        volcano("first", "Ascend910-4", time="3", created="2026-01-01T00:00:01Z"),
    ]
    chosen, tied = choose(candidates(pods, RESOURCE, 1, ()))
    assert chosen is not None and chosen.pod.name == "first"
    assert [c.pod.name for c in tied] == ["a", "b"]
    assert choose([]) == (None, [])


TOKENS = [f"Ascend910-{i}" for i in range(4)]


@pytest.mark.parametrize(
    ("allocated", "devices", "expected"),
    [
        ({}, [0, 1, 2, 3], {"Ascend910-0": 0, "Ascend910-1": 1, "Ascend910-2": 2, "Ascend910-3": 3}),
        ({"Ascend910-0": 3}, [0, 1, 2, 3], {"Ascend910-0": 3, "Ascend910-1": 0, "Ascend910-2": 1, "Ascend910-3": 2}),
        ({"Ascend910-0": 9}, [0, 1, 2, 3], {"Ascend910-0": 0, "Ascend910-1": 1, "Ascend910-2": 2, "Ascend910-3": 3}),
        ({"Ascend910-7": 1}, [0, 1], {"Ascend910-0": 0, "Ascend910-1": 1}),  # a token gone from the list
        ({}, [2], {"Ascend910-0": 2}),  # fewer devices than ids: the rest map to nothing
    ],
)
def test_every_kubelet_id_stands_for_one_device(
    allocated: dict[str, int], devices: list[int], expected: dict[str, int]
) -> None:
    assert token_map(TOKENS, allocated, devices) == expected


def test_a_restart_remembers_the_map_from_the_pods_annotations() -> None:
    pods = [
        pod("a", {KLT_DEV: "Ascend910-0,Ascend910-1", ASCEND_REAL: "Ascend910-5,Ascend910-6"}, phase="Running"),
        pod("done", {KLT_DEV: "Ascend910-2", ASCEND_REAL: "Ascend910-7"}, phase="Succeeded"),
        pod("odd", {KLT_DEV: "Ascend910-3,Ascend910-4", ASCEND_REAL: "Ascend910-1"}),
        pod("other", {KLT_DEV: "Ascend310P-3", ASCEND_REAL: "Ascend310P-1"}),
        pod("none", {}),
    ]
    assert remembered(pods, "Ascend910") == {"Ascend910-0": 5, "Ascend910-1": 6}
