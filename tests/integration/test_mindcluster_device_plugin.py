"""Device-plugin mode as MindCluster's device plugin behaves: the real daemon, the kubelet simulator
with a real PodResources server on a Unix socket, the fake API server over HTTP. After an Allocate
the pod that got the devices carries MindCluster's annotations; with --volcano, Allocate serves the
devices Volcano's annotation names."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from npu_plugin.ascend.device import Health
from npu_plugin.podannotations.mindcluster import (
    ASCEND_REAL,
    CONFIGURATION,
    KLT_DEV,
    PREDICATE_TIME,
    USED_PREDICATE_TIME,
)
from npu_plugin.sim.kubelet import KubeletSimulator
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support import pods
from tests.support.daemon import DaemonProcess, Launcher, write_inventory
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI
from tests.support.pods import NODE, annotations_of, node_with_address

RESOURCE = "huawei.com/Ascend910"
A2 = profile_devices("atlas-800t-a2")


@dataclass
class Setup:
    api: FakeKubeAPI
    kubelet: KubeletSimulator
    daemon: DaemonProcess

    def annotations(self, name: str) -> dict[str, str]:
        return annotations_of(self.api, name)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as server:
        node_with_address(server)
        yield server


def put_pod(api: FakeKubeAPI, name: str, created: str = "2026-01-01T00:00:00Z", **annotations: str) -> None:
    pods.put_pod(api, name, annotations=annotations, created=created)


def volcano_pod(api: FakeKubeAPI, name: str, devices: str, time_ns: int, created: str = "2026-01-01T00:00:00Z") -> None:
    put_pod(api, name, created, **{RESOURCE: devices, PREDICATE_TIME: str(time_ns)})


async def until(predicate: Callable[[], bool], what: str, daemon: DaemonProcess, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout}s; daemon log:\n{daemon.log()}")
        await asyncio.sleep(0.02)


@dataclass
class Place:
    """Where a daemon runs: its short socket directory, /dev, files, and how to start it."""

    short_dir: Path
    dev_root: Path
    tmp_path: Path
    launch: Launcher


@pytest.fixture
def place(short_dir: Path, dev_root: Path, tmp_path: Path, launch_daemon: Launcher) -> Place:
    return Place(short_dir, dev_root, tmp_path, launch_daemon)


@contextlib.asynccontextmanager
async def serving(api: FakeKubeAPI, place: Place, *extra: str) -> AsyncIterator[Setup]:
    short_dir, dev_root, tmp_path, launch = place.short_dir, place.dev_root, place.tmp_path, place.launch
    plugin_dir = short_dir / "dp"
    plugin_dir.mkdir()
    write_inventory(place.tmp_path / "inventory.yaml", A2)
    api.write_kubeconfig(tmp_path / "kubeconfig")
    pod_resources = PodResourcesSimulator(short_dir / "pr.sock", RESOURCE)
    await pod_resources.start()
    kubelet = KubeletSimulator(plugin_dir, pod_resources=pod_resources)
    await kubelet.start()
    try:
        daemon = launch(
            "--mode=device-plugin",
            "--backend=fake",
            f"--fake-inventory={tmp_path / 'inventory.yaml'}",
            f"--dev-root={dev_root}",
            f"--device-plugin-path={plugin_dir}",
            f"--kubeconfig={tmp_path / 'kubeconfig'}",
            f"--node-name={NODE}",
            f"--pod-resources-socket={short_dir / 'pr.sock'}",
            "--health-interval=0.1",
            *extra,
        )
        await until(
            lambda: RESOURCE in kubelet.plugins and kubelet.plugins[RESOURCE].updates > 0, "registration", daemon
        )
        yield Setup(api, kubelet, daemon)
    finally:
        await kubelet.stop()
        await pod_resources.stop()


def run(scenario: Any) -> None:
    asyncio.run(asyncio.wait_for(scenario, 90))


def test_the_pod_that_got_the_devices_carries_mindclusters_annotations(api: FakeKubeAPI, place: Place) -> None:
    put_pod(api, "train-0", other="kept")
    put_pod(api, "bystander")

    async def scenario() -> None:
        async with serving(api, place) as setup:
            response = await setup.kubelet.admit(
                RESOURCE, ["Ascend910-3", "Ascend910-2"], namespace="ns", pod="train-0", container="c"
            )
            assert response.envs["ASCEND_VISIBLE_DEVICES"] == "2,3"
            await until(lambda: KLT_DEV in setup.annotations("train-0"), "annotations", setup.daemon)
            got = setup.annotations("train-0")
            assert got[KLT_DEV] == "Ascend910-3,Ascend910-2"
            assert got[ASCEND_REAL] == "Ascend910-2,Ascend910-3"
            assert got[CONFIGURATION] == (
                '{"pod_name":"train-0","server_id":"192.168.1.10","host_ip":"192.168.1.10","super_pod_id":-1,'
                '"devices":[{"device_id":"2","device_ip":"192.168.100.103"},'
                '{"device_id":"3","device_ip":"192.168.100.104"}],"rack_id":-1,"server_index":"","server_ip":""}'
            )
            assert got["other"] == "kept"
            assert setup.annotations("bystander") == {}

    run(scenario())


def test_switched_off_nothing_is_written_and_allocate_is_unchanged(api: FakeKubeAPI, place: Place) -> None:
    put_pod(api, "train-0")

    async def scenario() -> None:
        async with serving(api, place, "--pod-annotations=false") as setup:
            response = await setup.kubelet.admit(
                RESOURCE, ["Ascend910-0"], namespace="ns", pod="train-0", container="c"
            )
            assert response.envs["ASCEND_VISIBLE_DEVICES"] == "0"
            await asyncio.sleep(0.3)
            assert setup.annotations("train-0") == {}
            assert not [r for r in api.requests if r.method in ("PATCH", "PUT")]

    run(scenario())


def test_volcano_serves_the_devices_its_annotation_names_whatever_ids_the_kubelet_passed(
    api: FakeKubeAPI, place: Place
) -> None:
    volcano_pod(api, "train-0", "Ascend910-5,Ascend910-6", 1_700_000_000_000)

    async def scenario() -> None:
        async with serving(api, place, "--volcano") as setup:
            response = await setup.kubelet.admit(
                RESOURCE, ["Ascend910-0", "Ascend910-1"], namespace="ns", pod="train-0", container="c"
            )
            assert response.envs["ASCEND_VISIBLE_DEVICES"] == "5,6"
            nodes = {d.host_path for d in response.devices}
            assert nodes >= {f"{place.dev_root}/davinci5", f"{place.dev_root}/davinci6"}
            await until(lambda: KLT_DEV in setup.annotations("train-0"), "annotations", setup.daemon)
            got = setup.annotations("train-0")
            assert (got[KLT_DEV], got[ASCEND_REAL]) == ("Ascend910-0,Ascend910-1", "Ascend910-5,Ascend910-6")
            assert got[PREDICATE_TIME] == USED_PREDICATE_TIME
            devices = json.loads(got[CONFIGURATION])["devices"]
            assert devices == [
                {"device_id": "5", "device_ip": "192.168.100.106"},
                {"device_id": "6", "device_ip": "192.168.100.107"},
            ]
            # The pod is served: a second Allocate of the same size finds no pod waiting.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await setup.kubelet.allocate(RESOURCE, ["Ascend910-2", "Ascend910-3"])
            assert "no pod on node node-a waits for 2 device(s)" in str(refused.value.details())

    run(scenario())


def test_volcano_keeps_each_kubelet_id_reporting_the_health_of_the_device_it_stands_for(
    api: FakeKubeAPI, place: Place
) -> None:
    volcano_pod(api, "train-0", "Ascend910-5", 1)

    async def scenario() -> None:
        async with serving(api, place, "--volcano") as setup:
            await setup.kubelet.admit(RESOURCE, ["Ascend910-0"], namespace="ns", pod="train-0", container="c")
            write_inventory(place.tmp_path / "inventory.yaml", [d if d.physical_id != 5 else _sick(d) for d in A2])
            plugin = setup.kubelet.plugins[RESOURCE]
            await until(lambda: plugin.devices["Ascend910-0"].health == "Unhealthy", "id 0 unhealthy", setup.daemon)
            assert sorted(plugin.devices) == [f"Ascend910-{i}" for i in range(8)]
            assert [i for i, d in plugin.devices.items() if d.health == "Unhealthy"] == ["Ascend910-0"]

    run(scenario())


def _sick(device: Any) -> Any:
    from dataclasses import replace

    return replace(device, health=Health.CRITICAL)


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ("Ascend910-5,Ascend910-9", "names 'Ascend910-9', which this node does not have"),
        ("Ascend910-5,Ascend910-7", "names 'Ascend910-7': device Ascend910-7 is unhealthy"),
    ],
)
def test_volcano_refuses_devices_this_node_lacks_or_cannot_serve(
    api: FakeKubeAPI,
    place: Place,
    devices: str,
    message: str,
) -> None:
    volcano_pod(api, "train-0", devices, 1)

    async def scenario() -> None:
        async with serving(api, place, "--volcano") as setup:
            write_inventory(place.tmp_path / "inventory.yaml", [d if d.physical_id != 7 else _sick(d) for d in A2])
            plugin = setup.kubelet.plugins[RESOURCE]
            await until(lambda: plugin.devices["Ascend910-7"].health == "Unhealthy", "7 unhealthy", setup.daemon)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await setup.kubelet.allocate(RESOURCE, ["Ascend910-0", "Ascend910-1"])
            assert message in str(refused.value.details())
            assert "Volcano's annotation on pod ns/train-0" in str(refused.value.details())
            await asyncio.sleep(0.2)
            assert KLT_DEV not in setup.annotations("train-0")

    run(scenario())


def test_two_pods_with_one_predicate_time_are_served_one_each_in_creation_order(api: FakeKubeAPI, place: Place) -> None:
    volcano_pod(api, "late", "Ascend910-2", 7, created="2026-01-01T00:00:02Z")
    volcano_pod(api, "early", "Ascend910-1", 7, created="2026-01-01T00:00:01Z")

    async def scenario() -> None:
        async with serving(api, place, "--volcano") as setup:
            first = await setup.kubelet.allocate(RESOURCE, ["Ascend910-0"])
            second = await setup.kubelet.allocate(RESOURCE, ["Ascend910-5"])
            assert (first.envs["ASCEND_VISIBLE_DEVICES"], second.envs["ASCEND_VISIBLE_DEVICES"]) == ("1", "2")
            assert "share predicate-time 7 with ns/early" in setup.daemon.log()

    run(scenario())


def test_a_restarted_volcano_daemon_remembers_which_device_each_id_stands_for(api: FakeKubeAPI, place: Place) -> None:
    put_pod(api, "running", **{KLT_DEV: "Ascend910-0", ASCEND_REAL: "Ascend910-5", PREDICATE_TIME: USED_PREDICATE_TIME})

    async def scenario() -> None:
        async with serving(api, place, "--volcano") as setup:
            write_inventory(place.tmp_path / "inventory.yaml", [d if d.physical_id != 5 else _sick(d) for d in A2])
            plugin = setup.kubelet.plugins[RESOURCE]
            sick = lambda: [i for i, d in sorted(plugin.devices.items()) if d.health == "Unhealthy"]  # noqa: E731
            await until(lambda: bool(sick()), "an unhealthy id", setup.daemon)
            assert sick() == ["Ascend910-0"]

    run(scenario())
