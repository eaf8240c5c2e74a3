"""`--volcano`: Allocate serves the devices Volcano's Ascend plugin chose, as MindCluster's
`-volcanoType` does.

Volcano writes its choice on the pod before binding it: `huawei.com/Ascend910: Ascend910-5,Ascend910-6`
and `predicate-time: <its clock>`. The kubelet's Allocate names only ids of its own, so the pod is
found by MindCluster's rule: among the pods bound to this node, not finished, whose annotation names
as many devices as the kubelet asked for and whose predicate-time is set and not yet used, the
oldest predicate-time. Its devices are served; the pod is marked used (in memory at once, on the pod
with `predicate-time` = max uint64, as MindCluster marks it) and gets the three annotations.

The kubelet's ids then stand for other devices, so ListAndWatch reports under each id the health of
the device it stands for (`token_map`), and a restarted daemon rebuilds that map from the
`huawei.com/kltDev` / `huawei.com/AscendReal` annotations of the pods on the node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.device import parse_dp_id
from npu_plugin.deviceplugin.listing import DeviceListing, Listing
from npu_plugin.deviceplugin.service import DevicePluginService, Grant, check_allocatable, list_entry
from npu_plugin.errors import AllocationError, KubeApiError, quoted
from npu_plugin.inventory.ownership import Owner
from npu_plugin.kubeapi.protocol import KubeApi, Pod
from npu_plugin.podannotations.mindcluster import ASCEND_REAL, KLT_DEV, PREDICATE_TIME, PodRef

log = logging.getLogger(__name__)
# success: a pod matched; tie: it matched together with another pod of the same predicate-time
# (the first by creation time, then name, was served); no-pod: none matched; refused: its
# annotation names a device this node lacks or cannot serve; error: the pods could not be listed.
Result = Literal["success", "tie", "no-pod", "refused", "error"]
FINISHED = ("Succeeded", "Failed")
_UINT64_MAX = 2**64 - 1
# Volcano's annotation can reach the API a moment after the kubelet admits the pod: one more look.
LIST_ATTEMPTS, LIST_PAUSE = 2, 0.5


@dataclass(frozen=True, slots=True)
class Candidate:
    pod: PodRef
    predicate_time: int
    devices: tuple[str, ...]  # as Volcano wrote them: Ascend910-5
    created: str


def predicate_time(pod: Pod) -> int | None:
    """The pod's predicate-time, None when absent, not a uint64, or already used (pure)."""
    text = pod["metadata"].get("annotations", {}).get(PREDICATE_TIME, "")
    if not text.isdigit() or len(text) > 20:
        return None
    value = int(text)
    return value if value < _UINT64_MAX else None


def candidates(pods: Iterable[Pod], resource_name: str, count: int, used: Iterable[str]) -> list[Candidate]:
    """The pods an Allocate of `count` devices may be for (pure): not finished, not deleted, not
    `used` (by UID), with an unused predicate-time and `count` devices in Volcano's annotation."""
    taken = set(used)
    found = []
    for pod in pods:
        meta = pod["metadata"]
        named = meta.get("annotations", {}).get(resource_name, "")
        devices = tuple(d.strip() for d in named.split(",") if d.strip())
        time = predicate_time(pod)
        if (
            time is None
            or len(devices) != count
            or meta["uid"] in taken
            or pod.get("status", {}).get("phase") in FINISHED
            or "deletionTimestamp" in meta
        ):
            continue
        ref = PodRef(meta["namespace"], meta["name"], meta["uid"])
        found.append(Candidate(ref, time, devices, str(meta.get("creationTimestamp", ""))))
    return found


def choose(found: Sequence[Candidate]) -> tuple[Candidate | None, list[Candidate]]:
    """The oldest predicate-time (ties: created first, then namespace/name), and the other pods
    sharing that time (pure)."""
    if not found:
        return None, []
    ordered = sorted(found, key=lambda c: (c.predicate_time, c.created, c.pod.namespace, c.pod.name))
    first = ordered[0]
    return first, [c for c in ordered[1:] if c.predicate_time == first.predicate_time]


def token_map(tokens: Sequence[str], allocated: Mapping[str, int], devices: Sequence[int]) -> dict[str, int]:
    """Which device each kubelet id stands for (pure): the ids of Allocates as served, every other
    id paired in order with the devices no allocation holds."""
    mapped = {t: d for t, d in allocated.items() if t in tokens and d in devices}
    free_devices = [d for d in sorted(devices) if d not in mapped.values()]
    free_tokens = [t for t in tokens if t not in mapped]
    mapped.update(zip(free_tokens, free_devices, strict=False))
    return mapped


def remembered(pods: Iterable[Pod], prefix: str) -> dict[str, int]:
    """kubelet id → device from the annotations of pods still running here (pure); a pod whose
    two lists do not pair up is left out."""
    allocated: dict[str, int] = {}
    for pod in pods:
        annotations = pod["metadata"].get("annotations", {})
        if pod.get("status", {}).get("phase") in FINISHED:
            continue
        tokens = [t for t in annotations.get(KLT_DEV, "").split(",") if t]
        real = [parse_dp_id(r) for r in annotations.get(ASCEND_REAL, "").split(",") if r]
        if tokens and len(tokens) == len(real) and all(r is not None and r[0] == prefix for r in real):
            allocated.update((t, r[1]) for t, r in zip(tokens, real, strict=True) if r is not None)
    return allocated


