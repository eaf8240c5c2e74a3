"""`npu-plugin simulate`: the real daemon against the kubelet simulators and a fake API, step by
step.

Everything runs in a temporary directory on this machine. With a real backend the node's devices are
discovered read-only and served from a copy, so nothing of the kubelet's is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
import yaml

from npu_plugin.ascend.container_edits import COMMON_NODES
from npu_plugin.ascend.device import (
    DEFAULT_DRIVER,
    VNPU_NODE_PREFIX,
    Device,
    Health,
    resource_name_for,
    vnpu_node,
)
from npu_plugin.ascend.vnpu import ChipVnpu, VnpuMode
from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.backends.fake.vnpu_hardware import parse_state
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.cdi.files import claim_spec_path
from npu_plugin.cli.inventory import render_table, vnpu_facts
from npu_plugin.config import Config, Mode, check_vnpu_mode
from npu_plugin.daemon import Daemon
from npu_plugin.errors import ConfigError, NpuPluginError
from npu_plugin.inventory.ownership import Owner, parse_split
from npu_plugin.inventory.vnpu_plans import ChipPlan, Serving, VnpuReader
from npu_plugin.kubeapi.quantity import format_bytes
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from npu_plugin.sim.fakeapi import FakeKubeAPI
from npu_plugin.sim.kubelet import KubeletSimulator
from npu_plugin.sim.podresources import PodResourcesSimulator
from npu_plugin.sim.rest import SLICES_PATH, RestClient
from npu_plugin.sim.scheduler import (
    DEFAULT_CLASS,
    DeviceRequest,
    UnschedulableError,
    allocate_claim,
    published_devices,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
NODE, DRIVER, NAMESPACE = "sim-node", DEFAULT_DRIVER, "default"
DEMO_PROFILE = "atlas-800t-a2"
STEP_TIMEOUT = 10.0
SHARE_COUNT = 4  # simulate --share: shares per shared chip
VNPU_CLASS = f"vnpu.{DRIVER}"
# The selectors of manifests/deviceclasses/: whole NPUs, and every vNPU (existing or creatable).
_VNPU_ATTRIBUTE = f'has(device.attributes["{DRIVER}"].vnpuTemplate)'
CLASS_SELECTORS = {
    DEFAULT_CLASS: f'device.driver == "{DRIVER}" && !{_VNPU_ATTRIBUTE}',
    VNPU_CLASS: f'device.driver == "{DRIVER}" && {_VNPU_ATTRIBUTE}',
}


class StepFailedError(NpuPluginError):
    """A walkthrough step did not produce what it should; exit 1 naming it."""


class Report:
    """Numbered step headers and indented results on stdout."""

    def __init__(self) -> None:
        self.number = 0
        self.current = ""

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.number += 1
        self.current = title
        print(f"\n[{self.number}] {title}", flush=True)
        yield

    def show(self, text: str) -> None:
        for line in text.rstrip("\n").splitlines():
            print(f"    {line}")


@dataclass(frozen=True, slots=True)
class Paths:
    """The kubelet's and the plugin's directories, all under one temporary root."""

    root: Path

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def inventory_yaml(self) -> Path:
        return self.root / "inventory.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def device_plugins(self) -> Path:
        return self.root / "device-plugins"

    @property
    def plugins_registry(self) -> Path:
        return self.root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def pod_resources(self) -> Path:
        return self.root / "pod-resources"

    @property
    def fake_vnpu_state(self) -> Path:
        return self.root / "fake-vnpu.json"


@dataclass(frozen=True, slots=True)
class VnpuDemo:
    """What the vNPU steps ask for: `template`, or None with the `reason` the node makes no vNPUs on
    demand."""

    template: str | None
    reason: str = ""


def vnpu_demo(plans: Mapping[int, ChipPlan], dra_owned: Collection[int]) -> VnpuDemo:
    """Pure: the template with the fewest AI cores on the first DRA chip split on demand, or why
    there is none (the first chip's reason, as the daemon logs it)."""
    for physical_id in sorted(set(plans) & set(dra_owned)):
        plan = plans[physical_id]
        if plan.serving is Serving.DYNAMIC:
            return VnpuDemo(min(plan.chip.templates, key=lambda t: (t.aicore, t.name)).name)
    reasons = [plans[p].reason for p in sorted(set(plans) & set(dra_owned)) if plans[p].reason]
    return VnpuDemo(None, str(reasons[0]) if reasons else "no chip served by DRA reports vNPU templates")


def default_dra_devices(devices: list[Device]) -> str:
    """The upper half of the node (4-7 on an eight-NPU box), as the demo partition."""
    ids = sorted(d.physical_id for d in devices)
    upper = ids[len(ids) // 2 :] or ids
    return ",".join(str(i) for i in upper)


def simulated_split(dra_devices: str, devices: list[Device]) -> frozenset[int]:
    """The DRA share of the walkthrough; a list that does not parse, or names what the simulated node
    lacks (the daemon would ignore it; the walkthrough needs what it names), is a usage error (exit
    2), not a failed step."""
    split = parse_split(dra_devices, devices)
    if split.ignored or not split.ids:
        ids = sorted(d.physical_id for d in devices)
        named = ", ".join(split.ignored) or dra_devices
        raise ConfigError(f"--dra-devices: {named} names no device of the simulated node (devices: {ids})")
    return split.ids


def shared_demo(devices: list[Device], mode: Mode, dra_owned: Collection[int]) -> str:
    """Pure: the chips `--share` shares, one per side the daemon serves: the last chip each side
    owns (the whole-NPU steps take the first)."""
    ids = sorted(d.physical_id for d in devices)
    sides = [[i for i in ids if i in dra_owned]] if mode is Mode.DRA else [ids]
    if mode is Mode.BOTH:
        sides = [[i for i in ids if i not in dra_owned], [i for i in ids if i in dra_owned]]
    return ",".join(str(side[-1]) for side in sides if side)


def daemon_config(
    mode: Mode, paths: Paths, dra_devices: str | None, vnpu: VnpuMode = VnpuMode.OFF, shared: str | None = None
) -> Config:
    """The configuration of the simulated daemon: everything under `paths`, health decided in one
    sample; `shared` chips in SHARE_COUNT shares."""
    backend = BackendOptions(kind=BackendKind.FAKE, fake_inventory=paths.inventory_yaml, dev_root=paths.dev)
    if vnpu is not VnpuMode.OFF:
        backend = replace(backend, fake_vnpu_state=paths.fake_vnpu_state)
    return Config(
        mode=mode,
        node_name=NODE,
        backend=backend,
        device_plugin_path=paths.device_plugins,
        kubelet_registrar_directory_path=paths.plugins_registry,
        kubelet_plugins_directory_path=paths.plugins,
        cdi_root=paths.cdi,
        kubeconfig=paths.kubeconfig,
        pod_resources_socket=paths.pod_resources / "kubelet.sock",
        health_interval=0.1,
        health_failure_threshold=1,
        health_recovery_threshold=1,
        dra_devices=dra_devices if mode is Mode.BOTH else None,
        vnpu=vnpu,
        share_devices=shared,
        share_count=SHARE_COUNT if shared else None,
    )


class Walkthrough:
    def __init__(
        self,
        mode: Mode,
        devices: list[Device],
        dra_devices: str | None,
        paths: Paths,
        *,
        vnpu: VnpuMode = VnpuMode.OFF,
        chips: dict[int, ChipVnpu] | None = None,
        demo: VnpuDemo = VnpuDemo(None),
        shared: str | None = None,
    ) -> None:
        self.mode, self.devices, self.dra_devices, self.paths = mode, devices, dra_devices, paths
        self.vnpu, self.chips, self.demo, self.shared = vnpu, chips, demo, shared
        self.report = Report()
        self.resource = resource_name_for(devices[0].device_type)
        self.dp = mode.serves_device_plugin
        self.dra = mode.serves_dra

    # ---- set-up and tear-down

    @contextlib.asynccontextmanager
    async def environment(self) -> AsyncIterator[None]:
        self.paths.dev.mkdir()
        # A real node's /dev: the dies and the driver's common nodes, so the CDI specs are a real
        # node's.
        for name in [device.device_node for device in self.devices] + list(COMMON_NODES):
            (self.paths.dev / name).touch()
        self.paths.plugins.mkdir()  # the kubelet's, like plugins_registry (which its simulator makes)
        self._write_inventory(self.devices)
        # vNPUs on demand need the DRAPartitionableDevices gate, off by default on Kubernetes 1.34.
        # Shares need DRAConsumableCapacity, off by default on Kubernetes 1.34 too.
        self.api = FakeKubeAPI(
            partitionable_devices=True if self.vnpu is VnpuMode.DYNAMIC else None,
            consumable_capacity=True if self.shared else None,
        )
        self.api.start()
        try:
            self.api.write_kubeconfig(self.paths.kubeconfig)
            self.api.add_node(NODE)
            self.rest = RestClient(self.api.url)
            self.kubelet = KubeletSimulator(self.paths.device_plugins)
            self.dra_kubelet = DraKubeletSimulator(self.paths.plugins_registry, node_name=NODE, api_url=self.api.url)
            self.pod_resources = PodResourcesSimulator(self.paths.pod_resources / "kubelet.sock", self.resource)
            async with self._kubelets(), self._daemon():
                yield
        finally:
            self.api.stop()

    @contextlib.asynccontextmanager
    async def _kubelets(self) -> AsyncIterator[None]:
        await self.pod_resources.start()
        await self.kubelet.start()
        await self.dra_kubelet.start()
        try:
            yield
        finally:
            await self.dra_kubelet.stop()
            await self.kubelet.stop()
            await self.pod_resources.stop()

    @contextlib.asynccontextmanager
    async def _daemon(self) -> AsyncIterator[None]:
        config = daemon_config(self.mode, self.paths, self.dra_devices, self.vnpu, self.shared)
        backend = open_backend(config.backend)
        self.daemon = Daemon(config, backend, discover(backend))
        task = asyncio.create_task(self.daemon.run(), name="simulated-daemon")
        try:
            yield
        finally:
            self.daemon.stop.set()
            await task

    def _write_inventory(self, devices: list[Device]) -> None:
        text = yaml.safe_dump(inventory_document(devices, self.chips), sort_keys=False)
        self.paths.inventory_yaml.write_text(text)

    async def _api(self, method: str, path: str, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.rest.request, method, path, **kwargs)

    # ---- the steps

    async def run(self) -> None:
        with self.report.step(f"discover: {len(self.devices)} NPUs ({self.mode} mode)"):
            self.report.show(render_table(self.devices))
        async with self.environment():
            await self._registration()
            if self.dp:
                await self._device_plugin_flow()
            if self.dra:
                await self._dra_flow()
            if self.dra and self.vnpu is VnpuMode.DYNAMIC:
                await self._vnpu_flow()
            if self.shared:
                await self._share_flow()
            await self._fault_and_recovery()
        with self.report.step("clean up"):
            self.report.show("daemon stopped, simulators stopped, temporary directory removed")

    async def _registration(self) -> None:
        with self.report.step("register with the kubelet"):
            if self.dp:
                await self.kubelet.wait_until(
                    lambda: self.resource in self.kubelet.plugins, STEP_TIMEOUT, "device plugin registration"
                )
                plugin = self.kubelet.plugin(self.resource)
                self.report.show(
                    f"device plugin: {self.resource} at {plugin.endpoint.name} "
                    f"(preferred allocation: {plugin.options.get_preferred_allocation_available})"
                )
            if self.dra:
                driver = await self.dra_kubelet.wait_for_plugin(DRIVER, timeout=STEP_TIMEOUT)
                self.report.show(f"DRA driver: {DRIVER} via {driver.service} at {driver.endpoint}")

    async def _device_plugin_flow(self) -> None:
        plugin = self.kubelet.plugin(self.resource)
        with self.report.step("ListAndWatch: what the device plugin offers"):
            await self.kubelet.wait_until(lambda: plugin.updates > 0, STEP_TIMEOUT, "device list")
            for device_id, device in sorted(plugin.devices.items()):
                numa = ",".join(str(n.ID) for n in device.topology.nodes) or "-"
                self.report.show(f"{device_id:<14} {device.health:<10} NUMA {numa}")
        available = plugin.healthy_ids()
        if not available:
            raise StepFailedError("the device plugin offers no healthy NPU to allocate")
        size = min(2, len(available))
        with self.report.step(f"GetPreferredAllocation: {size} of {len(available)} available"):
            chosen = await self.kubelet.preferred(self.resource, available, [], size)
            self.report.show(f"preferred: {', '.join(chosen)} (locality first: topology group, NUMA node, card)")
        with self.report.step("Allocate: what the container gets"):
            response = await self.kubelet.allocate(self.resource, chosen)
            for key, value in sorted(response.envs.items()):
                self.report.show(f"env     {key}={value}")
            for spec in response.devices:
                self.report.show(f"device  {spec.host_path} -> {spec.container_path} ({spec.permissions})")
            for mount in response.mounts:
                self.report.show(f"mount   {mount.host_path} -> {mount.container_path} (ro={mount.read_only})")
        self.pod_resources.hold_devices(NAMESPACE, "training-0", "main", chosen)

    async def _slices(self) -> list[dict[str, Any]]:
        """This node's slices in chip order (the API lists them by their generated names)."""
        answer = await self._api("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})
        return sorted(answer["items"], key=_chip_order)

    async def _dra_flow(self) -> None:
        with self.report.step("publish ResourceSlices"):
            slices: list[dict[str, Any]] = []

            async def published() -> list[dict[str, Any]] | None:
                slices[:] = await self._slices()
                if self.demo.template is not None and not _settled_with_candidates(slices, self.demo.template):
                    return None
                return slices if slices and any(s["spec"]["devices"] for s in slices) else None

            await self._until_async(published, "ResourceSlice")
            self.report.show(_slice_summary(slices))
        with self.report.step("the scheduler allocates a claim for 1 NPU"):
            ref = await self._allocate("inference-claim", DeviceRequest("npu", count=1))
        with self.report.step("NodePrepareResources: the claim's CDI spec"):
            await self._prepare(ref)
        with self.report.step("NodeUnprepareResources"):
            await self._unprepare(ref)

    async def _allocate(self, name: str, request: DeviceRequest, device_class: str = DEFAULT_CLASS) -> Claim:
        """The scheduler stand-in allocates a one-request claim of `device_class` and shows its
        results."""
        # Without vNPUs every device is a whole NPU: no selector, so no need for cel-python.
        selectors = () if self.vnpu is VnpuMode.OFF else (CLASS_SELECTORS[device_class],)
        claim = await asyncio.to_thread(
            allocate_claim,
            self.rest,
            namespace=NAMESPACE,
            name=name,
            node=NODE,
            requests=[request],
            class_selectors=selectors,
            device_class=device_class,
        )
        for result in claim["status"]["allocation"]["devices"]["results"]:
            self.report.show(
                f"request {result['request']}: {result['driver']} pool {result['pool']} device {result['device']}"
            )
        return Claim(NAMESPACE, claim["metadata"]["name"], claim["metadata"]["uid"])

    async def _prepare(self, ref: Claim) -> None:
        prepared = (await self.dra_kubelet.prepare([ref]))[ref.uid]
        if prepared.error:
            raise StepFailedError(prepared.error)
        for device in prepared.devices:
            self.report.show(f"{device.device_name}: CDI {', '.join(device.cdi_device_ids) or '-'}")
        spec_file = claim_spec_path(self.paths.cdi, DRIVER, ref.uid)
        self.report.show(f"{spec_file.name}:")
        self.report.show(json.dumps(json.loads(spec_file.read_text()), indent=2))

    async def _unprepare(self, ref: Claim) -> None:
        errors = await self.dra_kubelet.unprepare([ref])
        if errors[ref.uid]:
            raise StepFailedError(errors[ref.uid])
        spec_file = claim_spec_path(self.paths.cdi, DRIVER, ref.uid)
        self.report.show(f"claim released; CDI spec removed: {not spec_file.exists()}")

    async def _share_flow(self) -> None:
        """Two pods on one NPU, through each API the daemon serves."""
        snapshot = self.daemon.inventory.snapshot()
        for physical_id in (int(i) for i in (self.shared or "").split(",")):
            view = snapshot.get(physical_id)
            if view is not None and view.owner is Owner.DEVICE_PLUGIN and self.dp:
                await self._dp_shares(physical_id)
            elif view is not None and view.owner is Owner.DRA and self.dra:
                await self._dra_shares(view.device)

    async def _dp_shares(self, physical_id: int) -> None:
        plugin = self.kubelet.plugin(self.resource)
        with self.report.step(f"device plugin: two pods on npu-{physical_id} ({SHARE_COUNT} shares)"):
            shares = sorted(i for i in plugin.devices if i.split("-share-")[0].endswith(f"-{physical_id}"))
            self.report.show(f"listed: {', '.join(shares)}")
            for pod, device_id in zip(("pod-a", "pod-b"), shares, strict=False):
                response = await self.kubelet.allocate(self.resource, [device_id])
                self.report.show(
                    f"{pod} gets {device_id}: ASCEND_VISIBLE_DEVICES={response.envs['ASCEND_VISIBLE_DEVICES']}"
                )

    async def _dra_shares(self, device: Device) -> None:
        from npu_plugin.dra.shared_devices import share_unit

        unit = format_bytes(share_unit(device.memory, SHARE_COUNT))

        async def shared() -> bool | None:
            entries = [e for s in await self._slices() for e in s["spec"]["devices"] if e["name"] == device.dra_name]
            return True if entries and entries[0].get("allowMultipleAllocations") else None

        with self.report.step(f"DRA: {device.dra_name} published shared, memory in units of {unit}"):
            await self._until_async(shared, f"{device.dra_name} with allowMultipleAllocations")
        refs = []
        for name in ("pod-a-claim", "pod-b-claim"):
            with self.report.step(f"the scheduler allocates {name}: memory {unit} of a shared NPU"):
                refs.append(await self._allocate(name, DeviceRequest("npu", capacity={"memory": unit})))
        with self.report.step("NodePrepareResources: both claims on one NPU, each with its share"):
            answers = await self.dra_kubelet.prepare(refs)
            for ref in refs:
                if answers[ref.uid].error:
                    raise StepFailedError(answers[ref.uid].error)
                for prepared in answers[ref.uid].devices:
                    self.report.show(f"{ref.name}: {prepared.device_name} share {prepared.share_id}")
                    self.report.show(f"    CDI {', '.join(prepared.cdi_device_ids)}")
        with self.report.step("NodeUnprepareResources of pod-a-claim: pod-b's share stays"):
            await self._unprepare(refs[0])
            self.report.show(
                f"pod-b-claim still prepared: {claim_spec_path(self.paths.cdi, DRIVER, refs[1].uid).exists()}"
            )
            await self._unprepare(refs[1])

    async def _vnpu_flow(self) -> None:
        template = self.demo.template
        if template is None:
            with self.report.step("vNPUs on demand"):
                self.report.show(f"no vNPUs on demand on this node: {self.demo.reason}; the vNPU steps are skipped")
            return
        await self._vnpu_published(template)
        attribute = f'device.attributes["{DRIVER}"].vnpuTemplate'
        request = DeviceRequest("vnpu", selectors=(f'has({attribute}) && {attribute} == "{template}"',))
        with self.report.step(f"the scheduler allocates a {VNPU_CLASS} claim for one {template}"):
            ref = await self._allocate("vnpu-claim", request, VNPU_CLASS)
        await self._vnpu_prepare(ref)
        await self._vnpu_unprepare(ref)

    async def _vnpu_published(self, template: str) -> None:
        with self.report.step("vNPU counters and candidates published"):
            slices: list[dict[str, Any]] = []

            async def candidates() -> dict[str, list[str]] | None:
                slices[:] = await self._slices()
                by_template = _candidates_by_template(slices)
                return by_template if template in by_template else None

            by_template = await self._until_async(candidates, f"{template} candidate")
            for item in slices:
                for counter_set in item["spec"].get("sharedCounters") or []:
                    counters = ", ".join(f"{k}={v['value']}" for k, v in counter_set["counters"].items())
                    self.report.show(f"counter set {counter_set['name']}: {counters}")
            for name, candidates_of in sorted(by_template.items()):
                self.report.show(f"candidates {name}: {len(candidates_of)} ({candidates_of[0]}, ...)")

    async def _vnpu_prepare(self, ref: Claim) -> None:
        with self.report.step("NodePrepareResources: the vNPU is created"):
            await self._prepare(ref)
            state = parse_state(self.paths.fake_vnpu_state.read_text())
            for vnpu in state.all_vnpus():
                node = self.paths.dev / vnpu_node(vnpu.vnpu_id)
                self.report.show(
                    f"vNPU {vnpu.vnpu_id} ({vnpu.template}) on npu-{vnpu.physical_id}: {node} exists: {node.exists()}"
                )

    async def _vnpu_unprepare(self, ref: Claim) -> None:
        with self.report.step("NodeUnprepareResources: the vNPU is destroyed"):
            await self._unprepare(ref)
            left = parse_state(self.paths.fake_vnpu_state.read_text()).all_vnpus()
            nodes = sorted(p.name for p in self.paths.dev.glob(f"{VNPU_NODE_PREFIX}*"))
            self.report.show(f"vNPUs left: {len(left)}; vdavinci nodes left: {', '.join(nodes) or 'none'}")

    async def _until_async(self, check: Callable[[], Awaitable[T | None]], what: str) -> T:
        deadline = time.monotonic() + STEP_TIMEOUT
        while (value := await check()) is None:
            if time.monotonic() > deadline:
                raise StepFailedError(f"no {what} within {STEP_TIMEOUT:.0f}s")
            await asyncio.sleep(0.05)
        return value

    def _victims(self) -> list[Device]:
        """One device per served API to break: the first of each side's share."""
        snapshot = self.daemon.inventory.snapshot()
        seen: dict[str, Device] = {}
        for view in snapshot.devices:
            seen.setdefault(view.owner.value, view.device)
        return list(seen.values())

    async def _fault_and_recovery(self) -> None:
        victims = self._victims()
        names = ", ".join(f"{d.dp_id}/{d.dra_name}" for d in victims)
        with self.report.step(f"health fault: {names} reported Critical"):
            broken = {d.physical_id for d in victims}
            self._write_inventory(
                [replace(d, health=Health.CRITICAL) if d.physical_id in broken else d for d in self.devices]
            )
            await self._observe_health(broken, healthy=False)
        with self.report.step("recovery: back to OK"):
            self._write_inventory(self.devices)
            await self._observe_health(broken, healthy=True)

    async def _listed_as(self, device: Device, health: str) -> None:
        plugin = self.kubelet.plugin(self.resource)
        # A shared chip is listed as its shares, which carry its health.
        device_id = device.dp_id if device.dp_id in plugin.devices else f"{device.dp_id}-share-0"

        def listed() -> bool:
            return plugin.devices[device_id].health == health

        await self.kubelet.wait_until(listed, STEP_TIMEOUT, f"{health} {device_id}")
        self.report.show(f"ListAndWatch: {device_id} {health}")

    async def _observe_health(self, ids: set[int], healthy: bool) -> None:
        for device in self.devices:
            if device.physical_id not in ids:
                continue
            view = self.daemon.inventory.snapshot().get(device.physical_id)
            assert view is not None
            if view.owner is Owner.DEVICE_PLUGIN and self.dp:
                await self._listed_as(device, "Healthy" if healthy else "Unhealthy")
            elif self.dra:

                async def listed(d: Device = device) -> bool | None:
                    names = {e["name"] for s in await self._slices() for e in s["spec"]["devices"]}
                    return True if (d.dra_name in names) == healthy else None

                await self._until_async(listed, f"slice update for {device.dra_name}")
                where = "back in" if healthy else "removed from"
                self.report.show(f"ResourceSlice: {device.dra_name} {where} the pool")


def _chip_order(item: dict[str, Any]) -> tuple[int, str]:
    """The physical id of a slice's first device or counter set (`npu-3...`), then its name."""
    spec = item["spec"]
    names = [d["name"] for d in spec.get("devices") or []] + [c["name"] for c in spec.get("sharedCounters") or []]
    match = re.match(r"npu-(\d+)", names[0]) if names else None
    return (int(match.group(1)) if match else -1, item["metadata"]["name"])


def _slice_summary(slices: list[dict[str, Any]]) -> str:
    lines = []
    for item in slices:
        spec = item["spec"]
        names = ", ".join(d["name"] for d in spec["devices"])
        lines.append(
            f"{item['metadata']['name']}: pool {spec['pool']['name']} generation "
            f"{spec['pool']['generation']}, {len(spec['devices'])} devices: {names}"
        )
    first = next((d for s in slices for d in s["spec"]["devices"]), None)
    if first is not None:
        lines.append(f'first device as the scheduler sees it (CEL: device.attributes["{DRIVER}"].<name>):')
        lines += ["  " + line for line in yaml.safe_dump(first, sort_keys=False).splitlines()]
    return "\n".join(lines)


def _candidates_by_template(slices: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The published vNPU candidates' names by template."""
    by_template: dict[str, list[str]] = {}
    for item in slices:
        for device in item["spec"]["devices"]:
            template = (device.get("attributes") or {}).get("vnpuTemplate")
            if template is not None:
                by_template.setdefault(template["string"], []).append(device["name"])
    return by_template


def _settled_with_candidates(slices: list[dict[str, Any]], template: str) -> bool:
    """Whether the scheduler sees the whole pool (every slice of its newest generation) with
    `template`."""
    demo = {"string": template}
    return any((d.entry.get("attributes") or {}).get("vnpuTemplate") == demo for d in published_devices(slices))


def _discover(
    options: BackendOptions, vnpu: VnpuMode
) -> tuple[list[Device], dict[int, ChipVnpu] | None, dict[int, ChipPlan]]:
    """The node's devices and, unless --vnpu off, what its chips say about vNPUs (for the simulated
    copy) and how the daemon will serve them."""
    backend = open_backend(options)
    try:
        devices = discover(backend)
        if vnpu is VnpuMode.OFF or not isinstance(backend, VnpuBackend):
            return devices, None, {}
        return devices, vnpu_facts(backend, devices), VnpuReader(backend, vnpu).read(devices)
    finally:
        backend.close()


def run_simulation(
    mode: Mode, backend: BackendOptions, dra_devices: str | None, vnpu: VnpuMode = VnpuMode.OFF, share: bool = False
) -> int:
    check_vnpu_mode(mode, vnpu)  # a usage error (exit 2) before anything starts
    if vnpu is not VnpuMode.OFF and importlib.util.find_spec("celpy") is None:
        raise NpuPluginError(
            f"--vnpu {vnpu}: the scheduler stand-in evaluates the DeviceClasses' CEL with cel-python, which is not "
            "installed: install the dev extras (pip install -e '.[dev]')"
        )
    devices, chips, plans = _discover(backend, vnpu)
    dra_owned: Collection[int] = {d.physical_id for d in devices}
    if mode is Mode.BOTH:
        dra_devices = dra_devices or default_dra_devices(devices)
        dra_owned = simulated_split(dra_devices, devices)
    demo = vnpu_demo(plans, dra_owned)
    shared = shared_demo(devices, mode, dra_owned) if share else None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="npu-sim-") as root:
        paths = Paths(Path(root))
        walkthrough = Walkthrough(mode, devices, dra_devices, paths, vnpu=vnpu, chips=chips, demo=demo, shared=shared)
        try:
            asyncio.run(walkthrough.run())
        except (NpuPluginError, UnschedulableError, TimeoutError, LookupError, OSError, grpc.aio.AioRpcError) as error:
            print(
                f"\nnpu-plugin simulate: step {walkthrough.report.number} "
                f"({walkthrough.report.current}) failed: {error}",
                file=sys.stderr,
            )
            return 1
    print(f"\nsimulation complete in {time.monotonic() - started:.1f}s: every step succeeded")
    return 0
