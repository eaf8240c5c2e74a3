"""Device Plugin mode end to end: the real daemon as a subprocess against the kubelet simulator."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import stat
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.ascend.container_edits import DRIVER_MOUNTS
from npu_plugin.ascend.device import Device, Health
from npu_plugin.sim.kubelet import KubeletSimulator, PluginConnection
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.daemon import DaemonProcess, Launcher, write_inventory
from tests.support.fake_devices import profile_devices

RESOURCE = "huawei.com/Ascend910"
SOCKET = "npu-plugin-Ascend910.sock"
A2 = profile_devices("atlas-800t-a2")
ALL_IDS = [f"Ascend910-{i}" for i in range(8)]
T = TypeVar("T")


@dataclass
class Node:
    """The directories one daemon works in, and how to start it there."""

    plugin_dir: Path
    dev_root: Path
    inventory: Path
    cdi_root: Path

    def args(self, *extra: str) -> list[str]:
        # --cdi-root is read in device-plugin mode only with --cdi-enabled; given without it, it is
        # warned about.
        cdi = ["--cdi-root", str(self.cdi_root)] if "--cdi-enabled" in extra else []
        return [
            "--mode",
            "device-plugin",
            "--backend",
            "fake",
            "--fake-inventory",
            str(self.inventory),
            "--dev-root",
            str(self.dev_root),
            "--device-plugin-path",
            str(self.plugin_dir),
            *cdi,
            "--health-interval",
            "0.1",
            "--health-failure-threshold",
            "2",
            "--health-recovery-threshold",
            "2",
            *extra,
        ]


@pytest.fixture
def node(short_dir: Path, dev_root: Path, tmp_path: Path) -> Node:
    plugin_dir = short_dir / "dp"
    plugin_dir.mkdir()
    write_inventory(tmp_path / "inventory.yaml", A2)
    return Node(plugin_dir, dev_root, tmp_path / "inventory.yaml", tmp_path / "cdi")


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(scenario, 90))


@contextlib.asynccontextmanager
async def kubelet_at(plugin_dir: Path) -> AsyncIterator[KubeletSimulator]:
    kubelet = KubeletSimulator(plugin_dir)
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()


async def until(predicate: Callable[[], bool], timeout: float, what: str, daemon: DaemonProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout}s" + (f"; daemon log:\n{daemon.log()}" if daemon else ""))
        await asyncio.sleep(0.02)


async def registered(kubelet: KubeletSimulator, daemon: DaemonProcess, timeout: float = 15) -> PluginConnection:
    def listed() -> bool:
        connection = kubelet.plugins.get(RESOURCE)
        return connection is not None and connection.updates > 0

    await until(listed, timeout, "registration and device list", daemon)
    return kubelet.plugins[RESOURCE]


def health(connection: PluginConnection) -> dict[str, str]:
    return {i: d.health for i, d in sorted(connection.devices.items())}


@dataclass
class Watcher:
    """An extra ListAndWatch client, like a second kubelet stream, recording every list it gets."""

    channel: grpc.aio.Channel
    lists: list[dict[str, str]] = field(default_factory=list)
    ended: str | None = None
    task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, socket: Path) -> Watcher:
        watcher = cls(grpc.aio.insecure_channel(f"unix://{socket}"))
        watcher.task = asyncio.create_task(watcher._read())
        await until(lambda: bool(watcher.lists), 5, "first list on an extra stream")
        return watcher

    async def _read(self) -> None:
        try:
            async for response in pb_grpc.DevicePluginStub(self.channel).ListAndWatch(pb.Empty()):
                self.lists.append({d.ID: d.health for d in response.devices})
            self.ended = "OK"
        except grpc.aio.AioRpcError as error:
            self.ended = error.code().name

    def health(self, device_id: str) -> str | None:
        return self.lists[-1].get(device_id) if self.lists else None

    async def close(self) -> None:
        await self.channel.close()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)


def with_health(devices: list[Device], physical_id: int, level: Health) -> list[Device]:
    return [replace(d, health=level) if d.physical_id == physical_id else d for d in devices]


async def rpc_error(call: Coroutine[Any, Any, Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


# --- registration ---


def test_registers_after_serving_a_0600_socket_and_lists_every_device(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            connection = await registered(kubelet, daemon)
            assert connection.endpoint == node.plugin_dir / SOCKET
            mode = connection.endpoint.stat().st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
            assert connection.options.get_preferred_allocation_available
            assert not connection.options.pre_start_required
            assert health(connection) == dict.fromkeys(ALL_IDS, "Healthy")
            numa = {i: [n.ID for n in d.topology.nodes] for i, d in connection.devices.items()}
            assert numa == {f"Ascend910-{i}": [i // 2] for i in range(8)}
            assert len(kubelet.registrations) == 1 and not kubelet.rejections

    run(scenario())


def test_registration_retries_with_back_off_until_the_kubelet_appears(node: Node, launch_daemon: Launcher) -> None:
    daemon = launch_daemon(*node.args("--log-level", "debug"))  # repeated failures are DEBUG
    daemon.wait_for_log("registration with the kubelet failed (attempt 2)")
    daemon.wait_for_log("registration with the kubelet failed (attempt 3)")

    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            await registered(kubelet, daemon, timeout=5)

    run(scenario())
    failures = [line for line in daemon.log().splitlines() if "registration with the kubelet failed" in line]
    attempts = [int(line.split("(attempt ")[1].split(")")[0]) for line in failures]
    # The starting kubelet deletes our socket, so the plugin may start a fresh round at attempt 1.
    assert all(b in (a + 1, 1) for a, b in itertools.pairwise(attempts)), "one line per back-off step"
    delays = [float(line.split("retrying in ")[1].split("s:")[0]) for line in failures[:3]]
    assert attempts[:3] == [1, 2, 3] and delays == sorted(delays) and delays[2] > delays[0], "the back-off grows"
    warnings = [line for line in failures if " WARNING " in line]
    assert len(warnings) < len(failures) and "(attempt 1)" in warnings[0], "the first failure warns, repeats do not"


def test_kubelet_restart_re_registers_within_one_second(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> list[float]:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            await registered(kubelet, daemon)
            delays = []
            for round_ in range(3):
                watcher = await Watcher.open(node.plugin_dir / SOCKET)
                count = len(kubelet.registrations)
                await kubelet.restart()
                await until(lambda: len(kubelet.registrations) > count, 5, "re-registration", daemon)  # noqa: B023
                assert kubelet.socket_created_at is not None
                delays.append(kubelet.registrations[-1][1] - kubelet.socket_created_at)
                await until(lambda: watcher.ended is not None, 5, "old stream closed")  # noqa: B023
                assert watcher.ended == "OK", f"round {round_}: the plugin closes its old streams itself"
                await watcher.close()
                connection = await registered(kubelet, daemon)
                assert health(connection) == dict.fromkeys(ALL_IDS, "Healthy")
            await asyncio.sleep(0.3)
            assert len(kubelet.registrations) == 4, "one registration per kubelet start"
            return delays

    delays = run(scenario())
    assert max(delays) < 1.0, delays


def test_kubelet_sock_re_created_alone_triggers_re_registration(node: Node, launch_daemon: Launcher) -> None:
    """A kubelet that only re-creates kubelet.sock (our socket left alone) is still noticed."""

    async def scenario() -> None:
        kubelet = KubeletSimulator(node.plugin_dir)
        await kubelet.start()
        daemon = launch_daemon(*node.args())
        try:
            await registered(kubelet, daemon)
            await kubelet.stop()
            # The daemon answers kubelet.sock's deletion by serving again on a fresh socket; the
            # replacement kubelet below must find that socket in place, not catch it mid-restart.
            await until((node.plugin_dir / SOCKET).exists, 5, "our socket served again", daemon)
            replacement = KubeletSimulator(node.plugin_dir)
            await replacement.start(clean=False)
            try:
                await registered(replacement, daemon, timeout=5)
                assert replacement.registrations[0][1] - (replacement.socket_created_at or 0) < 1.0
                await asyncio.sleep(0.3)
                assert len(replacement.registrations) == 1
            finally:
                await replacement.stop()
        finally:
            await kubelet.stop()

    run(scenario())


def test_a_node_without_a_kubelet_is_waited_for_not_prepared(node: Node, launch_daemon: Launcher) -> None:
    """The kubelet's directory is the kubelet's to make: serve waits for it, says so once, then
    registers."""
    kubelet_root = node.plugin_dir.parent / "kubelet"
    plugin_dir = kubelet_root / "device-plugins"
    daemon = launch_daemon(*node.args("--device-plugin-path", str(plugin_dir)))
    daemon.wait_for_log(f"waiting for the kubelet to create {plugin_dir}")

    async def scenario() -> None:
        await asyncio.sleep(0.5)
        assert not kubelet_root.exists(), "serve created the kubelet's directory"
        async with kubelet_at(plugin_dir) as kubelet:
            await registered(kubelet, daemon)

    run(scenario())
    assert daemon.log().count("waiting for the kubelet to create") == 1
    assert daemon.process.poll() is None


# --- ListAndWatch ---


def test_health_fault_and_recovery_reach_every_stream(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            connection = await registered(kubelet, daemon)
            watchers = [await Watcher.open(node.plugin_dir / SOCKET) for _ in range(3)]
            write_inventory(node.inventory, with_health(A2, 3, Health.CRITICAL))

            def everyone(state: str) -> bool:
                return connection.devices["Ascend910-3"].health == state and all(
                    w.health("Ascend910-3") == state for w in watchers
                )

            await until(lambda: everyone("Unhealthy"), 10, "Ascend910-3 unhealthy on every stream", daemon)
            assert sum(h == "Unhealthy" for h in health(connection).values()) == 1
            write_inventory(node.inventory, A2)
            await until(lambda: everyone("Healthy"), 10, "Ascend910-3 healthy again on every stream", daemon)
            for watcher in watchers:
                assert watcher.ended is None, "the stream stays open while serving"
                await watcher.close()

    run(scenario())


def test_hot_removed_device_node_turns_unhealthy_and_recovers(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args("--health-interval", "30"))
            connection = await registered(kubelet, daemon)
            (node.dev_root / "davinci5").unlink()
            # The poller sleeps 30 s: only the file-system event can report this in time.
            await until(
                lambda: connection.devices["Ascend910-5"].health == "Unhealthy",
                5,
                "Ascend910-5 unhealthy after its node vanished",
                daemon,
            )
            assert sum(h == "Unhealthy" for h in health(connection).values()) == 1

    run(scenario())


def test_device_dropped_from_the_inventory_is_unhealthy_until_it_returns(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            connection = await registered(kubelet, daemon)
            write_inventory(node.inventory, [d for d in A2 if d.physical_id != 6])
            await until(
                lambda: connection.devices["Ascend910-6"].health == "Unhealthy",
                10,
                "Ascend910-6 unhealthy after it left the inventory",
                daemon,
            )
            write_inventory(node.inventory, A2)
            await until(
                lambda: connection.devices["Ascend910-6"].health == "Healthy",
                10,
                "Ascend910-6 healthy after it came back",
                daemon,
            )

    run(scenario())


def test_malformed_inventory_rewrite_keeps_serving_the_last_good_one(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            connection = await registered(kubelet, daemon)
            node.inventory.write_text("devices:\n  - physicalId: zero\n")
            await asyncio.to_thread(daemon.wait_for_log, "inventory file rewrite rejected")
            await asyncio.sleep(0.5)
            assert health(connection) == dict.fromkeys(ALL_IDS, "Healthy")
            assert daemon.process.poll() is None

    run(scenario())


# --- GetPreferredAllocation and Allocate ---


def test_preferred_allocation_over_the_wire(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            await registered(kubelet, launch_daemon(*node.args()))
            assert await kubelet.preferred(RESOURCE, ALL_IDS, [], 2) == ["Ascend910-0", "Ascend910-1"]
            assert await kubelet.preferred(RESOURCE, ALL_IDS[1:], [], 2) == ["Ascend910-2", "Ascend910-3"]
            assert await kubelet.preferred(RESOURCE, ALL_IDS, ["Ascend910-5"], 2) == ["Ascend910-4", "Ascend910-5"]
            three = ["Ascend910-1", "Ascend910-4", "Ascend910-7"]
            assert await kubelet.preferred(RESOURCE, three, [], 3) == three
            error = await rpc_error(kubelet.preferred(RESOURCE, ["Ascend910-0", "Ascend910-99"], [], 1))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "Ascend910-99" in (error.details() or "")
            error = await rpc_error(kubelet.preferred(RESOURCE, ALL_IDS[:2], [], 3))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT

    run(scenario())


def expected_nodes(dev_root: Path, ids: list[int]) -> list[tuple[str, str, str]]:
    names = [f"davinci{i}" for i in ids] + ["davinci_manager", "devmm_svm", "hisi_hdc"]
    return [(f"/dev/{n}", f"{dev_root}/{n}", "rw") for n in names]


def specs(response: pb.ContainerAllocateResponse) -> list[tuple[str, str, str]]:
    return [(d.container_path, d.host_path, d.permissions) for d in response.devices]


def test_allocate_answers_env_and_device_nodes(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            await registered(kubelet, launch_daemon(*node.args("--mount-driver")))
            response = await kubelet.allocate(RESOURCE, ["Ascend910-3", "Ascend910-1"])
            assert dict(response.envs) == {"ASCEND_VISIBLE_DEVICES": "1,3"}
            assert specs(response) == expected_nodes(node.dev_root, [1, 3])
            # --mount-driver probes the real host (the daemon's own view of it): whichever driver
            # paths this machine has, read-only at the same path.
            existing = [p for p in DRIVER_MOUNTS if Path(p).exists()]
            assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
                (p, p, True) for p in existing
            ]
            assert list(response.cdi_devices) == []
            two = pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=["Ascend910-0"]),
                    pb.ContainerAllocateRequest(devices_ids=["Ascend910-7", "Ascend910-6"]),
                ]
            )
            answer = await kubelet.plugin(RESOURCE).stub.Allocate(two)
            assert [dict(r.envs) for r in answer.container_responses] == [
                {"ASCEND_VISIBLE_DEVICES": "0"},
                {"ASCEND_VISIBLE_DEVICES": "6,7"},
            ]
            pre = await kubelet.plugin(RESOURCE).stub.PreStartContainer(
                pb.PreStartContainerRequest(devices_ids=["Ascend910-0"])
            )
            assert pre == pb.PreStartContainerResponse()

    run(scenario())


def test_a_repeated_allocate_is_checked_against_the_current_health_every_time(
    node: Node, launch_daemon: Launcher
) -> None:
    """Allocate keeps its answers for device sets it has served; health and ownership are still
    checked per call."""

    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            connection = await registered(kubelet, daemon)
            first = await kubelet.allocate(RESOURCE, ["Ascend910-3", "Ascend910-1"])
            assert await kubelet.allocate(RESOURCE, ["Ascend910-1", "Ascend910-3"]) == first
            write_inventory(node.inventory, with_health(A2, 3, Health.CRITICAL))
            await until(lambda: connection.devices["Ascend910-3"].health == "Unhealthy", 10, "the fault", daemon)
            error = await rpc_error(kubelet.allocate(RESOURCE, ["Ascend910-3", "Ascend910-1"]))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "Ascend910-3 is unhealthy" in (error.details() or ""), error.details()
            write_inventory(node.inventory, A2)
            await until(lambda: connection.devices["Ascend910-3"].health == "Healthy", 10, "the recovery", daemon)
            assert await kubelet.allocate(RESOURCE, ["Ascend910-3", "Ascend910-1"]) == first

    run(scenario())


def test_runtime_injection_answers_env_only(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            await registered(kubelet, launch_daemon(*node.args("--device-injection", "runtime")))
            response = await kubelet.allocate(RESOURCE, ["Ascend910-2"])
            assert dict(response.envs) == {"ASCEND_VISIBLE_DEVICES": "2"}
            assert list(response.devices) == []

    run(scenario())


@pytest.mark.parametrize(
    ("ids", "named"),
    [
        (["Ascend910-42"], "Ascend910-42"),
        (["Ascend910-0", "Ascend910-2"], "Ascend910-2"),
        ([""], "''"),
        (["Ascend310P-1"], "Ascend310P-1"),
        (["npu-1"], "npu-1"),
        (["Ascend910-x"], "Ascend910-x"),
        ([], "no devices"),
    ],
    ids=["unknown", "unhealthy", "empty id", "wrong prefix", "dra name", "garbage", "no ids"],
)
def test_bad_allocate_requests_are_invalid_argument_naming_the_id(
    node: Node, launch_daemon: Launcher, ids: list[str], named: str
) -> None:
    write_inventory(node.inventory, with_health(A2, 2, Health.CRITICAL))

    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            connection = await registered(kubelet, launch_daemon(*node.args()))
            assert connection.devices["Ascend910-2"].health == "Unhealthy"
            error = await rpc_error(kubelet.allocate(RESOURCE, ids))
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert named in (error.details() or ""), error.details()
            empty = await rpc_error(connection.stub.Allocate(pb.AllocateRequest()))
            assert empty.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert (await kubelet.allocate(RESOURCE, ["Ascend910-1"])).envs["ASCEND_VISIBLE_DEVICES"] == "1"

    run(scenario())


def test_cdi_enabled_writes_a_valid_static_spec_and_names_its_devices(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            await registered(kubelet, launch_daemon(*node.args("--cdi-enabled")))
            spec_path = node.cdi_root / "npu.huawei.com-device-plugin.json"
            spec = json.loads(spec_path.read_text())
            assert_valid_cdi(spec)
            assert spec["kind"] == "npu.huawei.com/npu"
            assert [d["name"] for d in spec["devices"]] == [f"npu-{i}" for i in range(8)]
            assert spec["devices"][4]["containerEdits"]["deviceNodes"] == [
                {"path": "/dev/davinci4", "hostPath": f"{node.dev_root}/davinci4", "permissions": "rw"}
            ]
            common = [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
            assert common == ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
            response = await kubelet.allocate(RESOURCE, ["Ascend910-5", "Ascend910-4"])
            assert [d.name for d in response.cdi_devices] == ["npu.huawei.com/npu=npu-4", "npu.huawei.com/npu=npu-5"]
            assert dict(response.envs) == {"ASCEND_VISIBLE_DEVICES": "4,5"}
            assert specs(response) == expected_nodes(node.dev_root, [4, 5])

    run(scenario())


# --- shutdown ---


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_stops_streams_removes_the_socket_and_exits_0(
    node: Node, launch_daemon: Launcher, sig: signal.Signals
) -> None:
    async def scenario() -> None:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args())
            await registered(kubelet, daemon)
            watcher = await Watcher.open(node.plugin_dir / SOCKET)
            code, seconds = await asyncio.to_thread(daemon.signal, sig, 10)
            assert (code, seconds < 5) == (0, True), (code, seconds, daemon.log())
            assert not (node.plugin_dir / SOCKET).exists()
            await until(lambda: watcher.ended is not None, 5, "the stream to end")
            assert watcher.ended == "OK", "streams are closed, not cut"
            assert "did not stop" not in daemon.log()
            await watcher.close()

    run(scenario())


def test_device_plugin_mode_never_imports_the_kubernetes_client(node: Node, launch_daemon: Launcher) -> None:
    async def scenario() -> DaemonProcess:
        async with kubelet_at(node.plugin_dir) as kubelet:
            daemon = launch_daemon(*node.args(), python_args=["-X", "importtime"])
            await registered(kubelet, daemon)
            await kubelet.allocate(RESOURCE, ["Ascend910-0"])
            assert await asyncio.to_thread(daemon.signal, signal.SIGTERM, 10) is not None
            return daemon

    imported = [line.rsplit("|", 1)[-1].strip() for line in run(scenario()).log().splitlines() if "|" in line]
    assert "npu_plugin.deviceplugin.service" in imported
    assert not [m for m in imported if m == "kubernetes" or m.startswith("kubernetes.")]
