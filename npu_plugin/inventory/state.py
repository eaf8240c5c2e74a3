"""The one device inventory both serving modes share: devices, health with hysteresis, ownership."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from npu_plugin.ascend.device import Device, Health, LinkState, device_key
from npu_plugin.inventory.ownership import Owner

log = logging.getLogger(__name__)
# Samples older than this many health intervals are stale: the poller is stuck (a hung driver call).
FRESHNESS_INTERVALS = 3
DEFAULT_LINK_DOWN_TIMEOUT = 30.0


class Reason(StrEnum):
    """Why a device is unhealthy: its backend health level, its RoCE link down for longer than
    --link-down-timeout, or the device itself gone (its node vanished, or no longer discovered)."""

    HEALTH = "health"
    LINK_DOWN = "link-down"
    GONE = "gone"


def samples_fresh(last_sample: float, now: float, interval: float) -> bool:
    """Pure: whether the last health sample (monotonic seconds) is recent enough to vouch for the
    devices' health."""
    return now - last_sample <= FRESHNESS_INTERVALS * interval


@dataclass(frozen=True, slots=True)
class DeviceView:
    """What servers see of a device: its record (health = last backend level), verdict and owner."""

    device: Device
    healthy: bool
    owner: Owner
    draining: bool = False  # held by `owner` after a partition change; offered to nobody new
    # The level and fault codes of the last sample that agreed with the verdict: what the verdict
    # stands for, so a sample that does not (yet) move the verdict changes nothing published.
    level: Health = Health.OK
    faults: tuple[int, ...] = ()
    reason: Reason | None = None  # why the device is unhealthy; None while it is healthy

    @property
    def physical_id(self) -> int:
        return self.device.physical_id

    @property
    def published(self) -> Device:
        """The record as a ResourceSlice shows it: health, faults and link as the verdict stands
        for."""
        link = LinkState.DOWN if self.reason is Reason.LINK_DOWN else LinkState.UP
        return replace(self.device, health=self.level, faults=self.faults, link=link)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the inventory at one version."""

    version: int
    devices: tuple[DeviceView, ...]
    # Built on the first lookup: Allocate looks devices up by id, the health poller never does.
    _by_id: dict[int, DeviceView] | None = field(default=None, init=False, repr=False, compare=False)

    def get(self, physical_id: int) -> DeviceView | None:
        if self._by_id is None:
            object.__setattr__(self, "_by_id", {v.physical_id: v for v in self.devices})
            assert self._by_id is not None
        return self._by_id.get(physical_id)

    def owned_by(self, owner: Owner) -> tuple[DeviceView, ...]:
        return tuple(v for v in self.devices if v.owner is owner)

    def offered_by(self, owner: Owner) -> tuple[DeviceView, ...]:
        """Devices this side may hand to new pods or claims."""
        return tuple(v for v in self.devices if v.owner is owner and not v.draining)


class HealthTracker:
    """Hysteresis over health samples: `failures` bad in a row to fall, `recoveries` good to rise.

    Pure state machine: no clocks, no I/O.
    """

    def __init__(self, failures: int, recoveries: int, healthy: bool) -> None:
        self.failures, self.recoveries = failures, recoveries
        self.healthy = healthy
        self._streak = 0

    def observe(self, sample_healthy: bool) -> bool:
        """Record one sample and return the (possibly changed) verdict."""
        if sample_healthy == self.healthy:
            self._streak = 0
            return self.healthy
        self._streak += 1
        if self._streak >= (self.recoveries if sample_healthy else self.failures):
            self.healthy, self._streak = sample_healthy, 0
        return self.healthy

    def force_unhealthy(self) -> None:
        """The device vanished: unhealthy now, and a full recovery streak is needed to come back."""
        self.healthy, self._streak = False, 0


class LinkClock:
    """How long a device's RoCE link has been down, from the samples' own times (pure: no clock).

    DOWN starts the count, UP ends it, UNKNOWN (a failed query) changes nothing: it is evidence of
    neither.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.down_since: float | None = None

    def observe(self, state: LinkState | None, now: float) -> bool:
        """Record one sample (None: not asked) and return whether the link is down past the
        timeout."""
        if state is LinkState.UP:
            self.down_since = None
        elif state is LinkState.DOWN and self.down_since is None:
            self.down_since = now
        return self.down_since is not None and now - self.down_since >= self.timeout


