"""Dry-run probe slices: what the API server's write strategy keeps of a field tells whether its
feature gate is on (gates are not readable through the API). A probe lives in a pool of its own,
which the publisher ignores, and is never stored (dry run), or deleted at once where dry run is
refused."""

from __future__ import annotations

import logging

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
