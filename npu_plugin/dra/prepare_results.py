"""What a Prepare answers and records, computed without I/O: claim references and their checks, the
claim's devices with their CDI ids and what the kubelet is told of them, each request's devices for
the claim's CDI spec, and the ids of a claim's new vNPUs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from npu_plugin.cdi.spec import CLAIM_WIDE, claim_cdi_id, claim_wide_ids
from npu_plugin.dra.checkpoint import PreparedDevice, VnpuRecord
from npu_plugin.dra.claims import ClaimDevice
from npu_plugin.dra.vnpus import lowest_free_id
from npu_plugin.errors import ClaimError, clipped, quoted
from npu_plugin.inventory.vnpu_plans import ChipPlan
from npu_plugin.podannotations.mindcluster import PodRef

# Matched whole (fullmatch): `$` would also take a trailing newline into a file name or a URL.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_DNS_LABELISH = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    @property
    def label(self) -> str:
        """`namespace/name` for messages, clipped: a reference that fails validation can be huge."""
        return f"{clipped(self.namespace)}/{clipped(self.name)}"


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """A claim's answer; `pods` are the pods it is reserved for, when this call read the claim."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""
    pods: tuple[PodRef, ...] = ()


def check_ref(ref: ClaimRef) -> None:
    """UIDs become file names and names become URL paths: nothing else may reach them."""
    if not _UID.fullmatch(ref.uid):
        raise ClaimError(f"invalid claim UID {quoted(ref.uid)}")
    if not _DNS_LABELISH.fullmatch(ref.namespace) or not _DNS_LABELISH.fullmatch(ref.name):
        raise ClaimError(f"invalid claim namespace/name {quoted(ref.namespace)}/{quoted(ref.name)}")


def prepared_devices(
    driver: str, uid: str, devices: Sequence[ClaimDevice], vnpus: Mapping[str, VnpuRecord] | None = None
) -> tuple[PreparedDevice, ...]:
    """The response devices, with the vNPU records by device name; each request's CDI id goes on its
    first device only. A share (alone in its request) has a CDI device of its own, named after the
    claim, the device and the share."""
    seen: set[str] = set()
    result = []
    for device in devices:
        key = cdi_key(device.request, device.device, device.share_id)
        cdi = () if key in seen else (claim_cdi_id(driver, uid, key),)
        seen.add(key)
        result.append(
            PreparedDevice(
                request_names=(device.request,),
                pool_name=device.pool,
                device_name=device.device,
                physical_id=device.physical_id,
                cdi_device_ids=cdi,
                vnpu=(vnpus or {}).get(device.device),
                share_id=device.share_id,
            )
        )
    return tuple(result)


def kubelet_devices(driver: str, uid: str, devices: Sequence[PreparedDevice]) -> tuple[PreparedDevice, ...]:
    """The devices a Prepare answers the kubelet with: the claim's and, when its CDI spec has a
    claim-wide device, one more entry last, the claim's last device again, that carries only the
    claim-wide CDI id under a request name no container can name. The kubelet gives a container every
    CDI id of the requests it names, or of all entries when it names the whole claim, in this order:
    so the claim-wide id reaches exactly the containers given the whole claim, and is applied last."""
    whole, virtual = requests_of(devices)
    if not devices or not claim_wide_ids(whole, virtual):
        return tuple(devices)
    wide = replace(devices[-1], request_names=(CLAIM_WIDE,), cdi_device_ids=(claim_cdi_id(driver, uid, CLAIM_WIDE),))
    return (*devices, wide)


def cdi_key(request: str, device: str, share_id: str | None) -> str:
    """What a claim's CDI device is named after (with the claim's UID): the request, or for a share
    the device and the share."""
    return request if share_id is None else f"{device}-{share_id}"


def requests_of(devices: Sequence[PreparedDevice]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Each CDI device's whole NPUs (physical ids) and vNPUs (vNPU ids), by `cdi_key`."""
    whole: dict[str, list[int]] = {}
    virtual: dict[str, list[int]] = {}
    for device in devices:
        if device.vnpu is None:
            key = cdi_key(device.request_names[0], device.device_name, device.share_id)
            whole.setdefault(key, []).append(device.physical_id)
        else:
            virtual.setdefault(device.request_names[0], []).append(device.vnpu.vnpu_id)
    return whole, virtual


def assign_ids(devices: Sequence[ClaimDevice], plans: Mapping[int, ChipPlan], taken: set[int]) -> dict[str, VnpuRecord]:
    """vNPU records for a claim's vNPUs: a new one gets the lowest id of its chip's range that no
    live vNPU and no checkpointed claim holds (`taken`, which grows with each id given)."""
    records = {}
    for device in devices:
        wanted = device.vnpu
        if wanted is None:
            continue
        vnpu_id = wanted.vnpu_id
        if vnpu_id is None:
            chip = plans[device.physical_id].chip
            vnpu_id = lowest_free_id(chip.id_range, taken | {v.vnpu_id for v in chip.vnpus})
            if vnpu_id is None:
                first, last = chip.id_range
                raise ClaimError(
                    f"device {device.device}: every vNPU id of npu-{device.physical_id} is in use ({first}-{last})"
                )
        taken.add(vnpu_id)
        records[device.device] = VnpuRecord(device.physical_id, wanted.template, vnpu_id, wanted.origin)
    return records
