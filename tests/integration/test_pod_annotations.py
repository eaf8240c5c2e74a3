"""MindCluster's annotations written after an Allocate: the pod found through a real PodResources
server on a Unix socket, read and merge-patched on the fake API server over HTTP; every way it can
go wrong ends in one result, and no wrong annotation is ever written."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.aio.backoff import BackoffPolicy
from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.client import KubeClient, connect
from npu_plugin.podannotations.mindcluster import (
    ASCEND_REAL,
    CONFIGURATION,
    KLT_DEV,
    PREDICATE_TIME,
    USED_PREDICATE_TIME,
    AnnotatedDevice,
    PodRef,
)
from npu_plugin.podannotations.writer import Job, PodAnnotator, Result
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support import pods
from tests.support.fakeapi import FakeKubeAPI
from tests.support.pods import NODE, annotations_of, node_with_address

RESOURCE = "huawei.com/Ascend910"
IDS = ("Ascend910-0", "Ascend910-1")
DEVICES = (AnnotatedDevice(0, "10.20.0.1"), AnnotatedDevice(1, "10.20.0.2"))
FAST = BackoffPolicy(initial=0.001, maximum=0.002)  # the pauses do not matter here, only their count


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as server:
        node_with_address(server)
        yield server


def put_pod(api: FakeKubeAPI, name: str, node: str = NODE, **annotations: str) -> dict[str, Any]:
    return pods.put_pod(api, name, node=node, annotations=annotations)


def annotations(api: FakeKubeAPI, name: str) -> dict[str, str]:
    return annotations_of(api, name)


Scenario = Callable[[PodAnnotator, PodResourcesSimulator], Awaitable[None]]


def run(api: FakeKubeAPI, short_dir: Path, scenario: Scenario, attempts: int = 3) -> list[Result]:
    """Run `scenario` with an annotator and the kubelet's PodResources endpoint; the results."""
    results: list[Result] = []
    api.write_kubeconfig(short_dir / "kubeconfig")
    client = KubeClient(connect(short_dir / "kubeconfig"))

    async def main() -> None:
        simulator = PodResourcesSimulator(short_dir / "pr.sock", RESOURCE)
        await simulator.start()
        annotator = PodAnnotator(
            client,
            NODE,
            resource_name=RESOURCE,
            pod_resources_socket=short_dir / "pr.sock",
            on_result=results.append,
            policy=FAST,
            attempts=attempts,
        )
        try:
            await scenario(annotator, simulator)
            await annotator.drain()
        finally:
            await annotator.close()
            await simulator.stop()

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        client.close()
    return results


def allocate_job(**changes: Any) -> Job:
    return Job(
        **(
            {"what": "Allocate of Ascend910-0,Ascend910-1", "kubelet_ids": IDS, "real_ids": IDS, "devices": DEVICES}
            | changes
        )
    )


def test_the_container_holding_the_ids_gets_the_three_annotations_and_nothing_else(
    api: FakeKubeAPI, short_dir: Path
) -> None:
    put_pod(api, "train-0", other="kept")
    put_pod(api, "bystander")

    async def scenario(annotator: PodAnnotator, kubelet: PodResourcesSimulator) -> None:
        kubelet.hold_devices("ns", "bystander", "c", ["Ascend910-2"])
        kubelet.hold_devices("ns", "train-0", "c", list(IDS))
        annotator.submit(allocate_job())

    assert run(api, short_dir, scenario) == ["success"]
    got = annotations(api, "train-0")
    assert got[KLT_DEV] == got[ASCEND_REAL] == "Ascend910-0,Ascend910-1"
    assert got["other"] == "kept"
    assert got[CONFIGURATION] == (
        '{"pod_name":"train-0","server_id":"192.168.1.10","host_ip":"192.168.1.10","super_pod_id":-1,'
        '"devices":[{"device_id":"0","device_ip":"10.20.0.1"},{"device_id":"1","device_ip":"10.20.0.2"}],'
        '"rack_id":-1,"server_index":"","server_ip":""}'
    )
    assert annotations(api, "bystander") == {}
    patches = [r for r in api.requests if r.method == "PATCH"]
    assert len(patches) == 1 and patches[0].body["metadata"]["uid"]