class VolcanoChoice:
    """The kubelet-id → device map and the pods served, shared by every service the daemon makes
    (a kubelet restart makes a new one)."""

    def __init__(
        self,
        api: KubeApi,
        node_name: str,
        resource_name: str,
        prefix: str,
        *,
        on_result: Callable[[Result], None] = lambda _result: None,
        list_pause: float = LIST_PAUSE,
    ) -> None:
        self._api, self._node, self._resource, self._prefix = api, node_name, resource_name, prefix
        self._on_result, self._pause = on_result, list_pause
        self.allocated: dict[str, int] = {}
        self._used: set[str] = set()
        self._lock = asyncio.Lock()
        self.changed: Callable[[], None] = lambda: None

    async def load(self) -> None:
        """Rebuild the map from the pods' annotations (at start); an unreadable API leaves it
        empty."""
        try:
            pods = await asyncio.to_thread(self._api.list_pods, self._node)
        except KubeApiError as error:
            log.warning("--volcano: cannot read the pods of this node to restore the id map: %s", error)
            return
        self.allocated = remembered(pods, self._prefix)
        self._used = {p["metadata"]["uid"] for p in pods if predicate_time(p) is None}

    async def choose(self, listing: Listing, kubelet_ids: Sequence[str]) -> Grant:
        """The devices Volcano chose for the pod this Allocate is for; AllocationError otherwise.
        One at a time: two Allocates never take the same pod."""
        async with self._lock:
            chosen, tied = await self._find(len(kubelet_ids))
            try:
                grant = self._grant(listing, chosen, tied)
            except AllocationError:
                self._on_result("refused")
                raise
            self._used.add(chosen.pod.uid)
            for token in kubelet_ids:
                self.allocated.pop(token, None)
            for token, device in list(self.allocated.items()):
                if device in grant.physical_ids:
                    del self.allocated[token]
            self.allocated.update(zip(kubelet_ids, grant.physical_ids, strict=True))
            self._on_result("tie" if tied else "success")
        self.changed()
        return grant

    async def _find(self, count: int) -> tuple[Candidate, list[Candidate]]:
        for attempt in range(LIST_ATTEMPTS):
            try:
                pods = await asyncio.to_thread(self._api.list_pods, self._node)
            except KubeApiError as error:
                self._on_result("error")
                raise AllocationError(f"--volcano: cannot list the pods of node {self._node}: {error}") from None
            chosen, tied = choose(candidates(pods, self._resource, count, self._used))
            if chosen is not None:
                return chosen, tied
            if attempt + 1 < LIST_ATTEMPTS:
                await asyncio.sleep(self._pause)
        self._on_result("no-pod")
        raise AllocationError(
            f"--volcano: no pod on node {self._node} waits for {count} device(s): none has a {self._resource} "
            f"annotation with {count} device(s) and an unused {PREDICATE_TIME} (was it scheduled by Volcano?)"
        )

    def _grant(self, listing: Listing, chosen: Candidate, tied: Sequence[Candidate]) -> Grant:
        physical: list[int] = []
        for name in chosen.devices:
            parsed = parse_dp_id(name)
            view = listing.snapshot.get(parsed[1]) if parsed and parsed[0] == self._prefix else None
            where = f"Volcano's annotation on pod {chosen.pod.label} names {quoted(name)}"
            if view is None:
                raise AllocationError(f"{where}, which this node does not have")
            if listing.split(view.physical_id):
                raise AllocationError(f"{where}, which is split into vNPUs")
            try:
                check_allocatable(name, view)
            except AllocationError as error:
                raise AllocationError(f"{where}: {error}") from None
            physical.append(view.physical_id)
        if tied:
            log.warning(
                "--volcano: pods %s share predicate-time %d with %s; serving %s (created first) and the others at "
                "their own Allocates",
                ", ".join(c.pod.label for c in tied),
                chosen.predicate_time,
                chosen.pod.label,
                chosen.pod.label,
            )
        log.info("--volcano: serving %s to pod %s", ",".join(chosen.devices), chosen.pod.label)
        ids = tuple(physical)
        return Grant(tuple(sorted(ids)), ids, chosen.pod)

    def list_response(self, listing: Listing) -> pb.ListAndWatchResponse:
        """Each kubelet id with the health of the device it stands for."""
        views = listing.whole(Owner.DEVICE_PLUGIN)
        by_id = {v.physical_id: v for v in views}
        tokens = [v.device.dp_id for v in views]
        mapped = token_map(tokens, self.allocated, list(by_id))
        return pb.ListAndWatchResponse(devices=[list_entry(t, by_id[mapped[t]]) for t in tokens if t in mapped])


class VolcanoDevicePluginService(DevicePluginService):
    """The device plugin whose Allocate serves Volcano's choice."""

    def __init__(self, listing: DeviceListing, *args: Any, choice: VolcanoChoice, **kwargs: Any) -> None:
        super().__init__(listing, *args, **kwargs)
        self._choice = choice

    def _list(self, listing: Listing) -> pb.ListAndWatchResponse:
        return self._choice.list_response(listing)

    async def _choose(self, listing: Listing, device_ids: Sequence[str]) -> Grant:
        return await self._choice.choose(listing, device_ids)
