"""Shared NPUs in DRA mode against the fake API server's rules per release: consumable capacity
where the API server keeps it (1.34 with DRAConsumableCapacity on, 1.36 by default), an ordinary
exclusive device said once where it does not (1.34 by default); the scheduler stand-in allocating
shares with a shareID; Prepare answering it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from npu_plugin.sim.scheduler import DeviceRequest, UnschedulableError
from tests.integration.test_observability import OBSERVED, endpoints_of, until_metric
from tests.support.daemon import DaemonProcess, Launcher, wait_until
from tests.support.dra import DRIVER, Workspace, allocate, dra_args, node_slices, run_with_kubelet, temporary_workspace
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]

SHARED = 'has(device.attributes["npu.huawei.com"].shareCount)'
GATE_OFF = "DRAConsumableCapacity is off on the API server"


@pytest.fixture(params=[(34, True), (36, None)], ids=["1.34-gate-on", "1.36"])
def sharing_api(request: pytest.FixtureRequest) -> Iterator[FakeKubeAPI]:
    minor, gate = request.param
    with FakeKubeAPI(kubernetes_minor=minor, consumable_capacity=gate) as api:
        api.add_node("node-a")
        yield api


def device(api: FakeKubeAPI, name: str) -> dict[str, Any] | None:
    return next((d for s in node_slices(api) for d in s["spec"].get("devices", []) if d["name"] == name), None)


def allocation(api: FakeKubeAPI, name: str) -> list[dict[str, Any]]:
    claim = api.get_object("ResourceClaim", name)
    assert claim is not None
    results: list[dict[str, Any]] = claim["status"]["allocation"]["devices"]["results"]
    return results


def share(memory: str) -> DeviceRequest:
    return DeviceRequest("npu", selectors=(SHARED,), capacity={"memory": memory})


def test_two_claims_share_one_npu_and_a_third_that_does_not_fit_waits(
    sharing_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    with temporary_workspace(sharing_api) as workspace:
        daemon = launch_daemon(*dra_args(workspace, "--share-devices", "0", "--share-count", "4", *OBSERVED))
        wait_until(
            lambda: bool((device(sharing_api, "npu-0") or {}).get("allowMultipleAllocations")), 15, "a shared npu-0"
        )
        published = device(sharing_api, "npu-0")
        assert published is not None
        assert published["capacity"]["memory"]["requestPolicy"]["validRange"] == {
            "min": "16Gi",
            "max": "64Gi",
            "step": "16Gi",
        }
        assert "allowMultipleAllocations" not in (device(sharing_api, "npu-1") or {})
        first, second = (
            asyncio.run(allocate(sharing_api, "first", share("16Gi"))),
            asyncio.run(allocate(sharing_api, "second", share("12Gi"))),
        )
        with pytest.raises(UnschedulableError):
            asyncio.run(allocate(sharing_api, "third", share("48Gi"), timeout=0.5))
        third = asyncio.run(allocate(sharing_api, "third", share("32Gi")))
        results = {name: allocation(sharing_api, name) for name in ("first", "second", "third")}
        assert {r[0]["device"] for r in results.values()} == {"npu-0"}
        assert results["second"][0]["consumedCapacity"] == {"memory": str(16 * 2**30), "aiCore": "1"}

        async def scenario(kubelet: DraKubeletSimulator) -> None:
            await kubelet.wait_for_plugin(DRIVER)
            answers = await kubelet.prepare([first, second, third])
            assert {uid: a.error for uid, a in answers.items()} == dict.fromkeys(answers, "")
            port = (await endpoints_of(daemon)).metrics
            await until_metric(port, "npu_plugin_shares_in_use", 3, daemon, physical_id="0")
            assert (await until_metric(port, "npu_plugin_shares", 4, daemon, physical_id="0")).get(
                ("npu_plugin_shares", (("physical_id", "1"),))
            ) is None
            share_ids = {uid: a.devices[0].share_id for uid, a in answers.items()}
            assert share_ids[first.uid] == results["first"][0]["shareID"]
            assert len(set(share_ids.values())) == 3
            assert answers[first.uid].devices[0].cdi_device_ids == (
                f"{DRIVER}/npu={first.uid}-npu-0-{share_ids[first.uid]}",
            )
            assert (await kubelet.unprepare([first]))[first.uid] == ""
            await until_metric(port, "npu_plugin_shares_in_use", 2, daemon, physical_id="0")
            assert not workspace.cdi_file(first.uid).exists()
            assert workspace.cdi_file(second.uid).exists()
            again = await kubelet.prepare([second])
            assert again[second.uid].devices[0].share_id == share_ids[second.uid]

        run_with_kubelet(workspace, sharing_api, scenario)
        assert GATE_OFF not in daemon.log()


def test_without_the_gate_a_shared_chip_is_published_exclusive_and_said_once(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon: DaemonProcess = launch_daemon(*dra_args(workspace, "--share-devices", "all", "--share-count", "4"))
    wait_until(lambda: GATE_OFF in daemon.log(), 15, "the gate-off warning")
    wait_until(lambda: device(fake_api, "npu-7") is not None, 15, "published devices")
    for index in range(8):
        published = device(fake_api, f"npu-{index}")
        assert published is not None
        assert "allowMultipleAllocations" not in published
        assert "shareCount" not in published["attributes"]
        assert "memCapacity" in published["capacity"]
    claim = asyncio.run(allocate(fake_api, "whole", DeviceRequest("npu")))
    assert "shareID" not in allocation(fake_api, "whole")[0]
    assert claim.uid
    assert daemon.log().count(GATE_OFF) == 1
