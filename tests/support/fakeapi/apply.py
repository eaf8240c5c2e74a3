"""Server-side apply of a ResourceClaim's `status.devices`, the one list the product applies: a
`listType=map` keyed by driver, pool, device and shareID, so each entry belongs to the field manager
that applied it. An apply sets the manager's entries to exactly those of its body: entries it
applied before and leaves out are removed, other managers' entries stay. The registry keeps who owns
which entry (the API server keeps it in `metadata.managedFields`, which this fake does not show).
Conflicts between managers are not modelled (the product applies with force)."""

from __future__ import annotations

import copy
import json
from typing import Any

from npu_plugin.sim._fakeapi.kinds import JSON


def entry_key(entry: JSON) -> str:
    """An entry's map key, as managedFields spells it: `k:{"device":...,"driver":...,"pool":...}`."""
    fields = {k: entry.get(k) for k in ("driver", "pool", "device", "shareID") if entry.get(k) is not None}
    return "k:" + json.dumps(fields, sort_keys=True, separators=(",", ":"))


def apply_status_devices(current: JSON, body: Any, owned: set[str]) -> tuple[JSON, set[str]]:
    """`current` as an apply of `body` by a manager owning the entries `owned` leaves it, and what
    that manager owns after it."""
    result = copy.deepcopy(current)
    status = (body or {}).get("status") if isinstance(body, dict) else None
    wanted = [d for d in ((status or {}).get("devices") or []) if isinstance(d, dict)]
    keyed = {entry_key(d): d for d in wanted}
    dropped = owned - keyed.keys()
    target = result.setdefault("status", {})
    kept, pending = [], dict(keyed)
    for entry in target.get("devices") or []:
        key = entry_key(entry)
        if key in pending:
            kept.append(copy.deepcopy(pending.pop(key)))
        elif key not in dropped:
            kept.append(entry)
    kept += [copy.deepcopy(d) for d in pending.values()]
    if kept:
        target["devices"] = kept
    else:
        target.pop("devices", None)
    return result, set(keyed)
