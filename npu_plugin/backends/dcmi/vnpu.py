"""vNPU calls into a loaded DCMI library: a chip's totals and vNPUs, the mode, create and destroy.

`call` is the backend's bound caller (`DcmiBackend._call`): it answers NOT_SUPPORT for a function
the library does not export. Totals and vNPU ids come from `dcmi_get_device_info(card, device, 52,
1)`, each vNPU from sub-command 0. DCMI has no public template query: the backend takes templates
from npu-smi.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.vnpu import ChipMode, VnpuTemplate
from npu_plugin.backends.dcmi import abi
from npu_plugin.errors import BackendError, DcmiError, VnpuError, VnpuNotFoundError

Call = Callable[..., int]

_TEMPLATE_NAME_MAX = 31  # dcmi_create_vdev_res_stru.template_name is 32 bytes with its NUL


@dataclass(frozen=True, slots=True)
class ExistingVnpu:
    """A vNPU as the driver reports it: its id, and its template's name and figures."""

    vnpu_id: int
    template: VnpuTemplate


@dataclass(frozen=True, slots=True)
class ChipFacts:
    """What sub-commands 1 and 0 say about a chip: its totals (NA ones left out) and its vNPUs."""

    totals: dict[str, Decimal]
    vnpus: tuple[ExistingVnpu, ...]


def read_chip(call: Call, card: int, device: int) -> ChipFacts | None:
    """Totals and vNPUs of a chip; None when the driver cannot split it (NOT_SUPPORT)."""
    total = abi.SocTotalResource()
    code = _device_info(call, card, device, abi.VDEV_SUB_CMD_TOTAL, total)
    if code == driver_codes.NOT_SUPPORT:
        return None
    if code != driver_codes.OK:
        raise DcmiError(f"dcmi_get_device_info(card {card}, device {device}, 52, 1)", code)
    try:
        ids = abi.vdev_ids(total)
    except ValueError as error:
        raise BackendError(f"DCMI dcmi_get_device_info(card {card}, device {device}, 52, 1): {error}") from None
    vnpus = (read_vnpu(call, card, device, vnpu_id) for vnpu_id in ids)
    return ChipFacts(abi.resources(total.computing, total.media), tuple(v for v in vnpus if v is not None))


def read_vnpu(call: Call, card: int, device: int, vnpu_id: int) -> ExistingVnpu | None:
    """One vNPU through sub-command 0; None when it was destroyed since the chip listed it."""
    query = abi.VdevQuery(vdev_id=vnpu_id)
    code = _device_info(call, card, device, abi.VDEV_SUB_CMD_ONE, query)
    if code == driver_codes.DEVICE_NOT_EXIST:
        return None
    if code != driver_codes.OK:
        raise DcmiError(f"dcmi_get_device_info(card {card}, device {device}, 52, 0) of vNPU {vnpu_id}", code)
    info = query.query_info
    found = abi.resources(info.computing, info.media)
    template = VnpuTemplate(
        name=abi.decode_c_string(info.name),
        aicore=int(found.get("aicore", 0)),
        memory=abi.vnpu_memory_bytes(info.computing.memory_size),
        uses=abi.template_uses(found),
    )
    return ExistingVnpu(vnpu_id, template)


def read_mode(call: Call) -> ChipMode | None:
    """The host's vNPU mode from dcmi_get_vdevice_mode; None when the library does not export or
    answer it."""
    mode = ctypes.c_int()
    if call("dcmi_get_vdevice_mode", ctypes.byref(mode)) != driver_codes.OK:
        return None
    return {abi.VDEVICE_MODE_CONTAINER: ChipMode.CONTAINER, abi.VDEVICE_MODE_VM: ChipMode.VM}.get(
        mode.value, ChipMode.UNSUPPORTED
    )


def create(call: Call, card: int, device: int, template: str, vnpu_id: int) -> int:
    """dcmi_create_vdevice with the wanted id and any vGroup; the id the driver gave, or VnpuError
    with its code."""
    name = template.encode()
    where = f"{template} (id {vnpu_id}) on card {card} device {device}"
    if len(name) > _TEMPLATE_NAME_MAX:
        raise VnpuError(driver_codes.INVALID_PARAMETER, f"template name of {where} is too long for DCMI")
    request = abi.CreateVdevRes(vdev_id=vnpu_id, vfg_id=abi.VFG_ID_ANY, template_name=name)
    made = abi.CreateVdevOut()
    code = call("dcmi_create_vdevice", card, device, ctypes.byref(request), ctypes.byref(made))
    if code != driver_codes.OK:
        raise VnpuError(code, f"DCMI dcmi_create_vdevice of {where} failed")
    return int(made.vdev_id)


def destroy(call: Call, card: int, device: int, vnpu_id: int) -> None:
    """dcmi_set_destroy_vdevice; VnpuNotFoundError when the chip has no such vNPU. The caller
    refuses 0xffff."""
    code = call("dcmi_set_destroy_vdevice", card, device, vnpu_id)
    where = f"vNPU {vnpu_id} on card {card} device {device}"
    if code == driver_codes.DEVICE_NOT_EXIST:
        raise VnpuNotFoundError(code, f"DCMI dcmi_set_destroy_vdevice: there is no {where}")
    if code != driver_codes.OK:
        raise VnpuError(code, f"DCMI dcmi_set_destroy_vdevice of {where} failed")


def existing_templates(vnpus: Iterable[ExistingVnpu]) -> tuple[VnpuTemplate, ...]:
    """The templates of the chip's vNPUs, each once: all DCMI can tell without npu-smi. Memory is
    what the vNPU was given, which on 910B is less than the template's nominal figure."""
    by_name: dict[str, VnpuTemplate] = {}
    for vnpu in vnpus:
        by_name.setdefault(vnpu.template.name, vnpu.template)
    return tuple(by_name.values())


def _device_info(call: Call, card: int, device: int, sub_command: int, buffer: ctypes.Structure) -> int:
    size = ctypes.c_uint(ctypes.sizeof(buffer))
    return call(
        "dcmi_get_device_info",
        card,
        device,
        abi.MAIN_CMD_VDEV_MNG,
        sub_command,
        ctypes.byref(buffer),
        ctypes.byref(size),
    )