def test_a_container_the_kubelet_lists_late_is_found_on_a_later_attempt(api: FakeKubeAPI, short_dir: Path) -> None:
    put_pod(api, "train-0")

    async def scenario(annotator: PodAnnotator, kubelet: PodResourcesSimulator) -> None:
        annotator.submit(allocate_job())
        await asyncio.sleep(0)
        kubelet.hold_devices("ns", "train-0", "c", list(IDS))

    assert run(api, short_dir, scenario, attempts=50) == ["success"]
    assert KLT_DEV in annotations(api, "train-0")


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("never listed", "no-pod"),
        ("vanished", "no-pod"),
        ("other node", "refused"),
        ("forbidden", "refused"),
        ("conflicts", "conflict"),
        ("two pods", "ambiguous"),
    ],
)
def test_every_failure_is_one_result_and_no_annotation(
    api: FakeKubeAPI, short_dir: Path, setup: str, expected: Result
) -> None:
    if setup != "vanished":
        put_pod(api, "train-0", node="node-b" if setup == "other node" else NODE)
    if setup == "forbidden":
        api.forbid("patch", "pods")
    if setup == "conflicts":
        api.force_conflicts(10)

    async def scenario(annotator: PodAnnotator, kubelet: PodResourcesSimulator) -> None:
        if setup != "never listed":
            kubelet.hold_devices("ns", "train-0", "c", list(IDS))
        if setup == "two pods":
            put_pod(api, "train-1")
            kubelet.hold_devices("ns", "train-1", "c", list(IDS))
        annotator.submit(allocate_job())

    assert run(api, short_dir, scenario) == [expected]
    assert all(KLT_DEV not in p["metadata"].get("annotations", {}) for p in api.objects("Pod"))


def test_a_device_without_ip_writes_the_ids_but_no_configuration(api: FakeKubeAPI, short_dir: Path) -> None:
    put_pod(api, "train-0")

    async def scenario(annotator: PodAnnotator, kubelet: PodResourcesSimulator) -> None:
        kubelet.hold_devices("ns", "train-0", "c", list(IDS))
        annotator.submit(allocate_job(devices=(DEVICES[0], AnnotatedDevice(1, None))))

    assert run(api, short_dir, scenario) == ["partial"]
    assert set(annotations(api, "train-0")) == {KLT_DEV, ASCEND_REAL}


def test_a_known_pod_recreated_under_its_name_is_left_alone(api: FakeKubeAPI, short_dir: Path) -> None:
    put_pod(api, "train-0")

    async def scenario(annotator: PodAnnotator, kubelet: PodResourcesSimulator) -> None:
        annotator.submit(
            allocate_job(pod=PodRef("ns", "train-0", "the-old-uid"), extra={PREDICATE_TIME: USED_PREDICATE_TIME})
        )

    assert run(api, short_dir, scenario) == ["no-pod"]
    assert annotations(api, "train-0") == {}


def test_a_known_pod_gets_the_extra_marks_too(api: FakeKubeAPI, short_dir: Path) -> None:
    uid = put_pod(api, "train-0", **{PREDICATE_TIME: "1700000000"})["metadata"]["uid"]

    async def scenario(annotator: PodAnnotator, kubelet: PodResourcesSimulator) -> None:
        annotator.submit(allocate_job(pod=PodRef("ns", "train-0", uid), extra={PREDICATE_TIME: USED_PREDICATE_TIME}))

    assert run(api, short_dir, scenario) == ["success"]
    assert annotations(api, "train-0")[PREDICATE_TIME] == USED_PREDICATE_TIME


def test_the_client_lists_the_pods_bound_to_a_node_by_field_selector(api: FakeKubeAPI, short_dir: Path) -> None:
    put_pod(api, "here")
    put_pod(api, "there", node="node-b")
    api.write_kubeconfig(short_dir / "kubeconfig")
    client = KubeClient(connect(short_dir / "kubeconfig"))
    try:
        assert [p["metadata"]["name"] for p in client.list_pods(NODE)] == ["here"]
        assert client.get_pod("ns", "there")["spec"]["nodeName"] == "node-b"
    finally:
        client.close()
    (listed,) = [r for r in api.requests if r.method == "GET" and r.path == "/api/v1/pods"]
    assert listed.query == {"fieldSelector": f"spec.nodeName={NODE}"}


def test_a_patch_whose_uid_precondition_fails_is_a_conflict_as_on_the_real_server(
    api: FakeKubeAPI, short_dir: Path
) -> None:
    put_pod(api, "train-0")
    api.write_kubeconfig(short_dir / "kubeconfig")
    client = KubeClient(connect(short_dir / "kubeconfig"))
    try:
        with pytest.raises(KubeApiError) as refused:
            client.annotate_pod("ns", "train-0", {KLT_DEV: "Ascend910-0"}, uid="another-pod")
        assert refused.value.status == 409 and "Precondition failed: UID in precondition" in str(refused.value)
        with pytest.raises(KubeApiError) as gone:
            client.annotate_pod("ns", "missing", {KLT_DEV: "Ascend910-0"}, uid="u")
        assert gone.value.status == 404
    finally:
        client.close()
    assert annotations(api, "train-0") == {}
