"""`--claim-status` through the fake API per Kubernetes release, with the ClusterRole of
manifests/base as the daemon's permissions: status.devices applied after Prepare and removed at
Unprepare, one PATCH each; a refused write logged once, counted, and the Prepare unaffected."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

import pytest
import yaml

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from npu_plugin.sim.scheduler import DeviceRequest
from tests.support.daemon import REPO, DaemonProcess, Launcher
from tests.support.dra import DRIVER, NODE, Workspace, allocate, async_wait_until, dra_args, run_with_kubelet
from tests.support.fakeapi import FakeKubeAPI
from tests.support.fakeapi.authz import Caller, Rule, rules_of

pytest_plugins = ["tests.support.dra_fixtures"]
ROLE = yaml.safe_load((REPO / "manifests" / "base" / "clusterrole.yaml").read_text())
ACCOUNT = "system:serviceaccount:npu-plugin:npu-plugin"
DRIVER_PERMISSION = 'resource="resourceclaims/driver", verb="[associated-node:patch arbitrary-node:patch]"'


def caller(rules: tuple[Rule, ...] = rules_of(ROLE), node: str = NODE) -> Caller:
    return Caller(ACCOUNT, rules, node)


def without(resource: str) -> tuple[Rule, ...]:
    return tuple(r for r in rules_of(ROLE) if resource not in r.resources)


def statuses(api: FakeKubeAPI, name: str) -> list[dict[str, Any]]:
    claim = api.get_object("ResourceClaim", name, namespace="default")
    assert claim is not None
    return list((claim.get("status") or {}).get("devices") or [])


def refused(daemon: DaemonProcess) -> float:
    port = re.search(r"metrics listening on http://127\.0\.0\.1:(\d+)/metrics", daemon.log())
    assert port, daemon.log()
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(r'npu_plugin_claim_status_writes_total\{result="refused"\} (\S+)', text)
    assert found, text
    return float(found.group(1))


def launch(launch_daemon: Launcher, workspace: Workspace, api: FakeKubeAPI, *extra: str) -> DaemonProcess:
    """The daemon, with the token `caller` is known by."""
    api.write_kubeconfig(workspace.kubeconfig, token=caller().token)
    options = ("--claim-status", "--metrics-port", "0", "--bind-address", "127.0.0.1", *extra)
    daemon = launch_daemon(*dra_args(workspace, *options))
    daemon.wait_for_log("metrics listening on")
    return daemon


@pytest.mark.parametrize("minor", [34, 35, 36, 37])
def test_prepare_applies_the_device_status_and_unprepare_removes_it(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, minor: int
) -> None:
    fake_api.set_kubernetes_version(minor)
    fake_api.authorize_as(caller())
    launch(launch_daemon, workspace, fake_api)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "pair", DeviceRequest("train", count=2))
        fake_api.clear_requests()
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        await async_wait_until(lambda: len(statuses(fake_api, "pair")) == 2, timeout=10, what="the device status")
        entries = statuses(fake_api, "pair")
        assert [(e["driver"], e["pool"], e["device"]) for e in entries] == [
            (DRIVER, NODE, "npu-0"),
            (DRIVER, NODE, "npu-1"),
        ]
        assert [e["data"] for e in entries] == [
            {"physicalId": 0, "deviceIP": "192.168.100.101", "visibleDevices": "0,1"},
            {"physicalId": 1, "deviceIP": "192.168.100.102", "visibleDevices": "0,1"},
        ]
        assert [(c["type"], c["status"], c["reason"]) for e in entries for c in e["conditions"]] == [
            ("Ready", "True", "Prepared")
        ] * 2
        # The Prepare cost one PATCH besides reading the claim.
        calls = [(r.verb, r.path.rsplit("/", 1)[-1]) for r in fake_api.requests if "resourceclaims" in r.path]
        assert calls == [("get", "pair"), ("patch", "status")]
        assert (await kubelet.unprepare([claim]))[claim.uid] == ""
        await async_wait_until(lambda: not statuses(fake_api, "pair"), timeout=10, what="the device status removed")

    run_with_kubelet(workspace, fake_api, scenario)


def test_the_status_of_a_share_names_its_share_id(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """A share of a shared NPU (consumable capacity, on by default from 1.36): the API server takes its
    status entry only under the allocation's shareID."""
    fake_api.set_kubernetes_version(36)
    fake_api.authorize_as(caller())
    launch(launch_daemon, workspace, fake_api, "--share-devices", "0", "--share-count", "4")
    shared = DeviceRequest(
        "npu", selectors=('has(device.attributes["npu.huawei.com"].shareCount)',), capacity={"memory": "16Gi"}
    )

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "share", shared)
        answer = (await kubelet.prepare([claim]))[claim.uid]
        assert answer.error == "", answer
        await async_wait_until(lambda: statuses(fake_api, "share"), timeout=10, what="the share's status")
        [entry] = statuses(fake_api, "share")
        assert (entry["device"], entry["shareID"]) == ("npu-0", answer.devices[0].share_id)
        assert entry["data"]["visibleDevices"] == "0"

    run_with_kubelet(workspace, fake_api, scenario)


@pytest.mark.parametrize(
    "case",
    [
        (34, without("resourceclaims/status"), 'resource="resourceclaims/status", verb="patch"'),
        (36, without("resourceclaims/driver"), DRIVER_PERMISSION),
        (37, without("resourceclaims/driver"), DRIVER_PERMISSION),
    ],
)
def test_a_refused_status_write_is_logged_once_counted_and_prepare_still_succeeds(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, case: tuple[int, tuple[Rule, ...], str]
) -> None:
    minor, rules, missing = case
    fake_api.set_kubernetes_version(minor)
    fake_api.authorize_as(caller(rules))
    daemon = launch(launch_daemon, workspace, fake_api)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        for name in ("first", "second"):
            claim = await allocate(fake_api, name, DeviceRequest("npu"))
            assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        await async_wait_until(lambda: refused(daemon) == 2, timeout=10, what="two refusals counted")
        assert not statuses(fake_api, "first") and not statuses(fake_api, "second")

    run_with_kubelet(workspace, fake_api, scenario)
    lines = [line for line in daemon.log().splitlines() if "refused a ResourceClaim status write" in line]
    assert len(lines) == 1 and f"lacks {missing}" in lines[0], lines


def test_a_token_of_another_node_is_refused_from_1_36(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """associated-node is granted for the claim's own node only; the node check is the API server's."""
    fake_api.set_kubernetes_version(36)
    fake_api.authorize_as(caller(node="another-node"))
    daemon = launch(launch_daemon, workspace, fake_api)

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "elsewhere", DeviceRequest("npu"))
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        await async_wait_until(lambda: refused(daemon) == 1, timeout=10, what="the refusal counted")

    run_with_kubelet(workspace, fake_api, scenario)
    assert 'lacks resource="resourceclaims/driver", verb="[arbitrary-node:patch]"' in daemon.log()
