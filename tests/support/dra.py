"""Helpers of the DRA integration tests: workspace, daemon arguments, claims, polling (fixtures:
dra_fixtures)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import pytest

from npu_plugin.ascend.container_edits import COMMON_NODES
from npu_plugin.ascend.device import Device, Health
from npu_plugin.dra.checkpoint import Checkpoint
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator, PrepareResult
from npu_plugin.sim.rest import RestClient
from npu_plugin.sim.scheduler import DeviceRequest, UnschedulableError, allocate_claim
from tests.support import cleanup
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.daemon import write_inventory
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI

DRIVER = "npu.huawei.com"
NODE = "node-a"
T = TypeVar("T")


class AnsweredDevice(Protocol):
    @property
    def request_names(self) -> tuple[str, ...]: ...
    @property
    def cdi_device_ids(self) -> tuple[str, ...]: ...


def container_cdi_ids(devices: Sequence[AnsweredDevice], request: str = "") -> list[str]:
    """The CDI ids the kubelet hands the runtime, in order, for a container given the claim whose Prepare
    answered `devices`: all of them when the container names the whole claim (`request` ""), else those of
    the entries naming `request` or no request (the kubelet's cdiDevicesAsList, pkg/kubelet/cm/dra)."""
    return [
        cdi_id
        for device in devices
        if not request or not device.request_names or request in device.request_names
        for cdi_id in device.cdi_device_ids
    ]


@dataclass(frozen=True)
class Workspace:
    """Every directory a DRA daemon touches, under one temporary root."""

    root: Path

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def reg(self) -> Path:
        return self.root / "registry"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def checkpoint(self) -> Path:
        return self.state / "checkpoint.json"

    def registration_socket(self, pod_uid: str | None = None) -> Path:
        return self.reg / (f"{DRIVER}-{pod_uid}-reg.sock" if pod_uid else f"{DRIVER}-reg.sock")

    def dra_socket(self, pod_uid: str | None = None) -> Path:
        return self.plugins / DRIVER / (f"dra-{pod_uid}.sock" if pod_uid else "dra.sock")

    def cdi_file(self, claim_uid: str) -> Path:
        return self.cdi / f"{DRIVER}-claim_{claim_uid}.json"

    def cdi_spec(self, claim_uid: str) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(self.cdi_file(claim_uid).read_text())
        return spec


def make_char_device(path: Path) -> None:
    """A real character device (1,3 = /dev/null's numbers) when we may mknod, else a plain file."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        path.touch()


def with_health(devices: Sequence[Device], unhealthy: set[int]) -> list[Device]:
    return [replace(d, health=Health.CRITICAL if d.physical_id in unhealthy else Health.OK) for d in devices]


def make_workspace(root: Path, devices: Sequence[Device] | None = None) -> Workspace:
    workspace = Workspace(root)
    # The kubelet's directories (registry, plugins, dp for device plugins) exist, as on a node with
    # a kubelet.
    for folder in (
        workspace.dev,
        workspace.reg,
        workspace.plugins,
        workspace.root / "dp",
        workspace.cdi,
        workspace.state,
    ):
        folder.mkdir(parents=True, exist_ok=True)
    devices = list(devices) if devices is not None else profile_devices("atlas-800t-a2")
    for name in [f"davinci{d.physical_id}" for d in devices[:16]] + list(COMMON_NODES):
        make_char_device(workspace.dev / name)
    write_inventory(workspace.inventory, devices)
    return workspace


@contextlib.contextmanager
def fake_api_with_node() -> Iterator[FakeKubeAPI]:
    """The fake API server on 127.0.0.1 with this node's Node object."""
    with FakeKubeAPI() as api:
        api.add_node(NODE)
        yield api


@contextlib.contextmanager
def temporary_workspace(api: FakeKubeAPI) -> Iterator[Workspace]:
    """A workspace under a short root in /tmp (Unix socket paths must stay under 108 bytes) whose
    kubeconfig points at `api`, with the atlas-800t-a2 inventory; removed afterwards."""
    with cleanup.temporary_directory("dra-") as root:
        workspace = make_workspace(root)
        api.write_kubeconfig(workspace.kubeconfig)
        yield workspace


def dra_args(workspace: Workspace, *extra: str, pod_uid: str | None = None) -> list[str]:
    """`serve` arguments of a DRA daemon living in `workspace` (fast health settings)."""
    return [
        "--mode",
        "dra",
        "--node-name",
        NODE,
        "--backend",
        "fake",
        "--fake-inventory",
        str(workspace.inventory),
        "--dev-root",
        str(workspace.dev),
        "--kubelet-registrar-directory-path",
        str(workspace.reg),
        "--kubelet-plugins-directory-path",
        str(workspace.plugins),
        "--cdi-root",
        str(workspace.cdi),
        "--state-dir",
        str(workspace.state),
        "--kubeconfig",
        str(workspace.kubeconfig),
        # No PodResources unless a test serves one there: never the host kubelet's socket, which a
        # real kubelet on the test machine may serve (its device-plugin pods would hold our NPUs).
        "--pod-resources-socket",
        str(workspace.root / "pr" / "kubelet.sock"),
        "--health-interval",
        "0.1",
        "--health-failure-threshold",
        "1",
        "--health-recovery-threshold",
        "1",
        *(["--pod-uid", pod_uid] if pod_uid else []),
        *extra,
    ]


async def async_wait_until(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def retry_prepare(
    kubelet: DraKubeletSimulator, claims: Sequence[Claim], **options: Any
) -> dict[str, PrepareResult]:
    """Prepare as the kubelet retries it after a plugin restart: the first tries may reach the dead
    daemon's socket, or find no plugin while the new one is still registering."""
    for _ in range(200):
        try:
            return await kubelet.prepare(claims, **options)
        except (grpc.aio.AioRpcError, LookupError):
            await asyncio.sleep(0.05)
    raise AssertionError("Prepare never succeeded after the restart")


def claims_in_checkpoint(workspace: Workspace) -> dict[str, Any]:
    claims: dict[str, Any] = json.loads(workspace.checkpoint.read_text())["claims"]
    return claims


def checked_state(workspace: Workspace) -> Checkpoint:
    """What is on disk, checked the way a crash must leave it: the checkpoint parses, every spec a
    runtime would read from --cdi-root (`*.json`) is valid CDI, and no device is held by two
    claims."""
    stored = Checkpoint.from_bytes(workspace.checkpoint.read_bytes()) if workspace.checkpoint.exists() else None
    for path in workspace.cdi.glob("*.json"):
        assert_valid_cdi(json.loads(path.read_bytes()))
    held = [d.device_name for entry in (stored.claims.values() if stored else ()) for d in entry.devices]
    assert len(held) == len(set(held)), f"a device is held by two claims: {sorted(held)}"
    return stored or Checkpoint("none")


def node_slices(api: FakeKubeAPI) -> list[dict[str, Any]]:
    """This node's slices of our driver, devices in physical-id order across slices."""
    found = [s for s in api.objects("ResourceSlice") if s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == DRIVER]
    return sorted(found, key=lambda s: [int(d["name"].split("-")[1]) for d in s["spec"].get("devices", [])] or [-1])


def published_names(api: FakeKubeAPI) -> list[str]:
    return [d["name"] for s in node_slices(api) for d in s["spec"].get("devices", [])]


def pool_settled(api: FakeKubeAPI) -> list[dict[str, Any]] | None:
    """The slices when the pool is complete and consistent (one generation, count = slices), else
    None."""
    slices = node_slices(api)
    pools = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices}
    if len(pools) != 1 or next(iter(pools))[1] != len(slices):
        return None
    return slices


async def allocate(
    api: FakeKubeAPI, name: str, *requests: DeviceRequest, namespace: str = "default", timeout: float = 10.0
) -> Claim:
    """Allocate like the scheduler, which retries until the node's slices offer the devices. The API
    calls run in a thread and the pauses are awaited: the loop this is awaited from (the kubelet
    simulator's, in a scenario) keeps running meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            claim = await asyncio.to_thread(
                allocate_claim,
                RestClient(api.url),
                namespace=namespace,
                name=name,
                node=NODE,
                requests=requests or (DeviceRequest("npu"),),
            )
            return Claim(namespace, name, claim["metadata"]["uid"])
        except UnschedulableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def plant_claim(
    api: FakeKubeAPI, name: str, uid_of: str | None, results: list[dict[str, str]] | None, namespace: str = "default"
) -> Claim:
    """A claim with any allocation status (None: not allocated) — states the scheduler would not
    write."""
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "spec": {"devices": {}}}
    if results is not None:
        body["status"] = {"allocation": {"devices": {"results": results}}}
    stored = api.put_object("ResourceClaim", body)
    return Claim(namespace, name, uid_of or stored["metadata"]["uid"])


def result(device: str, request: str = "npu", pool: str = NODE, driver: str = DRIVER) -> dict[str, str]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


class CheckedKubelet(DraKubeletSimulator):
    """The simulator, checking every CDI spec a successful Prepare leaves behind against the CDI
    rules."""

    def __init__(self, workspace: Workspace, **options: Any) -> None:
        super().__init__(workspace.reg, node_name=NODE, **options)
        self.workspace = workspace

    async def prepare(self, claims: Sequence[Claim], **options: Any) -> dict[str, PrepareResult]:
        results = await super().prepare(claims, **options)
        for uid, result in results.items():
            if not result.error:
                assert_valid_cdi(self.workspace.cdi_spec(uid))
        return results


def run_with_kubelet(
    workspace: Workspace, api: FakeKubeAPI, scenario: Callable[[DraKubeletSimulator], Awaitable[T]], **options: Any
) -> T:
    """Run an async scenario against a started DRA kubelet simulator (stopped afterwards)."""

    async def main() -> T:
        async with CheckedKubelet(workspace, api_url=api.url, **options) as kubelet:
            return await scenario(kubelet)

    return asyncio.run(main())
