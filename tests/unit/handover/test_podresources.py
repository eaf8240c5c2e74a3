"""Which chips running containers hold, per API, from a PodResources List answer: a vNPU holds its
chip."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from npu_plugin._proto import podresources_v1_pb2 as pb
from npu_plugin.handover.podresources import dra_chip, held_devices, holders_of

RESOURCE, DRIVER = "huawei.com/Ascend910", "npu.huawei.com"


def answer(
    devices: Sequence[tuple[str, list[str]]] = (), claims: Sequence[tuple[str, str]] = ()
) -> pb.ListPodResourcesResponse:
    response = pb.ListPodResourcesResponse()
    container = response.pod_resources.add(name="p", namespace="ns").containers.add(name="c")
    for resource, ids in devices:
        container.devices.add(resource_name=resource, device_ids=ids)
    for driver, device in claims:
        dynamic = container.dynamic_resources.add(claim_name="claim", claim_namespace="ns")
        dynamic.claim_resources.add(driver_name=driver, pool_name="node", device_name=device)
    return response


@pytest.mark.parametrize(
    ("devices", "claims", "device_plugin", "dra"),
    [
        ([(RESOURCE, ["Ascend910-1", "Ascend910-3"])], [], {1, 3}, set()),
        ([(RESOURCE, ["Ascend910-5-share-0", "Ascend910-5-share-3", "Ascend910-6-share-x"])], [], {5}, set()),
        ([("huawei.com/Ascend910-5c.1cpu.16g", ["Ascend910-5c.1cpu.16g-164-4"])], [], {4}, set()),
        ([("huawei.com/Ascend910-10c.3cpu.16g.ndvpp", ["Ascend910-10c.3cpu.16g.ndvpp-100-0"])], [], {0}, set()),
        ([("huawei.com/Ascend910-5c.1cpu.16g", ["Ascend910-2"])], [], set(), set()),  # not a vNPU id
        ([("huawei.com/Ascend9100", ["Ascend910-5c.1cpu.16g-164-4"])], [], set(), set()),  # another resource
        ([("nvidia.com/gpu", ["Ascend910-1"])], [], set(), set()),
        ([], [(DRIVER, "npu-2"), (DRIVER, "npu-4-vnpu-164"), (DRIVER, "npu-6-vir05-1c-16g-0")], set(), {2, 4, 6}),
        ([], [("gpu.example.com", "npu-2"), (DRIVER, "gpu-0")], set(), set()),
    ],
    ids=[
        "whole",
        "share",
        "vnpu",
        "vnpu-long-suffix",
        "whole-id-under-vnpu",
        "prefix-only",
        "foreign",
        "dra",
        "dra-foreign",
    ],
)
def test_held_devices(
    devices: list[tuple[str, list[str]]], claims: list[tuple[str, str]], device_plugin: set[int], dra: set[int]
) -> None:
    assert held_devices(answer(devices, claims), RESOURCE, DRIVER) == (device_plugin, dra)


@pytest.mark.parametrize(
    ("name", "chip"),
    [("npu-3", 3), ("npu-3-vnpu-148", 3), ("npu-12-vir10-3c-16g-nm-1", 12), ("npu-03", None), ("vnpu-148", None)],
)
def test_dra_chip_reads_every_device_name_form(name: str, chip: int | None) -> None:
    assert dra_chip(name) == chip


def pods(*held: tuple[str, str, str, list[str]]) -> pb.ListPodResourcesResponse:
    """(pod, container, resource, ids) per container, each id an entry of its own as the kubelet
    lists them."""
    response = pb.ListPodResourcesResponse()
    for pod, container, resource, ids in held:
        entry = response.pod_resources.add(name=pod, namespace="ns").containers.add(name=container)
        for device_id in ids:
            entry.devices.add(resource_name=resource, device_ids=[device_id])
    return response


@pytest.mark.parametrize(
    ("response", "ids", "expected"),
    [
        (pods(("a", "c", RESOURCE, ["Ascend910-1", "Ascend910-0"])), ["Ascend910-0", "Ascend910-1"], [("a", "c")]),
        (pods(("a", "c", RESOURCE, ["Ascend910-0", "Ascend910-1"])), ["Ascend910-0"], []),  # not the same set
        (pods(("a", "c", RESOURCE, ["Ascend910-0"])), ["Ascend910-0", "Ascend910-1"], []),
        (pods(("a", "c", "huawei.com/Ascend310P", ["Ascend910-0"])), ["Ascend910-0"], []),  # another resource
        (
            pods(("a", "c", RESOURCE, ["Ascend910-2"]), ("b", "d", RESOURCE, ["Ascend910-2"])),
            ["Ascend910-2"],
            [("a", "c"), ("b", "d")],
        ),
        (pods(), ["Ascend910-0"], []),
    ],
)
def test_holders_of_are_the_containers_holding_exactly_the_ids(
    response: pb.ListPodResourcesResponse, ids: list[str], expected: list[tuple[str, str]]
) -> None:
    assert [(h.pod, h.container) for h in holders_of(response, RESOURCE, ids)] == expected
