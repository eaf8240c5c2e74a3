"""Health as device taints through the fake API, per Kubernetes release: `--unhealthy-policy auto`
taints where the API server keeps taints (DRADeviceTaints: off in 1.34 and 1.35, on from 1.36) and
removes elsewhere; the effect None only from 1.35; fault codes as a second taint; what it costs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from npu_plugin.ascend.device import Device, Health
from tests.support.configmap import ConfigMapVolume
from tests.support.daemon import Launcher, wait_until, write_inventory
from tests.support.dra import Workspace, dra_args, node_slices, pool_settled, published_names
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
A2 = profile_devices("atlas-800t-a2")
EVERYTHING = [f"npu-{i}" for i in range(8)]
CODES = (0x80E18402, 0x80E01801)


def devices(health: dict[int, Health], faults: dict[int, tuple[int, ...]] | None = None) -> list[Device]:
    return [
        replace(d, health=health.get(d.physical_id, Health.OK), faults=(faults or {}).get(d.physical_id, ()))
        for d in A2
    ]


def taints(api: FakeKubeAPI) -> dict[str, list[tuple[str, str, str]]]:
    """Taints by device name as (key, value, effect)."""
    return {
        d["name"]: [(t["key"], t.get("value", ""), t["effect"]) for t in d["taints"]]
        for s in node_slices(api)
        for d in s["spec"].get("devices") or []
        if d.get("taints")
    }


def slice_writes(api: FakeKubeAPI) -> list[str]:
    return [
        f"{r.verb} {r.query.get('dryRun', '')}".strip()
        for r in api.requests
        if "/resourceslices" in r.path and r.verb in ("create", "update", "delete")
    ]


HEALTH = "npu.huawei.com/health"
FAULT = "npu.huawei.com/fault"
WARNING = (HEALTH, "Warning", "None")
CRITICAL = (HEALTH, "Critical", "NoSchedule")


@pytest.mark.parametrize(
    "case",
    [
        # Default gates: taints stripped on 1.34 and 1.35, so auto removes the Critical device.
        (34, None, [n for n in EVERYTHING if n != "npu-2"], {}),
        (35, None, [n for n in EVERYTHING if n != "npu-2"], {}),
        (36, None, EVERYTHING, {"npu-1": [WARNING], "npu-2": [CRITICAL]}),
        (37, None, EVERYTHING, {"npu-1": [WARNING], "npu-2": [CRITICAL]}),
        # The alpha gate turned on: 1.34 does not know the effect None, 1.35 does.
        (34, True, EVERYTHING, {"npu-2": [CRITICAL]}),
        (35, True, EVERYTHING, {"npu-1": [WARNING], "npu-2": [CRITICAL]}),
    ],
)
def test_auto_taints_where_the_api_server_keeps_taints(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, case: tuple[Any, ...]
) -> None:
    minor, gate, published, expected = case
    fake_api.set_kubernetes_version(minor, device_taints=gate)
    write_inventory(workspace.inventory, devices({1: Health.WARNING, 2: Health.CRITICAL}))
    daemon = launch_daemon(*dra_args(workspace))
    wait_until(lambda: pool_settled(fake_api) and published_names(fake_api) == published, 10, f"slices {published}")
    assert taints(fake_api) == expected
    # One dry-run probe decided it; no slice write was refused or repeated.
    assert slice_writes(fake_api).count("create All") == 1
    assert all(r.status < 400 for r in fake_api.requests), [(r.verb, r.path, r.status) for r in fake_api.requests]
    if not expected:
        assert "DRADeviceTaints is off on the API server" in daemon.log()


def test_fault_codes_are_a_second_taint_and_the_policy_file_sets_their_effect(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(37)
    volume = ConfigMapVolume(workspace.root / "fault-policy")  # mounted from a ConfigMap
    volume.write({"faults.yaml": "- codes: [0x80E01801]\n  effect: NoExecute\n"})
    write_inventory(workspace.inventory, devices({3: Health.ALARM}, {3: CODES}))
    launch_daemon(*dra_args(workspace, "--fault-policy", str(volume.path("faults.yaml"))))
    wait_until(lambda: "npu-3" in taints(fake_api), 10, "npu-3 tainted")
    assert taints(fake_api)["npu-3"] == [(HEALTH, "Alarm", "NoSchedule"), (FAULT, "80E01801_80E18402", "NoExecute")]
    # The ConfigMap updated (a new ..data link, the file never written): NoSchedule from now on.
    volume.write({"faults.yaml": "- codes: ['80E18402']\n  effect: NoSchedule\n"})
    wait_until(lambda: taints(fake_api)["npu-3"][1][2] == "NoSchedule", 10, "the new policy")


def test_no_request_at_rest_and_one_slice_write_per_health_change(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(37)
    launch_daemon(*dra_args(workspace, "--health-interval", "0.1", "--health-failure-threshold", "1"))
    wait_until(lambda: pool_settled(fake_api) and published_names(fake_api) == EVERYTHING, 10, "slices")
    # The first unhealthy device asks the server once (version and a dry-run probe) ...
    write_inventory(workspace.inventory, devices({2: Health.CRITICAL}))
    wait_until(lambda: "npu-2" in taints(fake_api), 10, "npu-2 tainted")
    fake_api.clear_requests()
    # ... every later health change is one slice write, and nothing else is asked.
    write_inventory(workspace.inventory, devices({2: Health.CRITICAL, 5: Health.WARNING}))
    wait_until(lambda: "npu-5" in taints(fake_api), 10, "npu-5 tainted")
    writes = [r for r in fake_api.requests if r.verb != "watch"]
    assert [(r.verb, r.path.rsplit("/", 1)[0]) for r in writes] == [
        ("update", "/apis/resource.k8s.io/v1/resourceslices")
    ]


def test_a_bad_fault_policy_stops_the_start_and_a_bad_rewrite_keeps_the_policy_in_force(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(37)
    policy = workspace.root / "faults.yaml"
    policy.write_text("- codes: [0x80E01801]\n  effect: Evict\n", encoding="utf-8")
    refused = launch_daemon(*dra_args(workspace, "--fault-policy", str(policy)))
    assert refused.process.wait(30) == 2
    assert refused.log().strip().splitlines()[-1] == (
        f"npu-plugin serve: error: --fault-policy {policy}:2: [0].effect: unknown effect 'Evict' "
        "(allowed: None, NoSchedule, NoExecute)"
    )
    policy.write_text("- codes: [0x80E01801]\n  effect: NoExecute\n", encoding="utf-8")
    write_inventory(workspace.inventory, devices({3: Health.ALARM}, {3: CODES}))
    daemon = launch_daemon(*dra_args(workspace, "--fault-policy", str(policy)))
    wait_until(lambda: "npu-3" in taints(fake_api), 10, "npu-3 tainted")
    policy.write_text("- codes: [0x180E01801]\n  effect: NoSchedule\n", encoding="utf-8")
    daemon.wait_for_log(
        f"fault policy rewrite rejected, keeping the policy in force: --fault-policy {policy}:1: [0].codes[0]: "
        "code 0x180E01801 is out of range (0 to 0xFFFFFFFF)"
    )
    assert taints(fake_api)["npu-3"][1] == (FAULT, "80E01801_80E18402", "NoExecute")
    assert daemon.process.poll() is None
