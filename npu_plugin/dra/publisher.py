"""Keeps this node's ResourceSlices equal to the inventory: reconciled from the informer's cache,
coalesced writes, back-off with jitter. A resync that finds the cache equal to the inventory sends
no request.

With vNPUs split on demand the layout follows the API server (`partitionable.py`): its version at
start and at each resync, and whether it keeps counters (neither is asked while no chip of ours is
split on demand). A write whose answer lost its counters switches to the layout without counters at
once, so a cluster with DRAPartitionableDevices off sees one rewrite, never a loop of them.

During a rolling update (the dra DaemonSet surges) the old and the new pod both publish the pool, and
where their settings differ each would take the other's write for drift and rewrite it, every burst,
until the old pod is gone. So a publisher that has published once and finds the pool last written by
another instance (`slice_owners.PUBLISHER`) leaves it as it is for PEER_HOLD_SECONDS before writing
again, as the resourceslice controller of k8s.io/dynamic-resource-allocation delays its sync after
an informer event: the new pod's first write goes out at once, the old pod holds until it is
stopped. Slices deleted, or edited by anyone but another instance, are restored at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http import HTTPStatus
from typing import Any, TypeVar

from npu_plugin.aio.backoff import BackoffPolicy, retry_forever
from npu_plugin.aio.tasks import until_closed
from npu_plugin.ascend.device import Device, Health
from npu_plugin.ascend.vnpu import VnpuChips
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.partitionable import PartitionableGate, lost_counters
from npu_plugin.dra.probes import probe_pool
from npu_plugin.dra.sharing_gate import lost_sharing, sharing_gate
from npu_plugin.dra.slice_owners import describe, foreign_slices, publisher_of
from npu_plugin.dra.slices import SliceContent, SliceSettings, slice_object, slice_specs
from npu_plugin.dra.taint_gate import TaintGate, lost_taints
from npu_plugin.dra.taints import FaultPolicy, TaintRules
from npu_plugin.dra.vnpu_slices import Layout, vnpu_slice_contents
from npu_plugin.errors import BackendError, KubeApiError
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.sharing import Sharing
from npu_plugin.inventory.state import Inventory, Snapshot
from npu_plugin.kubeapi.informer import slice_informer
from npu_plugin.kubeapi.protocol import CounterSet, KubeApi, SliceDevice, StoredSlice

log = logging.getLogger(__name__)
T = TypeVar("T")
COALESCE_SECONDS = 0.5
RESYNC_SECONDS = 30.0
PEER_HOLD_SECONDS = 30.0
NO_SHARING = Sharing()
CONFLICT_RETRIES = 5
NODE_BACKOFF = BackoffPolicy(initial=0.1, maximum=5.0)
WRITE_BACKOFF = BackoffPolicy(initial=0.2, maximum=10.0)


def _normal_device(device: SliceDevice) -> dict[str, Any]:
    """The fields we write, as we write them: the API server adds defaults (e.g. taint
    timeAdded)."""
    taints = [{k: t[k] for k in ("key", "value", "effect") if k in t} for t in device.get("taints") or []]
    normal = {
        "name": device["name"],
        "attributes": device["attributes"],
        "capacity": device["capacity"],
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
    }
    consumes = [
        {"counterSet": c["counterSet"], "counters": c["counters"]} for c in device.get("consumesCounters") or []
    ]
    return normal | ({"taints": taints} if taints else {}) | ({"consumesCounters": consumes} if consumes else {})


def _content_key(devices: Sequence[SliceDevice] | None, counter_sets: Sequence[CounterSet] | None) -> str:
    """A slice's content as we compare it: no devices and an empty device list are the same (the
    server omits an empty list), and so are no counter sets and an empty list of them."""
    sets = [{"name": c["name"], "counters": c["counters"]} for c in counter_sets or []]
    return json.dumps({"devices": [_normal_device(d) for d in devices or []], "sharedCounters": sets}, sort_keys=True)


def _written_by_us(stored: StoredSlice, settings: SliceSettings, count: int) -> bool:
    pool = stored["spec"]["pool"]
    owners = [o["uid"] for o in stored["metadata"].get("ownerReferences") or []]
    return (
        pool["name"] == settings.node_name
        and pool["resourceSliceCount"] == count
        and (settings.node_uid is None or owners == [settings.node_uid])
    )


def slices_match(existing: Sequence[StoredSlice], desired: Sequence[SliceContent], settings: SliceSettings) -> bool:
    """True when the stored slices already say what we would write, in any order (so nothing is
    written)."""
    generations = {s["spec"]["pool"]["generation"] for s in existing}
    if len(existing) != len(desired) or len(generations) > 1:
        return False
    stored = sorted(_content_key(s["spec"].get("devices"), s["spec"].get("sharedCounters")) for s in existing)
    return stored == sorted(_content_key(c.devices, c.counter_sets) for c in desired) and all(
        _written_by_us(s, settings, len(desired)) for s in existing
    )


class SlicePublisher:
    """Publishes the DRA-owned devices; never raises on API failure, retries with back-off
    instead."""

    def __init__(
        self,
        api: KubeApi,
        inventory: Inventory,
        *,
        driver: str,
        node_name: str,
        unhealthy_policy: UnhealthyPolicy,
        on_publish: Callable[[str], None] = lambda _result: None,
        vnpu: Callable[[], VnpuChips] | None = None,
        on_dynamic_available: Callable[[bool], None] = lambda _available: None,
        fault_policy: Callable[[], FaultPolicy] = FaultPolicy,
        on_foreign: Callable[[tuple[str, ...]], None] = lambda _names: None,
        sharing: Sharing = NO_SHARING,
        instance: str | None = None,
    ) -> None:
        """`instance` names this publisher in the slices it writes (the pod's UID; a random one when
        None). `sharing` names the shared chips (published with consumable capacity where the API server
        keeps it, `sharing_gate.py`); `vnpu` (None with --vnpu off) reads every chip's vNPU facts
        (blocking) each time slices are built; `on_dynamic_available` hears whether vNPUs on demand
        are published (counters kept, a chip split); `fault_policy` is the --fault-policy in force
        (call `trigger` when it changes); `on_foreign` (on the loop) the names of another
        publisher's slices of our driver on our node whenever they change, () once they are
        gone."""
        self._api, self._inventory = api, inventory
        self._vnpu = vnpu
        self._on_dynamic_available = on_dynamic_available
        self._gate = PartitionableGate(api) if vnpu is not None else None
        self._interruptions_seen = 0  # the informer's interruptions as of the last read of the version
        self._taints = TaintGate(api, unhealthy_policy)
        self._taint_interruptions_seen = 0
        self._sharing = sharing_gate(api) if sharing.enabled else None
        self._sharing_interruptions_seen = 0
        self._fault_policy = fault_policy
        self._settings = SliceSettings(
            driver, node_name, None, unhealthy_policy, sharing=sharing, publisher=instance or uuid.uuid4().hex
        )
        self._settled = False  # a reconcile has made (or found) the pool as this publisher wants it
        self._hold_until: float | None = None  # another instance wrote the pool: no write before then
        self._hold_timer: asyncio.TimerHandle | None = None
        self._on_publish, self._on_foreign = on_publish, on_foreign
        self.foreign: tuple[str, ...] = ()
        self._trigger = asyncio.Event()
        self._generation = 0
        self.informer = slice_informer(api, node=node_name, driver=driver, on_change=self.trigger_from_thread)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.published = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kube")

        async def blocking(call: Callable[[], T]) -> T:
            return await asyncio.get_running_loop().run_in_executor(executor, call)

        stop_watch = threading.Event()
        try:
            node = await retry_forever(
                lambda: blocking(lambda: self._api.get_node(self._settings.node_name)),
                what=f"reading Node {self._settings.node_name}",
                log=log,
                retry_on=(KubeApiError,),
                policy=NODE_BACKOFF,
            )
            uid = node["metadata"].get("uid")
            self._settings = replace(self._settings, node_uid=uid)
            # A daemon thread, not the executor: a blocked watch read must never delay shutdown.
            threading.Thread(target=self.informer.run, args=(stop_watch,), name="slice-watch", daemon=True).start()
            await asyncio.gather(self._follow_inventory(stop), self._reconcile_loop(stop, blocking), self._resync(stop))
        finally:
            stop_watch.set()
            executor.shutdown(wait=False, cancel_futures=True)

    def trigger(self) -> None:
        self._trigger.set()

    def trigger_from_thread(self) -> None:
        """Trigger a reconcile from another thread (the watch, a late vNPU create); after shutdown
        the loop is gone and nothing is due."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.trigger)

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
        return tuple((v.published, v.healthy) for v in snapshot.offered_by(Owner.DRA))

    async def _resync(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), RESYNC_SECONDS)
            except TimeoutError:
                log.debug("resync: comparing the slice cache with the inventory")
                self.trigger()

    async def _reconcile_loop(self, stop: asyncio.Event, blocking: Callable[[Callable[[], bool]], Any]) -> None:
        while not stop.is_set():
            waiter = asyncio.ensure_future(self._trigger.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                return
            self._trigger.clear()
            if not self.informer.synced.is_set():
                continue  # the informer's first LIST triggers again
            # A backend failure reading the chips' vNPUs while the slices are built (a corrupt vNPU
            # state, a driver call refused) is retried like a failed write: one line per step, no
            # traceback, and the slices stay as they were meanwhile.
            wrote = await retry_forever(
                lambda: blocking(self.reconcile),
                what="publishing ResourceSlices",
                log=log,
                retry_on=(KubeApiError, BackendError),
                policy=WRITE_BACKOFF,
            )
            self.published.set()
            self._wake_after_hold()
            if wrote:
                # Coalescing: changes during this pause are written together in the next burst. Only
                # after a write: a reconcile that found nothing to do (our own write coming back
                # through the watch) must not hold up the next real change.
                await asyncio.sleep(COALESCE_SECONDS)

    def reconcile(self) -> bool:
        """Make the slices say what the inventory says, from the informer's cache (blocking); True
        when it wrote."""
        try:
            wrote = self._write_until_no_conflict()
        except KubeApiError:
            self._on_publish("error")
            raise
        self._settled = self._settled or self._hold_until is None
        return wrote

    def _wake_after_hold(self) -> None:
        """A reconcile when the hold ends (one timer, however many reconciles the hold saw)."""
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if self._hold_until is not None:
            delay = max(0.0, self._hold_until - time.monotonic())
            self._hold_timer = asyncio.get_running_loop().call_later(delay, self.trigger)

    def _holding(self, existing: Sequence[StoredSlice]) -> bool:
        """Whether to leave the pool as another instance of npu-plugin last wrote it: once this one
        has published, for PEER_HOLD_SECONDS after it first saw that instance's write."""
        newest = max((s["spec"]["pool"]["generation"] for s in existing), default=None)
        current = [s for s in existing if s["spec"]["pool"]["generation"] == newest]
        writers = {publisher_of(s) for s in current}
        # Two first writes that crossed leave more slices than the pool counts, which a scheduler
        # takes as an incomplete pool (no device of the node allocatable): never held, repaired now.
        complete = {s["spec"]["pool"]["resourceSliceCount"] for s in current} == {len(current)}
        # A slice of ours that names no writer is an older npu-plugin's, the old pod when this update
        # is the one that brings the annotation.
        peers = sorted(w or "a release without the publisher annotation" for w in writers - {self._settings.publisher})
        if not peers or not self._settled or not complete:
            self._hold_until = None
            return False
        now = time.monotonic()
        if self._hold_until is None:
            self._hold_until = now + PEER_HOLD_SECONDS
            log.info(
                "another npu-plugin instance (%s) rewrote the ResourceSlices of node %s (a rolling update): "
                "leaving them as they are for %.0fs before writing again",
                ", ".join(peers),
                self._settings.node_name,
                PEER_HOLD_SECONDS,
            )
        if now < self._hold_until:
            return True
        self._hold_until = None
        return False

    def _write_until_no_conflict(self) -> bool:
        """A conflict only means the cache was behind: look again at once (the watch may have caught
        up), like client-go's RetryOnConflict; other errors (and a conflict storm) go to the
        caller's back-off. True when something was written."""
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                return self._write_slices()
            except KubeApiError as error:
                if error.status != HTTPStatus.CONFLICT or attempt == CONFLICT_RETRIES:
                    raise
                log.info("ResourceSlice update conflicted, reading again: %s", error)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _resolved(self, devices: Sequence[tuple[Device, bool]]) -> SliceSettings:
        """The settings to write with: the policy and taint rules in force. What the API server does
        with taints is asked only once a device needs one (and again after the server restarted)."""
        settings = replace(self._settings, share_capacity=self._share_capacity(devices))
        if settings.unhealthy_policy is UnhealthyPolicy.REMOVE:
            return settings
        needed = any(not healthy or d.health is not Health.OK or d.faults for d, healthy in devices)
        if needed and (not self._taints.known or self.informer.interruptions != self._taint_interruptions_seen):
            self._taint_interruptions_seen = self.informer.interruptions
            self._taints.refresh(settings)
        rules = self._taints.rules(TaintRules(fault_policy=self._fault_policy()))
        return replace(settings, unhealthy_policy=self._taints.policy, taint_rules=rules)

    def _share_capacity(self, devices: Sequence[tuple[Device, bool]]) -> bool:
        """Whether shared chips go out with consumable capacity: asked once one of ours is shared,
        and again after the API server restarted; False until it has said yes."""
        gate = self._sharing
        if gate is None or not any(self._settings.sharing.shared(d.physical_id) for d, _healthy in devices):
            return False
        if gate.kept is None or self.informer.interruptions != self._sharing_interruptions_seen:
            self._sharing_interruptions_seen = self.informer.interruptions
            gate.refresh(self._settings)
        return bool(gate.kept)

    def _desired(self, settings: SliceSettings, devices: Sequence[tuple[Device, bool]]) -> list[SliceContent]:
        if self._vnpu is None or self._gate is None:
            return [SliceContent(chunk) for chunk in slice_specs(settings, devices)]
        chips = self._vnpu()
        # The version and the gate only choose how counters are laid out: while no chip of ours is
        # split on demand, every layout gives the same slices, and neither is asked (the first chip
        # that is, asks at once).
        split = any(device.physical_id in chips.dynamic for device, _healthy in devices)
        if split and (self._gate.due() or self.informer.interruptions != self._interruptions_seen):
            self._interruptions_seen = self.informer.interruptions
            self._gate.refresh(settings)
        layout = self._gate.layout
        self._on_dynamic_available(layout is not Layout.FALLBACK and split)
        return vnpu_slice_contents(settings, devices, chips, layout)

    def _refused(self, existing: Sequence[StoredSlice]) -> bool:
        """Whether another publisher's slices of our driver are on our node: then nothing is written
        (not even a probe) until they are gone, rather than fight over the pool."""
        foreign = foreign_slices(existing)
        names = tuple(s["metadata"]["name"] for s in foreign)
        if names == self.foreign:
            return bool(names)
        driver, node = self._settings.driver, self._settings.node_name
        if names:
            log.error(
                "another publisher's ResourceSlices of driver %s are on node %s: %s; npu-plugin publishes "
                "nothing while they exist rather than fight over the pool: run one driver of that name per "
                "node, or give one of them another name (--driver-name, with DeviceClasses and claims naming "
                "it too)",
                driver,
                node,
                describe(foreign),
                extra={"slices": list(names)},
            )
        else:
            log.info("the other publisher's ResourceSlices of driver %s on node %s are gone: publishing", driver, node)
        self.foreign = names
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._on_foreign, names)
        return bool(names)

    def _write_slices(self) -> bool:
        # A probe slice stored by an API server without dry run lives a moment; it is the gate's,
        # never reused.
        existing = [s for s in self.informer.snapshot() if s["spec"]["pool"]["name"] != probe_pool(self._settings)]
        if self._refused(existing):
            return False
        snapshot = self._inventory.snapshot()
        devices = [(v.published, v.healthy) for v in snapshot.offered_by(Owner.DRA)]
        settings = self._resolved(devices)
        desired = self._desired(settings, devices)
        if slices_match(existing, desired, settings):
            self._hold_until = None
            return False
        if self._holding(existing):
            return False
        stored = [s["spec"]["pool"]["generation"] for s in existing]
        generation = max([self._generation, *stored]) + 1
        bodies = [slice_object(settings, c.devices, generation, len(desired), c.counter_sets) for c in desired]
        for index, body in enumerate(bodies):
            if index < len(existing):
                meta = existing[index]["metadata"]
                name = meta["name"]
                body["metadata"] |= {"name": name, "resourceVersion": meta["resourceVersion"]}
                body["metadata"].pop("generateName")
                answer = self._api.replace_slice(name, body)
            else:
                answer = self._api.create_slice(body)
                name = answer["metadata"]["name"]
            self.informer.record(answer, name)
            counters_lost = self._gate is not None and lost_counters(body, answer)
            sharing_lost = self._sharing is not None and lost_sharing(body, answer)
            if counters_lost or sharing_lost or lost_taints(body, answer):
                # The rest is written without what was dropped, at once (the caller's next burst).
                if self._gate is not None and counters_lost:
                    self._gate.stripped()
                if self._sharing is not None and sharing_lost:
                    self._sharing.stripped()
                if not counters_lost and not sharing_lost:
                    self._taints.stripped()
                self._generation = generation
                self.trigger_from_thread()
                return True
        for extra in existing[len(bodies) :]:
            name = extra["metadata"]["name"]
            self._api.delete_slice(name)
            self.informer.record(None, name)
        self._generation = generation
        self._on_publish("success")
        log.info(
            "published %d ResourceSlice(s) at pool generation %d with %d device(s)",
            len(bodies),
            generation,
            sum(len(b["spec"].get("devices") or []) for b in bodies),
        )
        return True
