"""The composition root of `serve`: discovery, inventory, ownership, health, servers, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from npu_plugin import __version__
from npu_plugin.aio.tasks import until_closed
from npu_plugin.ascend.container_edits import HostLayout, probe_host
from npu_plugin.ascend.device import Device, device_key, resource_name_for, without_ip
from npu_plugin.ascend.vnpu import Vnpu, VnpuMode
from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.backends.base import Backend, VnpuBackend
from npu_plugin.config import Config, Mode, check_paths
from npu_plugin.errors import CdiError, ConfigError, KubeApiError, NpuPluginError
from npu_plugin.inventory.health_feed import HealthMonitor
from npu_plugin.inventory.ownership import SPLIT_KEY_SUFFIX, Owner, Partition, node_split
from npu_plugin.inventory.sharing import Sharing, check_not_split
from npu_plugin.inventory.state import FRESHNESS_INTERVALS, Inventory, samples_fresh
from npu_plugin.observability.telemetry import Telemetry

# What only some modes or flags use (the device plugin, DRA, the handover, vNPUs, CDI) is imported
# where it is built: every module loaded stays in memory and costs each daemon's start CPU time,
# multiplied by a fleet.
if TYPE_CHECKING:
    from npu_plugin.deviceplugin.extended_classes import ExtendedClassCheck
    from npu_plugin.deviceplugin.listing import DeviceListing
    from npu_plugin.deviceplugin.resources import DevicePlugins
    from npu_plugin.deviceplugin.service import Grant
    from npu_plugin.deviceplugin.volcano import VolcanoChoice
    from npu_plugin.dra.plugin import DraPlugin
    from npu_plugin.dra.prepare_results import ClaimRef, PrepareResult
    from npu_plugin.dra.vnpus import VnpuOperations
    from npu_plugin.handover.workflow import Handover
    from npu_plugin.inventory.vnpu_refresh import VnpuRelist
    from npu_plugin.kubeapi.protocol import KubeApi
    from npu_plugin.podannotations.writer import PodAnnotator

log = logging.getLogger(__name__)
SHUTDOWN_GRACE = 3.0
# Every catchable signal whose default action ends the process: each stops the daemon in order
# instead, so it leaves no socket behind. SIGHUP (a terminal hanging up, or an operator's reload
# habit) is logged and ignored.
STOP_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGVTALRM,
    signal.SIGPROF,
    signal.SIGXCPU,
    signal.SIGXFSZ,
    signal.SIGPWR,
    signal.SIGIO,
)


def run_daemon(config: Config) -> int:
    check_paths(config)
    backend = open_backend(config.backend)
    try:
        return asyncio.run(Daemon(config, backend, discover(backend)).run())
    finally:
        backend.close()


def check_vnpus(config: Config, backend: Backend, devices: list[Device], said: set[str]) -> dict[int, tuple[Vnpu, ...]]:
    """With --vnpu static|dynamic, read every chip's vNPUs once before serving: a --vnpu-templates
    name no chip offers stops the start (exit 2, naming the chip), so does unreadable vNPU state
    (exit 1); skipped templates and chips that cannot split on demand are logged (and added to
    `said`). The vNPUs found, by chip."""
    if config.vnpu is not VnpuMode.OFF and isinstance(backend, VnpuBackend):
        from npu_plugin.inventory.vnpu_plans import VnpuReader

        plans = VnpuReader(backend, config.vnpu, config.vnpu_templates, said=said).read(devices)
        return {physical_id: plan.chip.vnpus for physical_id, plan in plans.items()}
    return {}


def resolve_sharing(config: Config, devices: list[Device], vnpus: Mapping[int, tuple[Vnpu, ...]]) -> Sharing:
    """The shared chips; ConfigError when --share-devices names a chip that is not there or that
    holds vNPUs."""
    sharing = Sharing.of(config.share_devices, config.share_count, devices)
    check_not_split(sharing, vnpus)
    if config.share_count is not None and not sharing.enabled:
        log.warning("--share-count applies to the chips --share-devices names; none is named, nothing is shared")
    if sharing.enabled:
        log.info(
            "sharing %s, %d shares each",
            "every NPU" if sharing.every else device_key(sharing.physical_ids),
            sharing.count,
            extra={"device": device_key(sharing.physical_ids)},
        )
    return sharing


def api_credentials(config: Config, environ: Mapping[str, str]) -> bool:
    """Whether the daemon can reach the API server: --kubeconfig, or a pod's service account."""
    if config.kubeconfig is not None:
        return True
    if not environ.get("KUBERNETES_SERVICE_HOST"):
        return False
    from npu_plugin.kubeapi.kubeconfig import SERVICE_ACCOUNT_DIR

    return (SERVICE_ACCOUNT_DIR / "token").is_file()


