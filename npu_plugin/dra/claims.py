"""From a ResourceClaim to the devices we must prepare, refusing every claim we may not prepare
(pure).

Three device name forms: a whole NPU `npu-<phy>`, a vNPU to create `npu-<phy>-<template>-<k>` (a
candidate of a chip split on demand) and an existing vNPU `npu-<phy>-vnpu-<id>`. A vNPU serves one
container: it is alone in its request, and its claim is reserved for one consumer. That two
containers of one pod may still share a request cannot be seen without reading the Pod.

A shared chip (`--share-devices`, consumable capacity) comes with the `shareID` the scheduler gave
the allocation; the share is alone in its request too, so its CDI device is the request's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from npu_plugin.ascend.device import parse_dra_name
from npu_plugin.ascend.vnpu import ChipVnpu, StaticName, VnpuChips, VnpuOrigin, fits, parse_vnpu_name, resolve_candidate
from npu_plugin.errors import ClaimError, clipped, quoted

# `request` or `request/subrequest`, each a DNS label as the API server validates them: the base
# name becomes part of a CDI device name, which allows no other characters.
_REQUEST = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?")
# A share id becomes part of a CDI device name and a file's content: a UID's characters only.
_SHARE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


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
    share_id: str | None = None  # the allocation's shareID on a shared chip


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
    shared: Callable[[int], bool] = lambda _physical_id: False,
) -> list[ClaimDevice]:
    """Our driver's results of an allocated claim.

    `refuse_device(physical_id)` returns why a chip's devices cannot be prepared (unknown, other
    mode, draining), or None. `vnpus` says what each chip serves (nothing with --vnpu off);
    `shared` whether a chip may be allocated in shares. Raises ClaimError with the reason otherwise.
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
        _shared_result(r, _result(r, pool, refuse_device, served), shared)
        for r in results
        if isinstance(r, Mapping) and r.get("driver") == driver
    ]
    if not devices:
        raise ClaimError(f"the claim has no allocation results for driver {driver}")
    # A device (or one share of it) twice is an allocation we cannot honour.
    keys = Counter((d.device, d.share_id) for d in devices)
    if twice := sorted(_shown(name, share) for (name, share), count in keys.items() if count > 1):
        raise ClaimError(f"device(s) {', '.join(twice)} allocated more than once in this claim")
    _check_vnpu_requests(devices, _path(claim, "status", "reservedFor"))
    _check_share_requests(devices)
    return devices


def _shown(device: str, share_id: str | None) -> str:
    return device if share_id is None else f"{device} (share {share_id})"


def _shared_result(result: Mapping[str, Any], device: ClaimDevice, shared: Callable[[int], bool]) -> ClaimDevice:
    """The device with the allocation's shareID, which only a shared whole chip may carry."""
    share_id = result.get("shareID")
    if share_id is None:
        return device
    if not isinstance(share_id, str) or not _SHARE_ID.fullmatch(share_id):
        raise ClaimError(f"malformed allocation result: shareID {quoted(share_id)} of {device.device} is not a UID")
    if device.vnpu is not None:
        raise ClaimError(f"device {device.device} is a vNPU; it cannot be allocated in shares (shareID {share_id})")
    if not shared(device.physical_id):
        raise ClaimError(
            f"device {device.device} is allocated as share {share_id}, but npu-{device.physical_id} is not shared "
            "(--share-devices)"
        )
    return replace(device, share_id=share_id)


def _check_share_requests(devices: list[ClaimDevice]) -> None:
    """A share is alone in its request: its CDI device gives the container that chip alone."""
    for request in dict.fromkeys(d.request for d in devices if d.share_id is not None):
        given = [d for d in devices if d.request == request]
        if len(given) > 1:
            raise ClaimError(
                f"request {request!r} holds a share of a shared NPU together with other devices "
                f"({', '.join(_shown(d.device, d.share_id) for d in given)}); a shared NPU serves a request alone "
                "(count: 1)"
            )


def held_conflict(devices: list[ClaimDevice], held: list[tuple[str, str, str | None]]) -> str | None:
    """Why a device of this claim collides with what other claims hold (`held`: claim UID, device
    name, share id), or None: a device held whole excludes any other claim, and one share of a
    device is held by one claim."""
    for device in devices:
        for uid, name, share_id in held:
            if name != device.device:
                continue
            if device.share_id is None and share_id is None:
                return f"device {device.device}: already prepared for claim {uid}"
            if device.share_id is None:
                return f"device {device.device}: claim {uid} holds a share of it; it cannot be prepared whole"
            if share_id is None:
                return f"device {device.device}: claim {uid} holds it whole; share {device.share_id} cannot be prepared"
            if share_id == device.share_id:
                return f"device {device.device}: share {share_id} is already prepared for claim {uid}"
    return None


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
