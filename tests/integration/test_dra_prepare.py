"""NodePrepareResources / NodeUnprepareResources through the kubelet simulator: CDI, checkpoint,
refusals."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from npu_plugin._proto import dra_v1_pb2, dra_v1_pb2_grpc
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator, PreparedDevice
from npu_plugin.sim.scheduler import DeviceRequest
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.daemon import Launcher, wait_until
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    allocate,
    dra_args,
    plant_claim,
    result,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def checkpoint(workspace: Workspace) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(workspace.checkpoint.read_text())
    return document


def test_prepare_writes_one_cdi_device_per_request_and_one_for_the_whole_claim(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "two-requests", DeviceRequest("train", count=2), DeviceRequest("infer"))
        answer = (await kubelet.prepare([claim]))[claim.uid]
        assert answer.error == ""
        cdi = f"{DRIVER}/npu={claim.uid}"
        assert answer.devices == (
            PreparedDevice(("train",), NODE, "npu-0", (f"{cdi}-train",)),
            PreparedDevice(("train",), NODE, "npu-1", ()),
            PreparedDevice(("infer",), NODE, "npu-2", (f"{cdi}-infer",)),
            PreparedDevice(("_claim",), NODE, "npu-2", (f"{cdi}-_claim",)),
        )
        spec = workspace.cdi_spec(claim.uid)
        assert_valid_cdi(spec)
        assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", f"{DRIVER}/npu")
        names = [f"{claim.uid}-infer", f"{claim.uid}-train", f"{claim.uid}-_claim"]
        assert [d["name"] for d in spec["devices"]] == names
        assert spec["devices"][2]["containerEdits"] == {"env": ["ASCEND_VISIBLE_DEVICES=0,1,2"]}
        train = spec["devices"][1]["containerEdits"]
        assert train["env"] == ["ASCEND_VISIBLE_DEVICES=0,1"]
        nodes = ["davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"]
        assert train["deviceNodes"] == [
            {"path": f"/dev/{n}", "hostPath": str(workspace.dev / n), "permissions": "rw"} for n in nodes
        ]
        assert spec["devices"][0]["containerEdits"]["env"] == ["ASCEND_VISIBLE_DEVICES=2"]
        # The one mount is the request's device metadata file (KEP-5304's layout), read-only.
        host = workspace.plugins / DRIVER / "dra-device-metadata" / "default_two-requests/train/metadata.json"
        assert train["mounts"] == [
            {
                "hostPath": str(host),
                "containerPath": f"/var/run/dra-device-attributes/two-requests/train/{DRIVER}-metadata.json",
                "type": "bind",
                "options": ["ro", "nosuid", "nodev", "rbind"],
            }
        ]
        metadata = json.loads(host.read_text())
        assert (metadata["apiVersion"], metadata["kind"]) == ("metadata.resource.k8s.io/v1alpha1", "DeviceMetadata")
        assert metadata["metadata"] == {"name": "two-requests", "namespace": "default", "uid": claim.uid}
        (request,) = metadata["requests"]
        assert request["name"] == "train"
        assert [(d["name"], d["driver"], d["pool"]) for d in request["devices"]] == [
            ("npu-0", DRIVER, NODE),
            ("npu-1", DRIVER, NODE),
        ]
        assert request["devices"][1]["attributes"]["physicalId"] == {"int": 1}
        await kubelet.unprepare([claim])
        assert not (workspace.plugins / DRIVER / "dra-device-metadata" / "default_two-requests").exists()

    run_with_kubelet(workspace, fake_api, scenario)


def test_checkpoint_records_prepared_claims(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "recorded", namespace="team-a")
        await kubelet.prepare([claim])
        document = checkpoint(workspace)
        assert document == {
            "version": 1,
            "bootId": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
            "claims": {
                claim.uid: {
                    "namespace": "team-a",
                    "name": "recorded",
                    "state": "PrepareCompleted",
                    "devices": [
                        {
                            "requestNames": ["npu"],
                            "poolName": NODE,
                            "deviceName": "npu-0",
                            "physicalId": 0,
                            "cdiDeviceIds": [f"{DRIVER}/npu={claim.uid}-npu"],
                        }
                    ],
                }
            },
        }
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
        assert checkpoint(workspace)["claims"] == {}

    run_with_kubelet(workspace, fake_api, scenario)


def test_subrequest_names_are_stripped(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "first-available", DeviceRequest("npu", count=2, subrequest="pair"))
        answer = (await kubelet.prepare([claim]))[claim.uid]
        assert [d.request_names for d in answer.devices] == [("npu",), ("npu",)]
        assert answer.devices[0].cdi_device_ids == (f"{DRIVER}/npu={claim.uid}-npu",)
        assert [d["name"] for d in workspace.cdi_spec(claim.uid)["devices"]] == [f"{claim.uid}-npu"]

    run_with_kubelet(workspace, fake_api, scenario)


def test_refusals_are_per_claim_and_write_nothing(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    cases = {
        "uid-mismatch": (
            plant_claim(fake_api, "uid-mismatch", "0badc0de-0000-4000-8000-000000000000", [result("npu-4")]),
            "UID mismatch",
        ),
        "not-allocated": (plant_claim(fake_api, "not-allocated", None, None), "not allocated"),
        "other-pool": (plant_claim(fake_api, "other-pool", None, [result("npu-4", pool="node-b")]), "node-b"),
        "unknown-device": (plant_claim(fake_api, "unknown-device", None, [result("npu-99")]), "unknown device"),
        "foreign-name": (plant_claim(fake_api, "foreign-name", None, [result("gpu-0")]), "unknown device"),
        "gone": (Claim("default", "gone", "11111111-2222-4333-8444-555555555555"), "not found"),
        "uid-traversal": (Claim("default", "x", "../../etc/x"), "invalid claim UID"),
        "name-traversal": (
            Claim("default", "../../etc/x", "22222222-2222-4333-8444-555555555555"),
            "invalid claim namespace/name",
        ),
    }

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        good = await allocate(fake_api, "good")
        before = files_under(workspace.root)
        answers = await kubelet.prepare([good] + [claim for claim, _ in cases.values()])
        assert answers[good.uid].error == "" and answers[good.uid].devices
        for name, (claim, reason) in cases.items():
            assert reason in answers[claim.uid].error, (name, answers[claim.uid].error)
            assert answers[claim.uid].devices == ()
        written = files_under(workspace.root) - before
        metadata = workspace.plugins / DRIVER / "dra-device-metadata" / "default_good" / "npu" / "metadata.json"
        assert written <= {workspace.cdi_file(good.uid), workspace.checkpoint, metadata}
        assert not Path("/etc/x").exists()
        assert set(checkpoint(workspace)["claims"]) == {good.uid}

    run_with_kubelet(workspace, fake_api, scenario)


def test_a_device_prepared_for_another_claim_is_refused(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    first = plant_claim(fake_api, "first", None, [result("npu-6")])
    second = plant_claim(fake_api, "second", None, [result("npu-6")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        assert (await kubelet.prepare([first]))[first.uid].error == ""
        refused = (await kubelet.prepare([second]))[second.uid].error
        assert f"already prepared for claim {first.uid}" in refused
        assert await kubelet.unprepare([first]) == {first.uid: ""}
        assert (await kubelet.prepare([second]))[second.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)


def test_results_of_other_drivers_are_ignored(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    mixed = plant_claim(
        fake_api,
        "mixed",
        None,
        [
            result("gpu-0", request="gpu", driver="gpu.example.com", pool="gpus"),
            result("npu-1", request="npu"),
        ],
    )

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        answer = (await kubelet.prepare([mixed]))[mixed.uid]
        assert [(d.request_names, d.device_name) for d in answer.devices] == [(("npu",), "npu-1")]
        assert [d["name"] for d in workspace.cdi_spec(mixed.uid)["devices"]] == [f"{mixed.uid}-npu"]

    run_with_kubelet(workspace, fake_api, scenario)


def test_prepare_and_unprepare_are_idempotent(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "twice", DeviceRequest("npu", count=2))
        first = await kubelet.prepare([claim])
        content = workspace.cdi_file(claim.uid).read_bytes()
        assert await kubelet.prepare([claim]) == first
        workspace.cdi_file(claim.uid).unlink()
        assert await kubelet.prepare([claim]) == first
        assert workspace.cdi_file(claim.uid).read_bytes() == content
        fake_api.delete_object("ResourceClaim", "twice")
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
        assert not workspace.cdi_file(claim.uid).exists()
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
        never = Claim("default", "never", "33333333-2222-4333-8444-555555555555")
        assert await kubelet.unprepare([never]) == {never.uid: ""}

    run_with_kubelet(workspace, fake_api, scenario)


def call_from_thread(workspace: Workspace, method: str, claim: Claim) -> Any:
    """One kubelet thread's own channel and call, the way several pods start at once."""
    with grpc.insecure_channel(f"unix://{workspace.dra_socket()}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        request = getattr(dra_v1_pb2, f"{method}Request")(
            claims=[dra_v1_pb2.Claim(namespace=claim.namespace, name=claim.name, uid=claim.uid)]
        )
        return getattr(stub, method)(request, timeout=30).claims[claim.uid]