def log_verdict_changes(before: Snapshot, after: Snapshot, gone: Mapping[int, str]) -> None:
    """One line per device whose healthy verdict flipped (new devices have no verdict to flip); `gone` says why
    a device that vanished is unhealthy, where no health sample is the reason."""
    was = {v.physical_id: v.healthy for v in before.devices}
    for view in after.devices:
        if was.get(view.physical_id, view.healthy) == view.healthy:
            continue
        key = {"device": device_key([view.physical_id])}
        if view.healthy:
            log.info("device %s is healthy again", view.device.dra_name, extra=key)
        else:
            reason = gone.get(view.physical_id) or f"last health sample: {view.device.health.value}"
            log.warning("device %s turned unhealthy (%s)", view.device.dra_name, reason, extra=key)


class Inventory:
    """Loop-confined owner of device state; servers subscribe through `watch()`.

    Initial health is taken from discovery as is: there is nothing to smooth before the first
    sample.
    """

    def __init__(
        self,
        devices: Iterable[Device],
        *,
        failure_threshold: int,
        recovery_threshold: int,
        owners: Mapping[int, Owner] | Owner = Owner.DEVICE_PLUGIN,
        desired: Mapping[int, Owner] | None = None,
        new_device_owner: Callable[[Device], Owner] | None = None,
        link_down_timeout: float = DEFAULT_LINK_DOWN_TIMEOUT,
    ) -> None:
        """`owners` (and `desired`, the partition, when a handover is pending) cover the devices
        given; a device found later gets `new_device_owner(device)`, by default the single owner
        given. A device whose RoCE link stays down `link_down_timeout` seconds turns unhealthy at
        once and recovers as from any fault."""
        self._failures, self._recoveries = failure_threshold, recovery_threshold
        self._link_down_timeout = link_down_timeout
        self._links: dict[int, LinkClock] = {}
        self._link_down: set[int] = set()  # unhealthy because of the link, until healthy again
        self._devices: dict[int, Device] = {}
        self._trackers: dict[int, HealthTracker] = {}
        self._shown: dict[int, tuple[Health, tuple[int, ...]]] = {}
        self._node_missing: set[int] = set()
        self._undiscovered: set[int] = set()
        self._owners: dict[int, Owner] = {}
        default_owner = owners if isinstance(owners, Owner) else Owner.DEVICE_PLUGIN
        self._new_device_owner = new_device_owner or (lambda _device: default_owner)
        for device in devices:
            self._add(device)
        if not isinstance(owners, Owner):
            self._owners.update(owners)
        self._desired = dict(self._owners) if desired is None else dict(desired)
        self._version = 0
        self._waiters: set[asyncio.Event] = set()
        self.last_sample = time.monotonic()
        self._snapshot = self._build()

    def _add(self, device: Device) -> None:
        self._devices[device.physical_id] = device
        self._trackers[device.physical_id] = HealthTracker(self._failures, self._recoveries, device.health.healthy)
        self._links[device.physical_id] = LinkClock(self._link_down_timeout)
        # Fault codes are read for devices whose level is not OK only (health_feed.py).
        self._shown[device.physical_id] = (device.health, device.faults if device.health is not Health.OK else ())
        self._owners.setdefault(device.physical_id, self._new_device_owner(device))

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def observe(
        self,
        levels: Mapping[int, Health],
        faults: Mapping[int, tuple[int, ...]] | None = None,
        links: Mapping[int, LinkState] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        """One health sample, with the fault codes of devices that have any and the RoCE link of
        those asked (`now`: the sample's monotonic time); a device missing from `levels` reads
        Unknown."""
        self.last_sample = time.monotonic() if now is None else now
        for physical_id, device in list(self._devices.items()):
            level = levels.get(physical_id, Health.UNKNOWN)
            codes = tuple(sorted(set((faults or {}).get(physical_id, ()))))
            link = (links or {}).get(physical_id)
            if level is not device.health or codes != device.faults or link not in (None, device.link):
                self._devices[physical_id] = replace(device, health=level, faults=codes, link=link or device.link)
            link_expired = self._observe_link(physical_id, link)
            # A sample of a device whose node is gone is no evidence of health: recovery counts from
            # its return.
            sample_healthy = level.healthy and physical_id not in self._node_missing and not link_expired
            healthy = self._trackers[physical_id].observe(sample_healthy)
            if healthy:
                self._link_down.discard(physical_id)
            if healthy == level.healthy and physical_id not in self._node_missing:
                self._shown[physical_id] = (level, codes)
        self._publish()

    def _observe_link(self, physical_id: int, link: LinkState | None) -> bool:
        """Count the link's down time; past the timeout the device turns unhealthy at once (the
        timeout is its debounce), and its recovery counts from the link's return."""
        clock = self._links[physical_id]
        was_down = clock.down_since is not None
        expired = clock.observe(link, self.last_sample)
        key = {"device": device_key([physical_id])}
        if not was_down and clock.down_since is not None:
            log.warning(
                "RoCE link of %s is down; the device turns unhealthy if it stays down %g s",
                key["device"],
                self._link_down_timeout,
                extra=key,
            )
        elif was_down and clock.down_since is None:
            log.info("RoCE link of %s is up again", key["device"], extra=key)
        if expired and physical_id not in self._link_down:
            self._link_down.add(physical_id)
            self._trackers[physical_id].force_unhealthy()
        return expired

    def set_present(self, physical_id: int, present: bool) -> None:
        """A device node appeared in or vanished from --dev-root."""
        if physical_id not in self._devices:
            return
        if present:
            self._node_missing.discard(physical_id)
        else:
            self._node_missing.add(physical_id)
            self._force_unhealthy(physical_id)
        self._publish()

    def update_devices(self, devices: Iterable[Device]) -> None:
        """Re-discovery: refresh records, add new devices; vanished ones stay, unhealthy."""
        fresh = {d.physical_id: d for d in devices}
        for physical_id, device in fresh.items():
            if physical_id in self._devices:
                known = self._devices[physical_id]
                self._devices[physical_id] = replace(device, health=known.health, faults=known.faults)
            else:
                self._add(device)
                self._desired[physical_id] = self._owners[physical_id]
                log.info(
                    "new device %s, served by %s",
                    device.dra_name,
                    self._owners[physical_id].value,
                    extra={"device": device_key([physical_id])},
                )
        for physical_id in self._devices.keys() - fresh.keys() - self._undiscovered:
            self._force_unhealthy(physical_id)
        self._undiscovered = self._devices.keys() - fresh.keys()
        self._publish()

    def _force_unhealthy(self, physical_id: int) -> None:
        """The device is gone: unhealthy at once, its level unknown."""
        self._trackers[physical_id].force_unhealthy()
        self._shown[physical_id] = (Health.UNKNOWN, ())

    def desired_owners(self) -> dict[int, Owner]:
        """The partition: the owner each device should have once nothing holds it elsewhere."""
        return dict(self._desired)

    def set_owner(self, physical_id: int, owner: Owner) -> None:
        """Hand a device over (both mode, once nothing holds it any more)."""
        if self._owners.get(physical_id) is not owner:
            self._owners[physical_id] = owner
            self._publish()

    def _build(self) -> Snapshot:
        views = tuple(
            DeviceView(
                device=self._devices[physical_id],
                healthy=self._reason(physical_id) is None,
                owner=self._owners[physical_id],
                draining=self._owners[physical_id] is not self._desired.get(physical_id, self._owners[physical_id]),
                level=self._shown[physical_id][0],
                faults=self._shown[physical_id][1],
                reason=self._reason(physical_id),
            )
            for physical_id in sorted(self._devices)
        )
        return Snapshot(version=self._version, devices=views)

    def _reason(self, physical_id: int) -> Reason | None:
        """Why the device is unhealthy, the most lasting cause first; None while it is healthy."""
        if physical_id in self._node_missing | self._undiscovered:
            return Reason.GONE
        if self._trackers[physical_id].healthy:
            return None
        return Reason.LINK_DOWN if physical_id in self._link_down else Reason.HEALTH

    def _publish(self) -> None:
        candidate = self._build()
        if candidate.devices == self._snapshot.devices:
            return
        gone = dict.fromkeys(self._link_down, f"its RoCE link is down for {self._link_down_timeout:g} s or more")
        gone |= dict.fromkeys(self._undiscovered, "no longer discovered")
        gone |= dict.fromkeys(self._node_missing, "its device node is gone")
        log_verdict_changes(self._snapshot, candidate, gone)
        self._version += 1
        self._snapshot = replace(candidate, version=self._version)
        for waiter in self._waiters:
            waiter.set()

    async def watch(self) -> AsyncGenerator[Snapshot, None]:
        """The current snapshot at once, then the newest one after every change (coalesced)."""
        event = asyncio.Event()
        self._waiters.add(event)
        seen = -1
        try:
            while True:
                if self._snapshot.version != seen:
                    seen = self._snapshot.version
                    yield self._snapshot
                else:
                    await event.wait()
                    event.clear()
        finally:
            self._waiters.discard(event)