def resolve_resource_name(config: Config, devices: list[Device]) -> str:
    if config.resource_name != "auto":
        return config.resource_name
    names = {resource_name_for(d.device_type) for d in devices}
    if len(names) != 1:
        raise ConfigError(f"devices of several families ({', '.join(sorted(names))}); set --resource-name")
    return names.pop()


class Daemon:
    """Owns every task of the running daemon; `run` returns the exit code after a clean shutdown."""

    def __init__(self, config: Config, backend: Backend, devices: list[Device]) -> None:
        self.config, self.backend, self.devices = config, backend, devices
        # Shared by every vNPU reader of the daemon, so each skipped template and each reason a chip
        # is not split on demand is logged once, at start, however many parts read the chips.
        self.vnpu_said: set[str] = set()
        vnpus = check_vnpus(config, backend, devices, self.vnpu_said)
        self.sharing = resolve_sharing(config, devices, vnpus)
        self.resource_name = resolve_resource_name(config, devices)
        if config.dra_devices and config.mode is not Mode.BOTH:
            log.warning("--dra-devices applies to --mode both only; ignored in --mode %s", config.mode)
        self._kube: KubeApi | None = None
        partition = self._partition()
        desired = partition.owners(devices)
        self.inventory = Inventory(
            devices,
            failure_threshold=config.health_failure_threshold,
            recovery_threshold=config.health_recovery_threshold,
            link_down_timeout=config.link_down_timeout,
            owners=desired,
            desired=desired,
            new_device_owner=partition.owner_of,
        )
        self.layout: HostLayout = probe_host(config.dev_root, config.device_injection, config.mount_driver)
        self.stop = asyncio.Event()
        self.telemetry = Telemetry(config.metrics_port, config.healthcheck_port, config.bind_address)
        self.telemetry.split_ignored(len(partition.ignored))
        self.class_check: ExtendedClassCheck | None = None
        self.volcano: VolcanoChoice | None = None
        self.annotator = self._pod_annotator()
        self.vnpu_relist = self._vnpu_relist()
        self.dra: DraPlugin | None = self._dra_plugin() if config.serves_dra else None
        self.handover = (
            self._handover(self.dra) if self.dra is not None or config.pod_resources_socket.is_socket() else None
        )
        if self.vnpu_relist is not None and self.dra is not None:
            # Only the relist hears of vNPUs an administrator makes or destroys; the slices are
            # rebuilt from a read of their own then, so only a change costs a second read.
            publisher = self.dra.publisher
            self.vnpu_relist.on_change(lambda _vnpus: publisher.trigger())

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._on_hangup)
        self._log_start()
        if self.annotator is None and self.config.pod_annotations is None:
            log.info("pod annotations off: no API credentials or no --node-name (--pod-annotations)")
        if self.handover is not None:
            await self.handover.take_ownership()
        # Everything that can fail at start on the node's files does so before any task runs.
        device_plugin = self._device_plugin() if self.config.serves_device_plugin else None
        if self.volcano is not None:
            await self.volcano.load()
        monitor = HealthMonitor(self.backend, self.inventory, self.config.dev_root, self.config.health_interval)
        monitor.start_watching()
        apis = [
            api.value
            for api, on in ((Mode.DEVICE_PLUGIN, self.config.serves_device_plugin), (Mode.DRA, self.config.serves_dra))
            if on
        ]
        await self.telemetry.start(apis, lambda: self.inventory.last_sample, self.config.health_interval)
        tasks = [
            self._task(monitor.run(self.stop), "health-poller"),
            self._task(self._record_devices(), "device-metrics"),
            self._task(self.telemetry.run(self.stop), "health-service"),
        ]
        if device_plugin is not None:
            tasks.append(self._task(device_plugin.run(self.stop), "device-plugins"))
            if (check := self._extended_class_check(device_plugin)) is not None:
                tasks.append(self._task(check.run(self.stop), "deviceclass-check"))
        if self.dra is not None:
            tasks.append(self._task(self.dra.run(self.stop), "dra-plugin"))
        if self.handover is not None:
            tasks.append(self._task(self.handover.run(self.stop), "handover"))
        if self.vnpu_relist is not None:
            tasks.append(self._task(self.vnpu_relist.run(self.stop), "vnpu-relist"))
        try:
            await self._until_stopped(tasks)
        finally:
            monitor.stop_watching()
            self.telemetry.close()
            if self.annotator is not None:
                await self.annotator.close()
        log.info("npu-plugin stopped")
        return 0

    def _partition(self) -> Partition:
        """Both mode: the split the Node carries (it wins), else --dra-devices; neither is refused.
        Items naming devices or groups this node lacks are ignored, said in one warning."""
        config = self.config
        text, source = config.dra_devices, "--dra-devices"
        if config.mode is Mode.BOTH:
            if (found := self._node_split()) is not None:
                if text is not None and found[0] != text:
                    log.info("DRA split from %s: %r (instead of --dra-devices %r)", found[1], found[0], text)
                text, source = found
            if text is None:
                raise ConfigError(
                    f"--mode both needs a split: --dra-devices LIST, or the annotation (or label) "
                    f"{config.driver_name}/{SPLIT_KEY_SUFFIX} on Node {config.node_name}, which has neither"
                )
        partition = Partition.of(config.mode, text, self.devices, source)
        if partition.ignored:
            left = [d.dra_name for d in self.devices if partition.owner_of(d) is Owner.DRA]
            log.warning(
                "%s: %s name no device on this node and are ignored; %s",
                source,
                ", ".join(partition.ignored),
                f"DRA serves {', '.join(left)}" if left else "every device is served by the device plugin",
            )
        return partition

    def _node_split(self) -> tuple[str, str] | None:
        """The Node's own split; without --dra-devices to fall back on, a Node that cannot be read
        stops the start."""
        assert self.config.node_name is not None
        try:
            node = self._client().get_node(self.config.node_name)
        except KubeApiError as error:
            if self.config.dra_devices is None:
                name = self.config.node_name
                why = f"cannot read Node {name} for its split: {error}"
                raise NpuPluginError(f"--mode both without --dra-devices: {why}") from None
            log.warning(
                "cannot read Node %s for its DRA split, using --dra-devices: %s",
                self.config.node_name,
                error,
                extra={"error": str(error)},
            )
            return None
        meta = node["metadata"]
        return node_split(self.config.driver_name, meta.get("labels") or {}, meta.get("annotations") or {})

    def _log_start(self) -> None:
        facts = {
            "version": __version__,
            "mode": self.config.mode,
            "backend": self.backend.name,
            "device_count": len(self.devices),
        }
        log.info(
            "npu-plugin %(version)s starting: mode=%(mode)s backend=%(backend)s devices=%(device_count)d",
            facts,
            extra=facts,
        )
        if missing := without_ip(self.devices):
            names = device_key(missing)
            log.warning(
                "no device IP for %s: their slices carry no deviceIP attribute, and rank tables built from them "
                "cannot complete (give each NPU its RoCE address: hccn_tool -i <physical id> -ip -s address <ip> "
                "netmask <mask>, then restart)",
                names,
                extra={"device": names},
            )

    # ---- servers ----

    async def _record_devices(self) -> None:
        async with contextlib.aclosing(until_closed(self.inventory.watch(), self.stop)) as snapshots:
            async for snapshot in snapshots:
                self.telemetry.devices(snapshot)

    def _device_plugin(self) -> DevicePlugins:
        from npu_plugin.deviceplugin.resources import DevicePlugins
        from npu_plugin.deviceplugin.service import DevicePluginService

        config, device_type = self.config, self.devices[0].device_type
        listing = self._device_listing()
        volcano = self.volcano = self._volcano(listing) if config.volcano else None
        driver = config.driver_name if config.cdi_enabled else None
        if driver is not None:
            from npu_plugin.cdi.files import write_static_spec

            path = write_static_spec(config.cdi_root, driver, self.layout, self.devices)
            log.info("static CDI spec for the device plugin written to %s", path)

        def make_service(vnpu_resource: str | None) -> DevicePluginService:
            allocated, granted = self.telemetry.allocated, self._granted
            if vnpu_resource is None and volcano is not None:
                from npu_plugin.deviceplugin.volcano import VolcanoDevicePluginService

                return VolcanoDevicePluginService(
                    listing, self.layout, device_type, driver, choice=volcano, on_allocate=allocated, on_granted=granted
                )
            if vnpu_resource is None:
                return DevicePluginService(
                    listing,
                    self.layout,
                    device_type,
                    driver,
                    on_allocate=allocated,
                    on_granted=granted,
                    sharing=self.sharing,
                    share_allocation=config.share_allocation,
                )
            from npu_plugin.deviceplugin.vnpu_service import VnpuDevicePluginService

            return VnpuDevicePluginService(
                listing,
                self.layout,
                device_type,
                driver,
                resource_name=vnpu_resource,
                on_allocate=self.telemetry.allocated,
            )

        return DevicePlugins(
            config.device_plugin_path,
            self.resource_name,
            config.pod_uid,
            listing=listing,
            make_service=make_service,
            on_registered=lambda up: self.telemetry.registered(Mode.DEVICE_PLUGIN, up),
            on_new_resource=self._recheck_classes,
        )

    def _granted(self, grant: Grant, kubelet_ids: Sequence[str]) -> None:
        """After an Allocate of whole NPUs: MindCluster's annotations on the pod that got them."""
        if self.annotator is None:
            return
        from npu_plugin.podannotations.writer import allocate_job

        snapshot = self.inventory.snapshot()
        devices = [view.device for i in grant.physical_ids if (view := snapshot.get(i)) is not None]
        self.annotator.submit(allocate_job(kubelet_ids, devices, grant.pod))

    def _claims_prepared(self, prepared: Sequence[tuple[ClaimRef, PrepareResult]]) -> None:
        """After a Prepare: MindCluster's annotations on the pods the claims are reserved for."""
        if self.annotator is None or not any(result.pods for _ref, result in prepared):
            return
        from npu_plugin.podannotations.writer import claim_jobs

        snapshot = self.inventory.snapshot()
        batch = [
            (
                ref.label,
                result.pods,
                [view.device for d in result.devices if (view := snapshot.get(d.physical_id)) is not None],
            )
            for ref, result in prepared
        ]
        for job in claim_jobs(batch):
            self.annotator.submit(job)

    def _pod_annotator(self) -> PodAnnotator | None:
        """--pod-annotations: on when asked, or by default when credentials exist and the node is
        named."""
        config = self.config
        wanted = config.pod_annotations
        if wanted is None:
            wanted = config.node_name is not None and api_credentials(config, os.environ)
        if not wanted:
            return None
        assert config.node_name is not None
        from npu_plugin.podannotations.writer import PodAnnotator

        return PodAnnotator(
            self._client(),
            config.node_name,
            resource_name=self.resource_name,
            pod_resources_socket=config.pod_resources_socket,
            on_result=self.telemetry.pod_annotations,
        )

    def _volcano(self, listing: DeviceListing) -> VolcanoChoice:
        from npu_plugin.ascend.device import id_prefix
        from npu_plugin.deviceplugin.volcano import VolcanoChoice

        assert self.config.node_name is not None
        choice = VolcanoChoice(
            self._client(),
            self.config.node_name,
            self.resource_name,
            id_prefix(self.devices[0].device_type),
            on_result=self.telemetry.volcano,
        )
        choice.changed = listing.nudge
        return choice

    def _device_listing(self) -> DeviceListing:
        """The device plugin's devices; under --vnpu static|dynamic also the vNPUs on the chips (the
        device plugin serves existing vNPUs only: creating them is DRA's)."""
        from npu_plugin.deviceplugin.listing import DeviceListing

        if self.vnpu_relist is None:
            return DeviceListing(self.inventory)
        self.vnpu_relist.on_change(self._vnpus_changed)
        return DeviceListing(self.inventory, domain=self.resource_name.split("/", 1)[0], relist=self.vnpu_relist)

    def _vnpu_relist(self) -> VnpuRelist | None:
        """Under --vnpu static|dynamic, the vNPUs re-read every health interval, once for both
        sides."""
        if self.config.vnpu is VnpuMode.OFF or not isinstance(self.backend, VnpuBackend):
            return None
        # With DRA, DRA's reads set the vNPU metric: only they know which vNPUs npu-plugin made.
        on_read = self.telemetry.vnpus if not self.config.serves_dra else lambda _vnpus: None
        from npu_plugin.inventory.vnpu_plans import VnpuReader
        from npu_plugin.inventory.vnpu_refresh import VnpuRelist

        reader = VnpuReader(self.backend, VnpuMode.STATIC, on_read=on_read, said=self.vnpu_said)

        def read(devices: Sequence[Device]) -> dict[int, tuple[Vnpu, ...]]:
            return {physical_id: plan.chip.vnpus for physical_id, plan in reader.read(devices).items()}

        return VnpuRelist(self.inventory, read, self.config.health_interval)

    def _vnpus_changed(self, vnpus: Mapping[int, tuple[Vnpu, ...]]) -> None:
        """The static CDI spec names every vNPU before the kubelet hears of it."""
        vnpu_ids = [v.vnpu_id for chip in vnpus.values() for v in chip]
        if self.config.cdi_enabled:
            from npu_plugin.cdi.files import write_static_spec

            try:
                write_static_spec(self.config.cdi_root, self.config.driver_name, self.layout, self.devices, vnpu_ids)
            except CdiError as error:
                log.warning("vNPUs changed but %s", error, extra={"error": str(error)})

    def _dra_plugin(self) -> DraPlugin:
        from npu_plugin.dra.plugin import DraPaths, DraPlugin
        from npu_plugin.dra.shared_devices import shareable

        config = self.config
        for view in self.inventory.snapshot().owned_by(Owner.DRA):
            if self.sharing.shared(view.physical_id) and (reason := shareable(view.device, self.sharing.count)):
                raise ConfigError(f"--share-devices: {reason}; DRA cannot publish its shares")
        assert config.node_name is not None
        paths = DraPaths.of(
            registrar_dir=config.kubelet_registrar_directory_path,
            plugins_dir=config.kubelet_plugins_directory_path,
            driver=config.driver_name,
            pod_uid=config.pod_uid,
            cdi_root=config.cdi_root,
            state_dir=config.dra_state_dir,
        )
        plugin = DraPlugin(
            paths=paths,
            driver=config.driver_name,
            node_name=config.node_name,
            inventory=self.inventory,
            layout=self.layout,
            client=self._client(),
            unhealthy_policy=config.unhealthy_policy,
            health_timeout_seconds=max(30, int(config.health_interval * FRESHNESS_INTERVALS)),
            samples_fresh=lambda: samples_fresh(self.inventory.last_sample, time.monotonic(), config.health_interval),
            observe=self.telemetry.dra_call,
            on_publish=self.telemetry.published,
            on_registered=lambda up: self.telemetry.registered(Mode.DRA, up),
            vnpus=self._vnpu_hands(),
            on_vnpu_dynamic_available=self.telemetry.vnpu_dynamic_available,
            fault_policy=config.fault_policy,
            claim_status=config.claim_status,
            on_claim_status=self.telemetry.claim_status,
            on_foreign_slices=self.telemetry.foreign_slices,
            sharing=self.sharing,
            on_prepared=self._claims_prepared,
            instance=config.pod_uid,
        )
        self.telemetry.count_prepared(lambda: plugin.preparer.prepared_claims)
        if self.sharing.enabled:
            self.telemetry.count_shares(lambda: plugin.preparer.store.peek().shares_held(), self._dra_shares)
        return plugin

    def _client(self) -> KubeApi:
        """The one API client of the daemon (DRA, the DeviceClass check and the pod annotations share
        it); ConfigError without credentials."""
        if self._kube is None:
            from npu_plugin.kubeapi.client import KubeClient, connect

            self._kube = KubeClient(connect(self.config.kubeconfig))
        return self._kube

    def _extended_class_check(self, device_plugin: DevicePlugins) -> ExtendedClassCheck | None:
        """With API credentials, watch the DeviceClasses for one mapping a name the device plugin
        advertises; without (no token mounted, no --kubeconfig), the check is off."""
        if not api_credentials(self.config, os.environ):
            log.info("no Kubernetes credentials: DeviceClasses mapping this node's device-plugin names are not checked")
            return None
        try:
            client = self._client()
        except ConfigError as error:
            if self.config.kubeconfig is not None or self.config.serves_dra:
                raise
            log.warning("DeviceClasses mapping this node's device-plugin names are not checked: %s", error)
            return None
        from npu_plugin.deviceplugin.extended_classes import ExtendedClassCheck

        self.class_check = ExtendedClassCheck(
            client,
            self.config.mode,
            device_plugin.advertised,
            lambda found: self.telemetry.extended_resource_conflicts(
                (c.device_class, c.resource) for c in sorted(found)
            ),
        )
        return self.class_check

    def _recheck_classes(self) -> None:
        if self.class_check is not None:
            self.class_check.recheck()

    def _dra_shares(self) -> dict[int, int]:
        """The shares each DRA-owned shared chip offers."""
        return {
            v.physical_id: self.sharing.count
            for v in self.inventory.snapshot().owned_by(Owner.DRA)
            if self.sharing.shared(v.physical_id)
        }

    def _vnpu_hands(self) -> VnpuOperations | None:
        """What Prepare and Unprepare use for vNPUs: nothing with --vnpu off, so no backend call is
        made."""
        from npu_plugin.dra.vnpus import VnpuOperations

        config = self.config
        if config.vnpu is VnpuMode.OFF or not isinstance(self.backend, VnpuBackend):
            return None
        from npu_plugin.inventory.vnpu_plans import VnpuReader

        reader = VnpuReader(
            self.backend, config.vnpu, config.vnpu_templates, on_read=self.telemetry.vnpus, said=self.vnpu_said
        )
        return VnpuOperations(
            self.backend,
            reader,
            config.dev_root,
            offered=config.vnpu_templates,
            on_operation=self.telemetry.vnpu_operation,
        )

    def _handover(self, dra: DraPlugin | None) -> Handover:
        """Who holds what at start, in every mode: a node switched between modes may still run pods
        holding NPUs through the other API. Device-plugin mode has no claims of its own and asks only
        where the kubelet serves PodResources (not loading the handover otherwise)."""
        from npu_plugin.handover.workflow import Handover

        return Handover(
            inventory=self.inventory,
            pod_resources_socket=self.config.pod_resources_socket,
            resource_name=self.resource_name,
            driver=self.config.driver_name,
            dra_held=dra.preparer.held_devices if dra is not None else set,
            mode=self.config.mode,
            on_handed_over=self.telemetry.handed_over,
        )

    # ---- lifecycle ----

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received %s, shutting down", sig.name)
        self.stop.set()

    def _on_hangup(self) -> None:
        log.info(
            "received SIGHUP; ignored: there is nothing to reload (the inventory file is watched and health "
            "sampled all the time; flags change with a restart)"
        )

    def _task(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.create_task(coroutine, name=name)

    async def _until_stopped(self, tasks: list[asyncio.Task[None]]) -> None:
        stopper = asyncio.create_task(self.stop.wait(), name="stop-signal")
        waiters: list[asyncio.Task[Any]] = [*tasks, stopper]
        # Tasks that end early and cleanly (the handover once settled) are fine; a failure stops
        # everything.
        while not self.stop.is_set():
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            waiters = [t for t in waiters if t not in done]
            if failed := [t for t in done if t is not stopper and not t.cancelled() and t.exception() is not None]:
                self.stop.set()
                await self._drain(tasks, stopper)
                raise failed[0].exception()  # type: ignore[misc]
        await self._drain(tasks, stopper)

    async def _drain(self, tasks: list[asyncio.Task[None]], stopper: asyncio.Task[Any]) -> None:
        # Servers see `stop` and drain; whatever is still running after the grace period is
        # cancelled.
        _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE)
        for task in pending:
            log.warning("task %s did not stop within %.0fs, cancelling it", task.get_name(), SHUTDOWN_GRACE)
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
