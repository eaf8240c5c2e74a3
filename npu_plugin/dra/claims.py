"""From a ResourceClaim to the devices we must prepare, refusing every claim we may not prepare
(pure).

Three device name forms: a whole NPU `npu-<phy>`, a vNPU to create `npu-<phy>-<template>-<k>` (a
candidate of a chip split on demand) and an existing vNPU `npu-<phy>-vnpu-<id>`. A vNPU serves one
container: it is alone in its request, and its claim is reserved for one consumer. That two
containers of one pod may still share a request cannot be seen without reading the Pod.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from npu_plugin.ascend.device import parse_dra_name
from npu_plugin.ascend.vnpu import ChipVnpu, StaticName, VnpuChips, VnpuOrigin, fits, parse_vnpu_name, resolve_candidate
from npu_plugin.errors import ClaimError, clipped, quoted

# `request` or `request/subrequest`, each a DNS label as the API server validates them: the base
# name becomes part of a CDI device name, which allows no other characters.
_REQUEST = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?")


# The scheduler keeps vNPUs and whole NPUs of one chip apart only through counters, which need this
# gate.
_GATE_HINT = "(is DRAPartitionableDevices enabled on kube-scheduler?)"


@dataclass(frozen=True, slots=True)
class WantedVnpu:
    """The vNPU an allocation result stands for: one to create (dynamic, its id chosen at Prepare)
    or one that exists (static, with its id)."""

    template: str
    origin: VnpuOrigin
    vnpu_id: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One allocation result of our driver: which request asked, and the device given."""

    request: str  # base request name, without `/subrequest`
    pool: str
    device: str
    physical_id: int
    vnpu: WantedVnpu | None = None


@dataclass(frozen=True, slots=True)
class Holding:
    """A device another claim holds on a chip (prepared or being prepared): a whole NPU (`template`
    None) or a vNPU."""

    physical_id: int
    template: str | None = None


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
    vnpus: VnpuChips | None = None,
) -> list[ClaimDevice]:
    """Our driver's results of an allocated claim.

    `refuse_device(physical_id)` returns why a chip's devices cannot be prepared (unknown, other
    mode, draining), or None. `vnpus` says what each chip serves (nothing with --vnpu off). Raises
    ClaimError with the reason otherwise.
    """
    actual_uid = _path(claim, "metadata", "uid")
    if actual_uid != uid:
        raise ClaimError(f"claim UID mismatch: the kubelet asked for {uid}, the API has {clipped(str(actual_uid))}")
    results = _path(claim, "status", "allocation", "devices", "results")
    if results is None:
        raise ClaimError("the claim is not allocated (status.allocation is empty)")
    if not isinstance(results, list):
        raise ClaimError("status.allocation.devices.results is not a list")
    served = vnpus or VnpuChips({})
    devices = [
        _result(r, pool, refuse_device, served) for r in results if isinstance(r, Mapping) and r.get("driver") == driver
    ]
    if not devices:
        raise ClaimError(f"the claim has no allocation results for driver {driver}")
    # Our devices are never shared (no allowMultipleAllocations), so one twice is an allocation we
    # cannot honour.
    if twice := sorted(name for name, count in Counter(d.device for d in devices).items() if count > 1):
        raise ClaimError(f"device(s) {', '.join(twice)} allocated more than once in this claim")
    _check_vnpu_requests(devices, _path(claim, "status", "reservedFor"))
    return devices


def _check_vnpu_requests(devices: list[ClaimDevice], reserved_for: Any) -> None:
    """A vNPU serves one container request: alone in its request, in a claim reserved for one
    consumer."""
    for request in dict.fromkeys(d.request for d in devices):
        given = [d for d in devices if d.request == request]
        vnpus = [d.device for d in given if d.vnpu is not None]
        if vnpus and len(given) > 1:
            what = "more than one vNPU" if len(vnpus) == len(given) else "a vNPU together with whole NPUs"
            raise ClaimError(
                f"request {request!r} holds {what} ({', '.join(d.device for d in given)}); "
                "a vNPU serves one container request alone"
            )
    vnpu = next((d for d in devices if d.vnpu is not None), None)
    if vnpu is not None and isinstance(reserved_for, list) and len(reserved_for) > 1:
        raise ClaimError(
            f"device {vnpu.device} (a vNPU of npu-{vnpu.physical_id}) is reserved for {len(reserved_for)} "
            "consumers; a vNPU serves one container"
        )


