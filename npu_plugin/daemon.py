"""The composition root of `serve`: discovery, inventory, health, the enabled servers, shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine
from typing import Any

from npu_plugin import __version__
from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.backends.base import Backend
from npu_plugin.config import Config
from npu_plugin.device import Device, resource_name_for
from npu_plugin.deviceplugin.cdi import write_static_spec
from npu_plugin.deviceplugin.plugin import DevicePlugin
from npu_plugin.deviceplugin.service import DevicePluginService
from npu_plugin.edits import HostLayout, probe_host
from npu_plugin.errors import ConfigError
from npu_plugin.health import HealthMonitor
from npu_plugin.inventory import Inventory, Owner

log = logging.getLogger(__name__)
SHUTDOWN_GRACE = 3.0


def run_daemon(config: Config) -> int:
    backend = open_backend(
        config.backend, fake_inventory=config.fake_inventory, fake_profile=config.fake_profile,
        npu_smi=config.npu_smi, dcmi_library=config.dcmi_library,
    )
    try:
        devices = discover(backend)
        return asyncio.run(Daemon(config, backend, devices).run())
    finally:
        backend.close()


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
        self.config, self.backend = config, backend
        self.devices = devices
        self.resource_name = resolve_resource_name(config, devices) if config.serves_device_plugin else ""
        default_owner = Owner.DRA if config.mode == "dra" else Owner.DEVICE_PLUGIN
        self.inventory = Inventory(
            devices, failure_threshold=config.health_failure_threshold,
            recovery_threshold=config.health_recovery_threshold, owners=default_owner,
        )
        self.layout: HostLayout = probe_host(config.dev_root, config.device_injection, config.mount_driver)
        self.stop = asyncio.Event()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        monitor = HealthMonitor(self.backend, self.inventory, self.config.dev_root, self.config.health_interval)
        monitor.start_watching()
        log.info("npu-plugin %s starting: mode=%s backend=%s devices=%d", __version__, self.config.mode,
                 self.backend.name, len(self.devices))
        tasks = [self._task(monitor.run(), "health-poller")]
        if self.config.serves_device_plugin:
            tasks.append(self._task(self._device_plugin().run(self.stop), "device-plugin"))
        try:
            await self._until_stopped(tasks)
        finally:
            monitor.stop_watching()
        log.info("npu-plugin stopped")
        return 0

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received %s, shutting down", sig.name)
        self.stop.set()

    def _task(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.create_task(coroutine, name=name)

    async def _until_stopped(self, tasks: list[asyncio.Task[None]]) -> None:
        stopper = asyncio.create_task(self.stop.wait(), name="stop-signal")
        waiters: list[asyncio.Task[Any]] = [*tasks, stopper]
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in done if t is not stopper and not t.cancelled() and t.exception() is not None]
        self.stop.set()
        # Servers see `stop` and drain; whatever is still running after the grace period is cancelled.
        _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE)
        for task in pending:
            log.warning("task %s did not stop within %.0fs, cancelling it", task.get_name(), SHUTDOWN_GRACE)
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        for task in failed:
            raise task.exception()  # type: ignore[misc]

    def _device_plugin(self) -> DevicePlugin:
        driver = None
        if self.config.cdi_enabled:
            driver = self.config.driver_name
            path = write_static_spec(self.config.cdi_root, driver, self.layout, self.devices)
            log.info("static CDI spec for the device plugin written to %s", path)

        def make_service() -> DevicePluginService:
            device_type = self.devices[0].device_type
            return DevicePluginService(self.inventory, self.layout, device_type, driver)

        return DevicePlugin(self.config.device_plugin_path, self.resource_name, self.config.pod_uid, make_service)

