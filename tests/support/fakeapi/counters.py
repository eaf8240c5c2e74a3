"""ResourceSlice counter validation (partitionable devices), per Kubernetes version (pure
functions).

1.34 (`k8s.io/api` v0.34): a slice may hold counter sets and the devices consuming them together; a
device's consumption names a set of the same slice and counters of that set, once per set; at most
32 counters summed over the slice's sets and 1024 consumed counters per slice. 1.35 and 1.36:
counters and devices live in separate slices of the pool; at most 8 sets per slice and 32 counters
per set; at most 2 consumptions per device, 32 counters each.
"""

from __future__ import annotations

from typing import Any

from npu_plugin.sim._fakeapi.kinds import JSON
from tests.support.fakeapi import names
from tests.support.fakeapi.fielderrors import FieldError, duplicate, invalid_value, not_found, required, too_many

SPLIT_FROM = 35
MAX_COUNTERS_PER_SLICE_1_34 = 32
MAX_CONSUMED_COUNTERS_PER_SLICE_1_34 = 1024
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_COUNTERS_PER_CONSUMPTION = 32


def slice_counter_errors(spec: JSON, path: str, minor: int) -> list[FieldError]:
    sets: list[JSON] = spec.get("sharedCounters") or []
    devices: list[JSON] = spec.get("devices") or []
    errs: list[FieldError] = []
    if minor >= SPLIT_FROM:
        if "sharedCounters" in spec and "devices" in spec:
            errs.append(invalid_value(path, "", "only one of `sharedCounters` or `devices` is allowed"))
        if len(sets) > MAX_COUNTER_SETS:
            errs.append(too_many(f"{path}.sharedCounters", len(sets), MAX_COUNTER_SETS))
    errs += _sets(sets, f"{path}.sharedCounters", minor)
    known = {s.get("name", ""): set((s.get("counters") or {}).keys()) for s in sets}
    consumed = 0
    for i, device in enumerate(devices):
        entries: list[JSON] = device.get("consumesCounters") or []
        consumed += sum(len(e.get("counters") or {}) for e in entries)
        errs += _consumptions(entries, f"{path}.devices[{i}].consumesCounters", minor, known)
    if minor < SPLIT_FROM and consumed > MAX_CONSUMED_COUNTERS_PER_SLICE_1_34:
        detail = f"the total number of consumed counters must not exceed {MAX_CONSUMED_COUNTERS_PER_SLICE_1_34}"
        errs.append(invalid_value(f"{path}.devices", consumed, detail))
    return errs


def _sets(sets: list[JSON], path: str, minor: int) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    total = 0
    for i, counter_set in enumerate(sets):
        limit = MAX_COUNTERS_PER_SET if minor >= SPLIT_FROM else None
        errs += _named_counters(counter_set, "name", f"{path}[{i}]", seen, limit)
        total += len(counter_set.get("counters") or {})
    if minor < SPLIT_FROM and total > MAX_COUNTERS_PER_SLICE_1_34:
        detail = f"the total number of shared counters must not exceed {MAX_COUNTERS_PER_SLICE_1_34}"
        errs.append(invalid_value(path, total, detail))
    return errs


def _consumptions(entries: list[JSON], path: str, minor: int, known: dict[str, set[str]]) -> list[FieldError]:
    errs: list[FieldError] = []
    if minor >= SPLIT_FROM and len(entries) > MAX_CONSUMPTIONS_PER_DEVICE:
        errs.append(too_many(path, len(entries), MAX_CONSUMPTIONS_PER_DEVICE))
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        name, counters = entry.get("counterSet", ""), entry.get("counters") or {}
        errs += _named_counters(entry, "counterSet", f"{path}[{i}]", seen, MAX_COUNTERS_PER_CONSUMPTION)
        if minor < SPLIT_FROM and name:
            if name not in known:
                errs.append(not_found(f"{path}[{i}].counterSet", name))
            else:
                errs += [not_found(f"{path}[{i}].counters", c) for c in sorted(set(counters) - known[name])]
    return errs


def _named_counters(entry: JSON, key: str, path: str, seen: set[str], limit: int | None) -> list[FieldError]:
    """A counter set or a consumption: its set name (a DNS label, once) and its counters (at most
    `limit`)."""
    name, counters = entry.get(key, ""), entry.get("counters") or {}
    errs = _name(name, f"{path}.{key}")
    if name in seen:
        errs.append(duplicate(f"{path}.{key}", name))
    seen.add(name)
    if not counters:
        errs.append(required(f"{path}.counters"))
    if limit is not None and len(counters) > limit:
        errs.append(too_many(f"{path}.counters", len(counters), limit))
    return errs + _counters(counters, f"{path}.counters")


def _counters(counters: dict[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for key, counter in sorted(counters.items()):
        errs += _name(key, f"{path}[{key}]")
        if not isinstance(counter, dict) or "value" not in counter:
            errs.append(required(f"{path}[{key}].value"))
    return errs


def _name(name: str, path: str) -> list[FieldError]:
    if not name:
        return [required(path)]
    return [invalid_value(path, name, msg) for msg in names.dns1123_label(name)]
