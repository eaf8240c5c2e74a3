"""Dry-run probe slices: what the API server's write strategy keeps of a field tells whether its
feature gate is on (gates are not readable through the API). A probe lives in a pool of its own,
which the publisher ignores, and is never stored (dry run), or deleted at once where dry run is
refused."""

from __future__ import annotations

import logging
from collections.abc import Callable

from npu_plugin.dra.slices import API_VERSION, SliceSettings
from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.protocol import CounterSet, KubeApi, ResourceSlice, ResourceSliceSpec, SliceDevice, StoredSlice

log = logging.getLogger(__name__)


def probe_pool(settings: SliceSettings) -> str:
    return f"{settings.node_name}-probe"


def probe_slice(
    settings: SliceSettings, *, devices: list[SliceDevice] | None = None, counters: list[CounterSet] | None = None
) -> ResourceSlice:
    """A slice of the probe pool holding the field to probe: devices, or counters alone."""
    spec: ResourceSliceSpec = {
        "driver": settings.driver,
        "nodeName": settings.node_name,
        "pool": {"name": probe_pool(settings), "generation": 1, "resourceSliceCount": 1},
    }
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{settings.node_name}-{settings.driver}-probe-"},
        "spec": spec,
    }


def probe(api: KubeApi, body: ResourceSlice) -> StoredSlice:
    """What the API server would store of `body` (blocking)."""
    try:
        answer = api.create_slice(body, dry_run=True)
    except KubeApiError as error:
        if error.status not in (400, 404, 405, 422):
            raise
        log.info("the API server refused a dry-run create (%s); probing with a real create and delete", error)
        answer = api.create_slice(body)
    if answer["metadata"].get("resourceVersion"):  # it was stored: dry run not honoured
        api.delete_slice(answer["metadata"]["name"])
    return answer


def lost_device_field(written: ResourceSlice, stored: StoredSlice, key: str) -> bool:
    """Whether a device we wrote with `key` set came back without it (the field's gate is off)."""
    kept = {d["name"]: bool(d.get(key)) for d in stored["spec"].get("devices") or []}
    return any(d.get(key) and not kept.get(d["name"]) for d in written["spec"].get("devices") or [])


class FieldGate:
    """Whether the API server keeps one field of the slices we write, which tells whether its feature
    gate is on: from a dry-run probe (`refresh`) or from a published slice read back without it
    (`stripped`). `kept` is None until either has said; each change is logged once, at info when
    on, as a warning when off (`on_text` and `off_text` say what follows; both get the gate's name
    and why)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        gate: str,
        what: str,
        probe_body: Callable[[SliceSettings], ResourceSlice],
        kept_in: Callable[[StoredSlice], bool],
        on_text: str,
        off_text: Callable[[], str],
    ) -> None:
        self._api, self.gate, self._what = api, gate, what
        self._probe_body, self._kept_in = probe_body, kept_in
        self._on_text, self._off_text = on_text, off_text
        self.kept: bool | None = None

    def refresh(self, settings: SliceSettings) -> None:
        kept = self._kept_in(probe(self._api, self._probe_body(settings)))
        self.set(kept, f"a dry-run probe slice {'kept' if kept else 'lost'} its {self._what}")

    def stripped(self) -> None:
        """A slice we wrote came back without the field."""
        self.set(False, f"a published slice lost its {self._what}")

    def set(self, kept: bool, why: str) -> None:
        if kept == self.kept:
            return
        self.kept = kept
        if kept:
            log.info("%s is on (%s): %s", self.gate, why, self._on_text)
        else:
            log.warning(
                "%s is off on the API server (%s): %s",
                self.gate,
                why,
                self._off_text(),
                extra={"feature_gate": self.gate},
            )
