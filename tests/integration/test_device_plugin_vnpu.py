"""Device Plugin mode with `--vnpu static`: the real daemon against the kubelet simulator and the
fake backend's simulated vNPU hardware (its state file edited while serving, as an administrator's
npu-smi would)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.sim.kubelet import KubeletSimulator, PluginConnection
from tests.integration import test_device_plugin
from tests.integration.test_device_plugin import RESOURCE, Node, kubelet_at, registered, rpc_error, run, until
from tests.integration.test_observability import OBSERVED, Samples, endpoints_of, until_metric, until_samples, value
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.daemon import DaemonProcess, Launcher

node = test_device_plugin.node
SMALL, LARGE = "huawei.com/Ascend910-5c.1cpu.16g", "huawei.com/Ascend910-10c.3cpu.32g"
EXISTING = {0: (Vnpu(0, 100, "vir05_1c_16g"),), 5: (Vnpu(5, 180, "vir10_3c_32g"),)}


@pytest.fixture
def vnpu_node(node: Node) -> Node:
    """The Atlas 800T A2 (eight 910B3) with vNPU 100 (vir05_1c_16g) on chip 0 and 180 (vir10_3c_32g)
    on chip 5."""
    profile = profile_inventory("atlas-800t-a2")
    chips = {p: replace(chip, vnpus=EXISTING.get(p, ())) for p, chip in profile.vnpu.items()}
    node.inventory.write_text(yaml.safe_dump(inventory_document(profile.devices, chips), sort_keys=False))
    return node


def state_file(node: Node) -> Path:
    return node.inventory.parent / "hw.json"


def args(node: Node, *extra: str) -> list[str]:
    return node.args("--vnpu", "static", "--fake-vnpu-state", str(state_file(node)), *extra)


def edit_state(node: Node, physical_id: int, vnpus: list[dict[str, Any]]) -> None:
    replace_vnpus(state_file(node), {physical_id: vnpus})


def replace_vnpus(path: Path, chips: dict[int, list[dict[str, Any]]]) -> None:
    """Rewrite the simulated hardware's vNPUs of these chips in one rename, as the driver's own
    state changes."""
    state = json.loads(path.read_text())
    state["vnpus"] |= {str(physical_id): vnpus for physical_id, vnpus in chips.items()}
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(state))
    os.replace(temp, path)


async def serving(kubelet: KubeletSimulator, daemon: DaemonProcess, resource: str) -> PluginConnection:
    await until(lambda: resource in kubelet.plugins and kubelet.plugins[resource].updates > 0, 15, resource, daemon)
    return kubelet.plugins[resource]


def listed(connection: PluginConnection) -> list[str]:
    return sorted(connection.devices)


def test_a26_each_vnpu_type_is_a_resource_and_split_chips_leave_the_whole_list(
    vnpu_node: Node, launch_daemon: Launcher
) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node))
            whole = await registered(kubelet, daemon)
            small = await serving(kubelet, daemon, SMALL)
            large = await serving(kubelet, daemon, LARGE)
            assert listed(whole) == [f"Ascend910-{i}" for i in (1, 2, 3, 4, 6, 7)]
            assert listed(small) == ["Ascend910-5c.1cpu.16g-100-0"]
            assert listed(large) == ["Ascend910-10c.3cpu.32g-180-5"]
            assert small.endpoint.name == "npu-plugin-Ascend910-5c.1cpu.16g.sock"
            assert large.endpoint.name == "npu-plugin-Ascend910-10c.3cpu.32g.sock"
            assert small.options == whole.options
            assert small.devices["Ascend910-5c.1cpu.16g-100-0"].health == "Healthy"

            response = await kubelet.allocate(SMALL, ["Ascend910-5c.1cpu.16g-100-0"])
            assert dict(response.envs) == {"ASCEND_VISIBLE_DEVICES": "100", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
            nodes = {d.host_path: d.container_path for d in response.devices}
            assert nodes[f"{vnpu_node.dev_root}/vdavinci100"] == "/dev/davinci100"
            assert f"{vnpu_node.dev_root}/davinci0" not in nodes
            assert {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"} <= set(nodes.values())

            two = pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(
                        devices_ids=["Ascend910-5c.1cpu.16g-100-0", "Ascend910-10c.3cpu.32g-180-5"]
                    )
                ]
            )
            error = await rpc_error(small.stub.Allocate(two))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "Ascend supports one vNPU per container" in (error.details() or "")
            error = await rpc_error(kubelet.allocate(RESOURCE, ["Ascend910-0"]))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "split into vNPUs" in (error.details() or "")
            error = await rpc_error(kubelet.allocate(SMALL, ["Ascend910-10c.3cpu.32g-180-5"]))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, "another resource's vNPU"
            assert await kubelet.preferred(SMALL, ["Ascend910-5c.1cpu.16g-100-0"], [], 1) == [
                "Ascend910-5c.1cpu.16g-100-0"
            ]

    run(scenario())


class StateReads(FileSystemEventHandler):
    """The opens of the hardware state file, in the order inotify reports them (on watchdog's
    thread), between its replacement and the creation of a marker file in the same directory."""

    MARKER = "seen"

    def __init__(self, state: Path) -> None:
        self.state = state
        self.events: queue.SimpleQueue[str] = queue.SimpleQueue()

    def on_opened(self, event: FileSystemEvent) -> None:
        if Path(str(event.src_path)) == self.state:
            self.events.put("read")

    def on_moved(self, event: FileSystemEvent) -> None:
        if Path(str(event.dest_path)) == self.state:
            self.events.put("replaced")

    def on_created(self, event: FileSystemEvent) -> None:
        if Path(str(event.src_path)) == self.state.parent / self.MARKER:
            self.events.put("marker")

    def mark(self) -> None:
        (self.state.parent / self.MARKER).touch()

    def wait_for_reads(self, count: int) -> None:
        """Block until the state file has been opened `count` more times (the daemon re-reads
        it)."""
        while count > 0:
            try:
                count -= self.events.get(timeout=10) == "read"
            except queue.Empty:
                pytest.fail(f"the state file was not read {count} more times within 10 s")

    def between_replacement_and_marker(self) -> int:
        """Reads after the replacement and before the marker; waits (blocking) for the marker's
        event."""
        reads, replaced = 0, False
        while (event := self.events.get(timeout=10)) != "marker":
            if event == "replaced":
                replaced = True
            elif replaced:
                reads += 1
        return reads


@contextlib.contextmanager
def state_reads(state: Path) -> Iterator[StateReads]:
    reads, observer = StateReads(state), Observer()
    observer.schedule(reads, str(state.parent))
    observer.start()
    try:
        yield reads
    finally:
        observer.stop()
        observer.join()


def test_a27_a_vnpu_made_while_serving_is_listed_and_its_chip_leaves_the_whole_list(
    vnpu_node: Node, launch_daemon: Launcher
) -> None:
    """A vNPU an administrator makes is listed within 2 health intervals, proven by counting the
    daemon's reads, not seconds, so a loaded machine slowing either process cannot fail it. The
    device plugin re-reads the vNPUs once per health interval, opening the state file once per chip;
    inotify reports those opens, the file's replacement and the marker the test creates once the
    kubelet holds the new lists, in the order they happened. Within 2 intervals means at most 2
    reads between the write and the update: the read under way at the write (it had read chip 1
    already, else it would see vNPU 116: at most 6 more opens) and the next one (8), plus the one
    open of the fake backend's check that the changed file is sound: at most 15 opens, asserted as 2
    x 8. The 1 s interval only keeps the read after the update from starting before the test
    (looking every 20 ms) notices the update and creates the marker."""
    chips = len(profile_inventory("atlas-800t-a2").devices)

    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node, "--health-interval", "1"))
            whole = await registered(kubelet, daemon)
            small = await serving(kubelet, daemon, SMALL)
            with state_reads(state_file(vnpu_node)) as reads:
                edit_state(vnpu_node, 1, [{"vnpuId": 116, "template": "vir05_1c_16g"}])
                await until(
                    lambda: "Ascend910-5c.1cpu.16g-116-1" in small.devices and "Ascend910-1" not in whole.devices,
                    5,
                    "vNPU 116 listed and chip 1 off the whole list",
                    daemon,
                )
                reads.mark()
                opens = await asyncio.to_thread(reads.between_replacement_and_marker)
            assert 1 <= opens <= 2 * chips, f"{opens} opens of the state file: more than 2 reads of {chips} chips"

            edit_state(vnpu_node, 0, [])
            await until(lambda: "Ascend910-5c.1cpu.16g-100-0" not in small.devices, 5, "vNPU 100 gone", daemon)
            await until(lambda: "Ascend910-0" in whole.devices, 5, "chip 0 whole again", daemon)
            assert listed(small) == ["Ascend910-5c.1cpu.16g-116-1"]
            error = await rpc_error(kubelet.allocate(SMALL, ["Ascend910-5c.1cpu.16g-100-0"]))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT

            edit_state(vnpu_node, 1, [])
            await until(lambda: not small.devices, 5, "an empty list for the resource", daemon)
            assert kubelet.plugins[SMALL].stream_open, "the resource stays registered with an empty list"

    run(scenario())


def test_a_new_vnpu_type_starts_its_own_resource_while_serving(vnpu_node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node))
            await serving(kubelet, daemon, SMALL)
            edit_state(vnpu_node, 0, [])
            edit_state(vnpu_node, 5, [])
            await until(lambda: not kubelet.plugins[SMALL].devices, 5, "no vNPU left", daemon)
            edit_state(vnpu_node, 2, [{"vnpuId": 132, "template": "vir05_1c_16g"}])
            edit_state(vnpu_node, 3, [{"vnpuId": 148, "template": "vir10_3c_32g"}])
            large = await serving(kubelet, daemon, LARGE)
            await until(lambda: listed(large) == ["Ascend910-10c.3cpu.32g-148-3"], 5, "vNPU 148 listed", daemon)

    run(scenario())


def test_an_unhealthy_chip_makes_its_vnpus_unhealthy(vnpu_node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node))
            small = await serving(kubelet, daemon, SMALL)
            (vnpu_node.dev_root / "davinci0").unlink()
            device = "Ascend910-5c.1cpu.16g-100-0"
            await until(lambda: small.devices[device].health == "Unhealthy", 5, "vNPU 100 unhealthy", daemon)
            error = await rpc_error(kubelet.allocate(SMALL, [device]))
            assert "unhealthy" in (error.details() or "")

    run(scenario())


def test_cdi_enabled_names_each_vnpu_in_the_static_spec(vnpu_node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node, "--cdi-enabled"))
            await serving(kubelet, daemon, LARGE)
            response = await kubelet.allocate(SMALL, ["Ascend910-5c.1cpu.16g-100-0"])
            assert list(response.cdi_devices) == [pb.CDIDevice(name="npu.huawei.com/npu=vnpu-100")]
            spec_path = vnpu_node.cdi_root / "npu.huawei.com-device-plugin.json"
            spec = json.loads(spec_path.read_text())
            assert_valid_cdi(spec)
            assert {"vnpu-100", "vnpu-180"} <= {d["name"] for d in spec["devices"]}

            edit_state(vnpu_node, 1, [{"vnpuId": 116, "template": "vir05_1c_16g"}])
            await until(lambda: "Ascend910-5c.1cpu.16g-116-1" in kubelet.plugins[SMALL].devices, 5, "116", daemon)
            names = {d["name"] for d in json.loads(spec_path.read_text())["devices"]}
            assert "vnpu-116" in names, "the spec names a vNPU before the kubelet hears of it"

    run(scenario())


def test_vnpu_off_serves_whole_npus_even_where_vnpus_exist(vnpu_node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*vnpu_node.args())
            whole = await registered(kubelet, daemon)
            assert listed(whole) == [f"Ascend910-{i}" for i in range(8)]
            assert set(kubelet.plugins) == {RESOURCE}
            assert not state_file(vnpu_node).exists(), "--vnpu off never touches the vNPU hardware"

    run(scenario())


def test_the_vnpu_metric_follows_the_hardware(vnpu_node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node, *OBSERVED))
            port = (await endpoints_of(daemon)).metrics
            await serving(kubelet, daemon, SMALL)
            small = {"physical_id": "0", "template": "vir05_1c_16g", "origin": "static"}
            samples = await until_metric(port, "npu_plugin_vnpus", 1, daemon, **small)
            assert value(samples, "npu_plugin_vnpus", physical_id="5", template="vir10_3c_32g", origin="static") == 1
            edit_state(vnpu_node, 0, [])

            def gone(samples: Samples) -> bool:
                return ("npu_plugin_vnpus", tuple(sorted(small.items()))) not in samples

            await until_samples(port, gone, "vNPU 100 off the metric", daemon)

    run(scenario())


def test_an_unreadable_vnpu_state_keeps_the_last_listing(vnpu_node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(vnpu_node.plugin_dir) as kubelet:
            daemon = launch_daemon(*args(vnpu_node))
            whole = await registered(kubelet, daemon)
            small = await serving(kubelet, daemon, SMALL)
            temp = state_file(vnpu_node).with_name(".hw.json.tmp")
            temp.write_text("{not json")
            os.replace(temp, state_file(vnpu_node))
            await asyncio.to_thread(daemon.wait_for_log, "vNPU listing failed, keeping the last one")
            assert listed(small) == ["Ascend910-5c.1cpu.16g-100-0"]
            assert "Ascend910-0" not in whole.devices, "a split chip is not offered whole on a failed read"
            assert daemon.process.poll() is None

    run(scenario())
