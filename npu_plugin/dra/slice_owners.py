"""Which of the driver's ResourceSlices on this node are ours (pure).

Another publisher of the same driver name on the node (Huawei's MindCluster DRA driver also calls
itself npu.huawei.com) would fight over the pool: each deletes or overwrites what the other wrote.
Ours carry the label `app.kubernetes.io/managed-by: npu-plugin`; slices written before that label
existed are recognised by the API server's record of their writer, field manager `npu-plugin` (the
User-Agent `npu-plugin/<version>` up to the `/`). Anything else of our driver on our node is
another publisher's.

Which npu-plugin instance wrote a slice last is in the annotation `npu.huawei.com/publisher` (the
pod's UID): during a rolling update the old and the new pod of the DaemonSet both publish the pool.
"""

from __future__ import annotations

from collections.abc import Iterable

from npu_plugin.kubeapi.protocol import StoredSlice

MANAGER = "npu-plugin"
MANAGED_BY = "app.kubernetes.io/managed-by"
LABELS = {MANAGED_BY: MANAGER}
PUBLISHER = "npu.huawei.com/publisher"


def written_by_us(stored: StoredSlice) -> bool:
    metadata = stored["metadata"]
    if (metadata.get("labels") or {}).get(MANAGED_BY) == MANAGER:
        return True
    return any(entry.get("manager") == MANAGER for entry in metadata.get("managedFields") or [])


def foreign_slices(slices: Iterable[StoredSlice]) -> list[StoredSlice]:
    """The slices another publisher wrote, by name."""
    return sorted((s for s in slices if not written_by_us(s)), key=lambda s: s["metadata"]["name"])


def publisher_of(stored: StoredSlice) -> str | None:
    """The npu-plugin instance that wrote the slice, when it said so."""
    return (stored["metadata"].get("annotations") or {}).get(PUBLISHER)


def describe(foreign: Iterable[StoredSlice]) -> str:
    """`<name> (pool <pool>, written by <managers>)`, comma-joined, for the one log line."""
    parts = []
    for stored in foreign:
        managers = sorted({e.get("manager", "?") for e in stored["metadata"].get("managedFields") or []})
        writer = f", written by {'/'.join(managers)}" if managers else ""
        parts.append(f"{stored['metadata']['name']} (pool {stored['spec']['pool']['name']}{writer})")
    return ", ".join(parts)
