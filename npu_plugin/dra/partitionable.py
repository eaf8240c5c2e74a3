"""Which vNPU slice layout this node's API server stores intact: its version (split from 1.35,
combined on 1.34) and whether DRAPartitionableDevices keeps counters.

The gate is not readable through the API. A dry-run create of a counter-only probe slice runs the
API server's write strategy, which drops `sharedCounters` while the gate is off; the probe runs once
a chip is split on demand (at start, or when the first one is), then every 10 minutes and after a
version change. The version changes only when the API server restarts, which cuts the slice watch
short: it is read with each probe and after such a cut, never polled (two requests per 10 minutes,
not one per 30 s resync). Every slice write is also read back: a stored slice that lost its counters
switches the node to the fallback layout (no counters) until a later probe finds the gate on. Fail
closed: until the first probe answers, the fallback is used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from npu_plugin.dra.probes import lost_device_field, probe, probe_slice
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.dra.vnpu_slices import Layout, layout_for
from npu_plugin.kubeapi.protocol import KubeApi, ResourceSlice, StoredSlice

log = logging.getLogger(__name__)
PROBE_SECONDS = 600.0
GATE = "DRAPartitionableDevices"


def probe_counters(settings: SliceSettings) -> ResourceSlice:
    """A counter-only probe slice."""
    return probe_slice(settings, counters=[{"name": "probe", "counters": {"probe": {"value": "1"}}}])


def lost_counters(written: ResourceSlice, stored: StoredSlice) -> bool:
    """Whether the API server dropped counters from a slice we wrote (the gate is off)."""
    if written["spec"].get("sharedCounters") and not stored["spec"].get("sharedCounters"):
        return True
    return lost_device_field(written, stored, "consumesCounters")


class PartitionableGate:
    """The API server's minor version and whether it keeps counters; blocking calls, from the
    publisher's thread."""

    def __init__(
        self,
        api: KubeApi,
        *,
        on_change: Callable[[bool], None] = lambda _on: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api, self._on_change, self._clock = api, on_change, clock
        self.minor: int | None = None
        self.on = False
        self._probed_at: float | None = None
        self._warned = False

    def due(self) -> bool:
        """Whether the gate has never been probed, or not for 10 minutes."""
        return self._probed_at is None or self._clock() - self._probed_at >= PROBE_SECONDS

    @property
    def layout(self) -> Layout:
        return layout_for(self.minor or 0, self.on and self.minor is not None)

    def refresh(self, settings: SliceSettings) -> bool:
        """Read the version; probe at the first call, every 10 minutes and after a version change.
        True when the layout changed."""
        before = self.layout
        _, minor = self._api.server_version()
        due = self.due()
        if minor != self.minor:
            if self.minor is not None:
                log.info("the API server is now Kubernetes 1.%d (was 1.%d)", minor, self.minor)
            self.minor, due = minor, True
        if due:
            on = self._probe(settings)
            self._set(
                on, "a dry-run probe slice kept its counters" if on else "a dry-run probe slice lost its counters"
            )
            self._probed_at = self._clock()
        return self.layout is not before

    def stripped(self) -> None:
        """A slice we wrote came back without its counters: the gate is off, whatever the last probe
        said."""
        self._set(False, "a published slice lost its counters")

    def _probe(self, settings: SliceSettings) -> bool:
        return bool(probe(self._api, probe_counters(settings))["spec"].get("sharedCounters"))

    def _set(self, on: bool, why: str) -> None:
        if on == self.on and (on or self._warned):
            return
        self.on = on
        self._on_change(on)
        if on:
            self._warned = False
            log.info("%s is on (%s): publishing vNPU candidates with counters", GATE, why)
        else:
            self._warned = True
            log.warning(
                "%s is off on the API server (%s): publishing whole NPUs without counters and no vNPUs on demand; "
                "turn the feature gate on in kube-apiserver and kube-scheduler",
                GATE,
                why,
                extra={"feature_gate": GATE},
            )