def test_prepares_from_several_threads_each_get_their_device_once(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    launch_daemon(*dra_args(workspace))
    claims = [asyncio.run(allocate(fake_api, f"c{i}")) for i in range(6)]
    rivals = [plant_claim(fake_api, f"rival{i}", None, [result("npu-7")]) for i in range(4)]
    everyone = claims + rivals
    wait_until(workspace.dra_socket().exists, 10, "the DRA socket")
    with ThreadPoolExecutor(len(everyone)) as pool:
        answers = dict(
            zip(
                [c.uid for c in everyone],
                pool.map(lambda c: call_from_thread(workspace, "NodePrepareResources", c), everyone),
                strict=True,
            )
        )
        assert all(answers[c.uid].error == "" for c in claims)
        assert sorted(answers[c.uid].devices[0].device_name for c in claims) == [f"npu-{i}" for i in range(6)]
        winners = [r for r in rivals if answers[r.uid].error == ""]
        assert len(winners) == 1, [answers[r.uid].error for r in rivals]
        assert set(checkpoint(workspace)["claims"]) == {c.uid for c in claims + winners}
        for uid in checkpoint(workspace)["claims"]:
            assert_valid_cdi(workspace.cdi_spec(uid))
        unprepared = list(pool.map(lambda c: call_from_thread(workspace, "NodeUnprepareResources", c), everyone))
    assert [u.error for u in unprepared] == [""] * len(everyone)
    assert checkpoint(workspace)["claims"] == {}
    assert not list(workspace.cdi.iterdir())
