"""Every resource the device plugin serves: the whole NPUs, and under `--vnpu static` one resource
per vNPU type present on its chips, each with its own socket, registration and kubelet-restart
handling."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from pathlib import Path

from npu_plugin.aio.tasks import until_closed
from npu_plugin.deviceplugin.lifecycle import DevicePlugin
from npu_plugin.deviceplugin.listing import DeviceListing
from npu_plugin.deviceplugin.service import DevicePluginService

log = logging.getLogger(__name__)
# The service of a resource: None is the whole-NPU resource, otherwise a vNPU resource's name.
ServiceFactory = Callable[[str | None], DevicePluginService]


class DevicePlugins:
    """Runs the whole-NPU plugin and starts a plugin for each vNPU resource the first time one of
    its vNPUs is on the device plugin's chips; once started, a resource stays registered (with an
    empty list when its vNPUs go), as the kubelet keeps a resource's capacity until its plugin
    goes."""

    def __init__(
        self,
        directory: Path,
        resource_name: str,
        pod_uid: str | None,
        *,
        listing: DeviceListing,
        make_service: ServiceFactory,
        on_registered: Callable[[bool], None] = lambda _registered: None,
        on_new_resource: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_new_resource` hears each vNPU resource the first time it is served."""
        self._directory, self._resource_name, self._pod_uid = directory, resource_name, pod_uid
        self._listing, self._make_service, self._on_registered = listing, make_service, on_registered
        self._on_new_resource = on_new_resource
        self.plugins: dict[str, DevicePlugin] = {}

    def advertised(self) -> set[str]:
        """Every resource name served: the whole NPUs' from the start, and each vNPU one once started."""
        return {self._resource_name, *self.plugins}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self._serve_every_resource(stop)
        except ExceptionGroup as failed:
            # One resource failing stops the daemon with its own error, not a group: an OSError
            # stays one line.
            raise failed.exceptions[0] from None

    async def _serve_every_resource(self, stop: asyncio.Event) -> None:
        await self._listing.refresh()
        whole = DevicePlugin(
            self._directory, self._resource_name, self._pod_uid, lambda: self._make_service(None), self._on_registered
        )
        self.plugins[self._resource_name] = whole
        async with asyncio.TaskGroup() as group:
            group.create_task(whole.run(stop), name="device-plugin")
            async with contextlib.aclosing(until_closed(self._listing.watch(), stop)) as listings:
                async for listing in listings:
                    for resource in sorted(listing.resources() - self.plugins.keys()):
                        log.info("vNPUs of %s present: serving the resource", resource, extra={"resource": resource})
                        plugin = DevicePlugin(
                            self._directory, resource, self._pod_uid, functools.partial(self._make_service, resource)
                        )
                        self.plugins[resource] = plugin
                        group.create_task(plugin.run(stop), name=f"device-plugin {resource}")
                        self._on_new_resource()
