"""From a ResourceClaim to the devices we must prepare, refusing every claim we may not prepare (pure)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from npu_plugin.device import parse_dra_name
from npu_plugin.errors import ClaimError, clipped, quoted

# `request` or `request/subrequest`, each a DNS label as the API server validates them: the base name
# becomes part of a CDI device name, which allows no other characters.
_REQUEST = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?")


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One allocation result of our driver: which request asked, and the device given."""

    request: str  # base request name, without `/subrequest`
    pool: str
    device: str
    physical_id: int


def base_request(name: str) -> str:
    return name.split("/", 1)[0]


def _path(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def claim_devices(
    claim: Mapping[str, Any],
    *,
    uid: str,
    driver: str,
    pool: str,
    refuse_device: Callable[[int], str | None],
) -> list[ClaimDevice]:
    """Our driver's results of an allocated claim.

    `refuse_device(physical_id)` returns why a device cannot be prepared (unknown, other mode,
    prepared for another claim), or None. Raises ClaimError with the reason otherwise.
    """
    actual_uid = _path(claim, "metadata", "uid")
    if actual_uid != uid:
        raise ClaimError(f"claim UID mismatch: the kubelet asked for {uid}, the API has {clipped(str(actual_uid))}")
    results = _path(claim, "status", "allocation", "devices", "results")
    if results is None:
        raise ClaimError("the claim is not allocated (status.allocation is empty)")
    if not isinstance(results, list):
        raise ClaimError("status.allocation.devices.results is not a list")
    devices = [_result(r, pool, refuse_device) for r in results if isinstance(r, Mapping) and r.get("driver") == driver]
    if not devices:
        raise ClaimError(f"the claim has no allocation results for driver {driver}")
    # Our devices are never shared (no allowMultipleAllocations), so one twice is an allocation we cannot honour.
    if twice := sorted(name for name, count in Counter(d.device for d in devices).items() if count > 1):
        raise ClaimError(f"device(s) {', '.join(twice)} allocated more than once in this claim")
    return devices


def _result(result: Mapping[str, Any], pool: str, refuse_device: Callable[[int], str | None]) -> ClaimDevice:
    request, result_pool, name = result.get("request"), result.get("pool"), result.get("device")
    if not isinstance(request, str) or not request or not isinstance(name, str):
        raise ClaimError(f"malformed allocation result {quoted(dict(result))}: request and device must be strings")
    if not _REQUEST.fullmatch(request):
        raise ClaimError(f"malformed allocation result: request name {quoted(request)} is not a DNS label")
    if result_pool != pool:
        raise ClaimError(f"device {clipped(name)} is in pool {quoted(result_pool)}, not this node's pool {pool!r}")
    physical_id = parse_dra_name(name)
    if physical_id is None:
        raise ClaimError(f"unknown device {quoted(name)} (ours are named npu-<physicalId>)")
    if (reason := refuse_device(physical_id)) is not None:
        raise ClaimError(f"device {name}: {reason}")
    return ClaimDevice(request=base_request(request), pool=pool, device=name, physical_id=physical_id)