def _result(
    result: Mapping[str, Any],
    pool: str,
    refuse_device: Callable[[int], str | None],
    served: VnpuChips,
) -> ClaimDevice:
    request, result_pool, name = result.get("request"), result.get("pool"), result.get("device")
    if not isinstance(request, str) or not request or not isinstance(name, str):
        raise ClaimError(f"malformed allocation result {quoted(dict(result))}: request and device must be strings")
    if not _REQUEST.fullmatch(request):
        raise ClaimError(f"malformed allocation result: request name {quoted(request)} is not a DNS label")
    if result_pool != pool:
        raise ClaimError(f"device {clipped(name)} is in pool {quoted(result_pool)}, not this node's pool {pool!r}")
    request = base_request(request)
    if (physical_id := parse_dra_name(name)) is not None:
        _refuse(name, physical_id, refuse_device)
        chip = served.chips.get(physical_id)
        if chip is not None and chip.vnpus and physical_id not in served.dynamic:
            ids = ", ".join(str(v.vnpu_id) for v in chip.vnpus)
            raise ClaimError(f"device {name}: npu-{physical_id} holds vNPUs ({ids}) and is not offered whole")
        return ClaimDevice(request, pool, name, physical_id)
    parsed = parse_vnpu_name(name)
    if parsed is None:
        raise ClaimError(f"unknown device {quoted(name)} (ours are named npu-<physicalId>[-<vNPU>])")
    physical_id = parsed.physical_id
    _refuse(name, physical_id, refuse_device)
    chip = served.chips.get(physical_id)
    if chip is None:
        raise ClaimError(f"device {name}: npu-{physical_id} serves no vNPUs (see --vnpu)")
    dynamic = physical_id in served.dynamic
    if isinstance(parsed, StaticName):
        vnpu = next((v for v in chip.vnpus if v.vnpu_id == parsed.vnpu_id), None)
        if vnpu is None:
            raise ClaimError(f"device {name}: vNPU {parsed.vnpu_id} no longer exists on npu-{physical_id}")
        if dynamic:
            raise ClaimError(f"device {name}: npu-{physical_id} is split on demand; its vNPUs are not served by id")
        return ClaimDevice(request, pool, name, physical_id, WantedVnpu(vnpu.template, VnpuOrigin.STATIC, vnpu.vnpu_id))
    if not dynamic:
        how = "serves the vNPUs it has as they are" if chip.vnpus else "is offered whole"
        raise ClaimError(f"device {name}: npu-{physical_id} is not split on demand; it {how} (see the start-up log)")
    try:
        candidate = resolve_candidate(chip, parsed, served.offered)
    except ValueError as error:
        raise ClaimError(str(error)) from None
    return ClaimDevice(request, pool, name, physical_id, WantedVnpu(candidate.template.name, VnpuOrigin.DYNAMIC))


def _refuse(name: str, physical_id: int, refuse_device: Callable[[int], str | None]) -> None:
    if (reason := refuse_device(physical_id)) is not None:
        raise ClaimError(f"device {name}: {reason}")


def overlap_problem(
    devices: list[ClaimDevice], chips: Mapping[int, ChipVnpu], held: list[Holding], recorded: frozenset[int]
) -> str | None:
    """Why this claim's devices overlap what the chips already give, or None: defence in depth
    against a scheduler that does not count a chip's shared resources.

    Per chip, a whole NPU excludes any vNPU, and the templates of the vNPUs other claims hold, of
    the live vNPUs no claim records (`recorded`: vNPU ids in the checkpoint) and of this claim's new
    vNPUs must fit the chip's totals together.
    """
    for physical_id in dict.fromkeys(d.physical_id for d in devices):
        chip = chips.get(physical_id)
        if chip is None:
            continue
        mine = [d for d in devices if d.physical_id == physical_id]
        others = [h for h in held if h.physical_id == physical_id]
        unrecorded = [v for v in chip.vnpus if v.vnpu_id not in recorded]
        if any(d.vnpu is None for d in mine) and (others or unrecorded):
            what = "vNPUs" if unrecorded or any(h.template for h in others) else "another claim"
            return _overlap(physical_id, f"the whole NPU is asked for while {what} hold part of it")
        if any(d.vnpu is not None for d in mine) and any(h.template is None for h in others):
            return _overlap(physical_id, "a vNPU is asked for while another claim holds the whole NPU")
        new = [d.vnpu.template for d in mine if d.vnpu is not None and d.vnpu.origin is VnpuOrigin.DYNAMIC]
        taken = [h.template for h in others if h.template] + [v.template for v in unrecorded]
        if new and not fits(chip, taken + new):
            return _overlap(physical_id, f"{', '.join(new)} do not fit beside {', '.join(taken) or 'nothing'}")
    return None


def _overlap(physical_id: int, detail: str) -> str:
    return f"overlapping allocation on npu-{physical_id}: {detail} {_GATE_HINT}"
