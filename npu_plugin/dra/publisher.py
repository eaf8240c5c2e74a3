"""Keeps this node's ResourceSlices equal to the inventory: coalesced writes, watch, back-off."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any, TypeVar

from npu_plugin.backoff import retry_forever
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.slices import SliceSettings, build_slices, slice_specs
from npu_plugin.errors import KubeApiError
from npu_plugin.inventory import Inventory, Snapshot
from npu_plugin.kube import KubeClient
from npu_plugin.ownership import Owner
from npu_plugin.tasks import until_closed

log = logging.getLogger(__name__)
T = TypeVar("T")
COALESCE_SECONDS = 0.5
RESYNC_SECONDS = 30.0
WATCH_SECONDS = 60
CONFLICT_RETRIES = 5


def _normal_device(device: dict[str, Any]) -> dict[str, Any]:
    """The fields we write, as we write them: the API server adds defaults (e.g. taint timeAdded)."""
    taints = [{k: t[k] for k in ("key", "value", "effect") if k in t} for t in device.get("taints") or []]
    normal = {
        "name": device.get("name"),
        "attributes": device.get("attributes") or {},
        "capacity": device.get("capacity") or {},
    }
    return normal | ({"taints": taints} if taints else {})


def _devices_key(devices: list[dict[str, Any]]) -> str:
    return json.dumps([_normal_device(d) for d in devices], sort_keys=True)


def _written_by_us(stored: dict[str, Any], settings: SliceSettings, count: int) -> bool:
    pool = stored.get("spec", {}).get("pool", {})
    owners = [o.get("uid") for o in stored.get("metadata", {}).get("ownerReferences") or []]
    return (
        pool.get("name") == settings.node_name
        and pool.get("resourceSliceCount") == count
        and (settings.node_uid is None or owners == [settings.node_uid])
    )


def slices_match(existing: list[dict[str, Any]], desired: list[list[dict[str, Any]]], settings: SliceSettings) -> bool:
    """True when the stored slices already say what we would write, in any order (so nothing is written)."""
    generations = {s.get("spec", {}).get("pool", {}).get("generation") for s in existing}
    if len(existing) != len(desired) or len(generations) > 1:
        return False
    stored = sorted(_devices_key(s.get("spec", {}).get("devices") or []) for s in existing)
    return stored == sorted(_devices_key(d) for d in desired) and all(
        _written_by_us(s, settings, len(desired)) for s in existing
    )


class SlicePublisher:
    """Publishes the DRA-owned devices; never raises on API failure, retries with back-off instead."""

    def __init__(
        self,
        client: KubeClient,
        inventory: Inventory,
        *,
        driver: str,
        node_name: str,
        unhealthy_policy: UnhealthyPolicy,
        on_publish: Callable[[str], None] = lambda _result: None,
    ) -> None:
        self._client, self._inventory = client, inventory
        self._settings = SliceSettings(driver, node_name, None, unhealthy_policy)
        self._on_publish = on_publish
        self._trigger = asyncio.Event()
        self._generation = 0
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kube")
        self.published = asyncio.Event()

    async def _blocking(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            node = await retry_forever(
                lambda: self._blocking(lambda: self._client.get_node(self._settings.node_name)),
                what=f"reading Node {self._settings.node_name}",
                log=log,
                retry_on=(KubeApiError,),
            )
            uid = node.get("metadata", {}).get("uid")
            self._settings = SliceSettings(
                self._settings.driver, self._settings.node_name, uid, self._settings.unhealthy_policy
            )
            self._start_watch_thread(stop)
            await asyncio.gather(self._follow_inventory(stop), self._reconcile_loop(stop), self._resync(stop))
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def trigger(self) -> None:
        self._trigger.set()

    async def _follow_inventory(self, stop: asyncio.Event) -> None:
        last: tuple[Any, ...] | None = None
        async with contextlib.aclosing(until_closed(self._inventory.watch(), stop)) as snapshots:
            async for snapshot in snapshots:
                current = self._published_view(snapshot)
                if current != last:
                    last = current
                    self.trigger()

    @staticmethod
    def _published_view(snapshot: Snapshot) -> tuple[Any, ...]:
        return tuple((v.device, v.healthy) for v in snapshot.offered_by(Owner.DRA))

    async def _resync(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), RESYNC_SECONDS)
            except TimeoutError:
                self.trigger()

    async def _reconcile_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            waiter = asyncio.ensure_future(self._trigger.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                return
            self._trigger.clear()
            wrote = await retry_forever(
                lambda: self._blocking(self._reconcile_once),
                what="publishing ResourceSlices",
                log=log,
                retry_on=(KubeApiError,),
                initial=0.2,
                maximum=10.0,
            )
            self.published.set()
            if wrote:
                # Coalescing: changes during this pause are written together in the next burst. Only after a
                # write: a reconcile that found nothing to do (our own write coming back through the watch)
                # must not hold up the next real change.
                await asyncio.sleep(COALESCE_SECONDS)

    def _reconcile_once(self) -> bool:
        try:
            return self._write_until_no_conflict()
        except KubeApiError:
            self._on_publish("error")
            raise

    def _write_until_no_conflict(self) -> bool:
        """A conflict only means our read was stale: read again at once, like client-go's RetryOnConflict;
        other errors (and a conflict storm) go to the caller's back-off. True when something was written."""
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                return self._write_slices()
            except KubeApiError as error:
                if error.status != HTTPStatus.CONFLICT or attempt == CONFLICT_RETRIES:
                    raise
                log.info("ResourceSlice update conflicted, reading again: %s", error)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _write_slices(self) -> bool:
        snapshot = self._inventory.snapshot()
        devices = [(v.device, v.healthy) for v in snapshot.offered_by(Owner.DRA)]
        desired = slice_specs(self._settings, devices)
        existing = sorted(
            self._client.list_slices(self._settings.node_name, self._settings.driver).get("items") or [],
            key=lambda s: s["metadata"]["name"],
        )
        if slices_match(existing, desired, self._settings):
            return False
        stored = [s["spec"]["pool"].get("generation") or 0 for s in existing]
        generation = max([self._generation, *stored]) + 1
        bodies = build_slices(self._settings, devices, generation)
        for index, body in enumerate(bodies):
            if index < len(existing):
                meta = existing[index]["metadata"]
                body["metadata"] |= {"name": meta["name"], "resourceVersion": meta["resourceVersion"]}
                body["metadata"].pop("generateName")
                self._client.replace_slice(meta["name"], body)
            else:
                self._client.create_slice(body)
        for extra in existing[len(bodies) :]:
            self._client.delete_slice(extra["metadata"]["name"])
        self._generation = generation
        self._on_publish("success")
        log.info(
            "published %d ResourceSlice(s) at pool generation %d with %d device(s)",
            len(bodies),
            generation,
            sum(len(b["spec"]["devices"]) for b in bodies),
        )
        return True

    def _start_watch_thread(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        # A daemon thread, not the executor: a blocked watch read must never delay shutdown.
        thread = threading.Thread(target=self._watch, args=(loop, stop), name="slice-watch", daemon=True)
        thread.start()

    def _watch(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """Someone else (the kubelet, an admin) deleting or editing our slices triggers a reconcile."""
        delay = 0.2
        while not stop.is_set():
            try:
                listing = self._client.list_slices(self._settings.node_name, self._settings.driver)
                version = str(listing.get("metadata", {}).get("resourceVersion", ""))
                self._trigger_from(loop)  # whatever happened while we were not watching
                for kind, _obj in self._client.watch_slices(
                    self._settings.node_name, self._settings.driver, version, WATCH_SECONDS
                ):
                    if stop.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._trigger_from(loop)
                    elif kind == "ERROR":
                        break
                delay = 0.2
            except KubeApiError as error:
                log.warning("watching ResourceSlices failed, retrying in %.1fs: %s", delay, error)
                threading.Event().wait(delay)
                delay = min(delay * 2, 10.0)

    def _trigger_from(self, loop: asyncio.AbstractEventLoop) -> None:
        """Trigger a reconcile from the watch thread; after shutdown the loop is gone and nothing is due."""
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self.trigger)
