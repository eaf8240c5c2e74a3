"""DRA kubelet plugin lifecycle: sockets, registration, slice publishing, orderly shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc

from npu_plugin._proto import pluginregistration_v1_pb2_grpc as reg_grpc
from npu_plugin.aio.tasks import supervised
from npu_plugin.ascend.container_edits import HostLayout
from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import VnpuChips
from npu_plugin.cdi.files import CDI_DIR_MODE
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.checkpoint import CheckpointStore
from npu_plugin.dra.claim_status import ClaimStatusReporter
from npu_plugin.dra.fault_policy_file import FaultPolicyFile
from npu_plugin.dra.prepare_results import ClaimRef, PrepareResult
from npu_plugin.dra.preparer import Preparer
from npu_plugin.dra.publisher import SlicePublisher
from npu_plugin.dra.service import HealthFeed, Registration, dra_services
from npu_plugin.dra.vnpus import VnpuOperations
from npu_plugin.host.atomic import make_directories
from npu_plugin.host.boot import read_boot_id
from npu_plugin.host.dirwait import wait_for_directory, wait_until_gone
from npu_plugin.host.sockets import prepare_socket_dir, start_unix_server, stop_unix_server
from npu_plugin.inventory.sharing import Sharing
from npu_plugin.inventory.state import Inventory
from npu_plugin.inventory.vnpu_plans import served_chips
from npu_plugin.kubeapi.protocol import KubeApi

log = logging.getLogger(__name__)
NO_SHARING = Sharing()


@dataclass(frozen=True, slots=True)
class DraPaths:
    registration_socket: Path
    dra_socket: Path
    cdi_root: Path
    state_dir: Path

    @classmethod
    def of(
        cls,
        *,
        registrar_dir: Path,
        plugins_dir: Path,
        driver: str,
        pod_uid: str | None,
        cdi_root: Path,
        state_dir: Path,
    ) -> DraPaths:
        suffix = f"-{pod_uid}" if pod_uid else ""
        return cls(
            registration_socket=registrar_dir / f"{driver}{suffix}-reg.sock",
            dra_socket=(plugins_dir / driver / f"dra{suffix}.sock").absolute(),
            cdi_root=cdi_root,
            state_dir=state_dir,
        )


class DraPlugin:
    """Serves the DRA socket and the registration socket and publishes slices while `run` runs.

    Slices stay in place on shutdown so an upgrade does not withdraw the node's devices.
    """

    def __init__(
        self,
        *,
        paths: DraPaths,
        driver: str,
        node_name: str,
        inventory: Inventory,
        layout: HostLayout,
        client: KubeApi,
        unhealthy_policy: UnhealthyPolicy,
        health_timeout_seconds: int,
        samples_fresh: Callable[[], bool] = lambda: True,
        observe: Callable[[str, float], None] = lambda _kind, _seconds: None,
        on_publish: Callable[[str], None] = lambda _result: None,
        on_registered: Callable[[bool], None] = lambda _registered: None,
        vnpus: VnpuOperations | None = None,
        on_vnpu_dynamic_available: Callable[[bool], None] = lambda _available: None,
        fault_policy: Path | None = None,
        claim_status: bool = False,
        on_claim_status: Callable[[str], None] = lambda _result: None,
        on_foreign_slices: Callable[[tuple[str, ...]], None] = lambda _names: None,
        sharing: Sharing = NO_SHARING,
        on_prepared: Callable[[Sequence[tuple[ClaimRef, PrepareResult]]], None] = lambda _prepared: None,
        instance: str | None = None,
    ) -> None:
        """`fault_policy` is read here (ConfigError when it is bad) and followed while `run` runs;
        `claim_status` writes prepared claims' device status (`on_claim_status` hears each
        result); `instance` (the pod's UID) names this daemon in the slices it writes."""
        self.paths, self.driver, self.node_name = paths, driver, node_name
        self.claim_status = (
            ClaimStatusReporter(client, driver, on_result=on_claim_status, device_of=self._device_of)
            if claim_status
            else None
        )
        self._inventory, self._client = inventory, client
        self._on_registered = on_registered
        self._closing = asyncio.Event()
        self.registered = False
        self.publisher = SlicePublisher(
            client,
            inventory,
            driver=driver,
            node_name=node_name,
            unhealthy_policy=unhealthy_policy,
            on_publish=on_publish,
            vnpu=None if vnpus is None else partial(self._vnpu_chips, vnpus),
            on_dynamic_available=on_vnpu_dynamic_available,
            fault_policy=lambda: self.faults.policy,
            on_foreign=on_foreign_slices,
            sharing=sharing,
            instance=instance,
        )
        self.sharing = sharing
        self.faults = FaultPolicyFile(fault_policy, on_change=self.publisher.trigger)
        store = CheckpointStore(paths.state_dir, read_boot_id())
        self.preparer = Preparer(
            driver=driver,
            pool=node_name,
            cdi_root=paths.cdi_root,
            state_dir=paths.state_dir,
            layout=layout,
            store=store,
            snapshot=inventory.snapshot,
            fetch_claim=client.get_claim,
            vnpus=vnpus,
            on_vnpus_changed=self.publisher.trigger_from_thread,
            shared=sharing.shared,
            plugin_dir=paths.dra_socket.parent,
        )
        self.observe, self._vnpus = observe, vnpus
        health = HealthFeed(inventory, node_name, health_timeout_seconds, samples_fresh, self._closing)
        self._services = dra_services(self.preparer, self._observe_call, health, self.claim_status, on_prepared)

    def _device_of(self, physical_id: int) -> Device | None:
        view = self._inventory.snapshot().get(physical_id)
        return view.device if view is not None else None

    def _vnpu_chips(self, vnpus: VnpuOperations) -> VnpuChips:
        """What the slices need of the chips' vNPUs, read now. Every chip is read, not only the
        DRA-owned ones (whether a 310P is a Duo depends on its card mates), and the vNPUs the
        checkpoint records as ours keep their chip split on demand; any other vNPU is foreign."""
        devices = [view.device for view in self._inventory.snapshot().devices]
        return served_chips(vnpus.plans(devices, self.preparer.own_vnpu_ids()), vnpus.offered, self.sharing.shared)

    def _observe_call(self, kind: str, seconds: float) -> None:
        self.observe(kind, seconds)
        if self._vnpus is not None and kind in ("prepare", "unprepare"):
            # A vNPU made or destroyed changes the slices: in the layout without counters a chip
            # running one is left out, and offered again once it is gone; no backend tells us, so
            # look now.
            self.publisher.trigger()

    def _set_registered(self, registered: bool, _error: str) -> None:
        self.registered = registered
        self._on_registered(registered)

    def _prepare_dirs(self) -> None:
        for directory in (self.paths.dra_socket.parent, self.paths.state_dir):
            prepare_socket_dir(directory)
        make_directories(self.paths.cdi_root, CDI_DIR_MODE)

    async def run(self, stop: asyncio.Event) -> None:
        # The registrar and plugins directories are the kubelet's: wait for them rather than make
        # them.
        kubelet_dirs = (self.paths.registration_socket.parent, self.paths.dra_socket.parent.parent)
        for directory in kubelet_dirs:
            if not await wait_for_directory(directory, stop, "the kubelet"):
                return
        await asyncio.to_thread(self._prepare_dirs)
        await asyncio.to_thread(self.preparer.collect_garbage)
        dra_server = await start_unix_server(self.paths.dra_socket, self._add_dra_services)
        log.info("DRA plugin serving on %s", self.paths.dra_socket)
        try:
            reg_server = await self._start_registration()
        except BaseException:
            # Stopped here, the DRA server would otherwise outlive the loop and print a traceback at
            # exit.
            await stop_unix_server(dra_server, self.paths.dra_socket, grace=0)
            raise
        publisher = asyncio.create_task(
            supervised(lambda: self.publisher.run(stop), what="the ResourceSlice publisher", log=log),
            name="slice-publisher",
        )
        self.faults.start_watching()
        try:
            reg_server = await self._keep_registration_socket(stop, reg_server)
        finally:
            self._closing.set()
            self.faults.stop_watching()
            if self.claim_status is not None:
                self.claim_status.close()
            await stop_unix_server(reg_server, self.paths.registration_socket, grace=0.5)
            await stop_unix_server(dra_server, self.paths.dra_socket, grace=1.0)
            publisher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await publisher

    def _add_dra_services(self, server: grpc.aio.Server) -> None:
        for _name, add in self._services:
            add(server)

    async def _start_registration(self) -> grpc.aio.Server:
        services = [name for name, _add in self._services]
        registration = Registration(self.driver, str(self.paths.dra_socket), services, self._set_registered)
        server = await start_unix_server(
            self.paths.registration_socket, lambda s: reg_grpc.add_RegistrationServicer_to_server(registration, s)
        )
        log.info("registration socket %s ready for the kubelet", self.paths.registration_socket)
        return server

    async def _keep_registration_socket(self, stop: asyncio.Event, server: grpc.aio.Server) -> grpc.aio.Server:
        """Re-create the registration socket whenever it is removed, so the kubelet finds us again;
        if the registrar directory went with it (a kubelet reinstall), once the directory is back.
        Watched, not polled."""
        socket = self.paths.registration_socket
        while await wait_until_gone(socket, stop):
            log.warning("registration socket %s vanished; re-creating it", socket)
            self._set_registered(False, "")
            await server.stop(0)
            if not await wait_for_directory(socket.parent, stop, "the kubelet"):
                break
            server = await self._start_registration()
        return server
