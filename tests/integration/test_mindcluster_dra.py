"""DRA mode gives what MindCluster's device plugin gave: the real daemon prepares claims through the
DRA kubelet simulator, and the pods the claims are reserved for carry MindCluster's annotations
(written on the fake API server over HTTP) so Ascend Operator keeps working after a migration."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from npu_plugin.podannotations.mindcluster import ASCEND_REAL, CONFIGURATION, KLT_DEV
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from tests.support import pods
from tests.support.daemon import Launcher
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    async_wait_until,
    dra_args,
    fake_api_with_node,
    result,
    run_with_kubelet,
    temporary_workspace,
)
from tests.support.fakeapi import FakeKubeAPI
from tests.support.pods import annotations_of, node_with_address


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    with fake_api_with_node() as api:
        node_with_address(api, NODE)
        yield api


@pytest.fixture
def workspace(fake_api: FakeKubeAPI) -> Iterator[Workspace]:
    with temporary_workspace(fake_api) as created:
        yield created


def put_pod(api: FakeKubeAPI, name: str) -> dict[str, Any]:
    return pods.put_pod(api, name, node=NODE, namespace="default")


def reserved_claim(api: FakeKubeAPI, name: str, devices: list[str], pods: list[dict[str, Any]]) -> Claim:
    stored = api.put_object(
        "ResourceClaim",
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {}},
            "status": {
                "allocation": {"devices": {"results": [result(d) for d in devices]}},
                "reservedFor": [
                    {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
                ],
            },
        },
    )
    return Claim("default", name, stored["metadata"]["uid"])


def annotations(api: FakeKubeAPI, name: str) -> dict[str, str]:
    return annotations_of(api, name, "default")


def test_the_pods_a_claim_is_reserved_for_get_mindclusters_annotations(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    train = put_pod(fake_api, "train-0")
    put_pod(fake_api, "bystander")
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = reserved_claim(fake_api, "train", ["npu-3", "npu-2"], [train])
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        got = await async_wait_until(
            lambda: annotations(fake_api, "train-0").get(KLT_DEV) and annotations(fake_api, "train-0"),
            what="annotations",
        )
        assert got[KLT_DEV] == got[ASCEND_REAL] == "Ascend910-2,Ascend910-3"
        assert json.loads(got[CONFIGURATION])["devices"] == [
            {"device_id": "2", "device_ip": "192.168.100.103"},
            {"device_id": "3", "device_ip": "192.168.100.104"},
        ]
        assert annotations(fake_api, "bystander") == {}

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_pod_with_two_claims_gets_the_npus_of_both(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    train = put_pod(fake_api, "train-0")
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claims = [reserved_claim(fake_api, "a", ["npu-0"], [train]), reserved_claim(fake_api, "b", ["npu-5"], [train])]
        answers = await kubelet.prepare(claims)
        assert all(a.error == "" for a in answers.values())
        await async_wait_until(lambda: KLT_DEV in annotations(fake_api, "train-0"), what="annotations")
        assert annotations(fake_api, "train-0")[ASCEND_REAL] == "Ascend910-0,Ascend910-5"
        assert len([r for r in fake_api.requests if r.method == "PATCH" and "/pods/" in r.path]) == 1

    run_with_kubelet(workspace, fake_api, scenario)


def test_switched_off_no_pod_is_touched(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    train = put_pod(fake_api, "train-0")
    launch_daemon(*dra_args(workspace, "--pod-annotations=false"))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = reserved_claim(fake_api, "train", ["npu-1"], [train])
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        assert not [r for r in fake_api.requests if "/pods" in r.path]
        assert CONFIGURATION not in annotations(fake_api, "train-0")

    run_with_kubelet(workspace, fake_api, scenario)


def test_the_claim_status_and_the_metadata_file_carry_the_device_ip(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    train = put_pod(fake_api, "train-0")
    launch_daemon(*dra_args(workspace, "--claim-status"))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = reserved_claim(fake_api, "train", ["npu-4"], [train])
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""

        def status_data() -> Any:
            stored = fake_api.get_object("ResourceClaim", "train") or {}
            entries = stored.get("status", {}).get("devices", [])
            return entries[0]["data"] if entries else None

        data = await async_wait_until(status_data, what="the claim's device status")
        assert (data["physicalId"], data["deviceIP"]) == (4, "192.168.100.105")
        metadata = workspace.plugins / DRIVER / "dra-device-metadata" / "default_train" / "npu" / "metadata.json"
        (device,) = json.loads(metadata.read_text())["requests"][0]["devices"]
        assert device["attributes"]["deviceIP"] == {"string": "192.168.100.105"}
        assert device["attributes"]["physicalId"] == {"int": 4}

    run_with_kubelet(workspace, fake_api, scenario)
