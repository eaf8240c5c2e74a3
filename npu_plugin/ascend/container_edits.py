"""What a container gets for a set of devices — the one source both modes render."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from npu_plugin.ascend.device import device_node, vnpu_node

VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
# Ascend's runtime reads ASCEND_VISIBLE_DEVICES as vNPU ids, not physical ones, with this option.
RUNTIME_OPTIONS_ENV = "ASCEND_RUNTIME_OPTIONS"
VIRTUAL_OPTION = "VIRTUAL"
COMMON_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")
DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/include",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
)


class Injection(StrEnum):
    NODES = "nodes"
    RUNTIME = "runtime"


@dataclass(frozen=True, slots=True)
class DeviceNode:
    host_path: str
    container_path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class Mount:
    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    env: tuple[tuple[str, str], ...]
    device_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]


@dataclass(frozen=True, slots=True)
class HostLayout:
    """What exists on this host, probed once at start-up so `container_edits` stays pure."""

    dev_root: str
    injection: Injection
    common_nodes: tuple[str, ...]
    driver_mounts: tuple[str, ...]


def probe_host(dev_root: Path, injection: Injection, mount_driver: bool, host_root: Path = Path("/")) -> HostLayout:
    """Which common device nodes and driver paths exist (the only I/O in this module). The driver
    paths are looked for under `host_root` (a test's stand-in for the host) and keep their own
    names."""
    return HostLayout(
        dev_root=str(dev_root),
        injection=injection,
        common_nodes=tuple(name for name in COMMON_NODES if (dev_root / name).exists()),
        driver_mounts=tuple(p for p in DRIVER_MOUNTS if mount_driver and (host_root / p.lstrip("/")).exists()),
    )


def visible_devices(ids: Iterable[int]) -> str:
    """The ASCEND_VISIBLE_DEVICES value for these device ids: ascending, comma-separated."""
    return ",".join(str(i) for i in sorted(set(ids)))


def visible_env(ids: Iterable[int], *, virtual: bool = False) -> tuple[tuple[str, str], ...]:
    """The environment that names these devices to Ascend's runtime and software (pure)."""
    env: tuple[tuple[str, str], ...] = ((VISIBLE_DEVICES_ENV, visible_devices(ids)),)
    return (*env, (RUNTIME_OPTIONS_ENV, VIRTUAL_OPTION)) if virtual else env


def container_edits(layout: HostLayout, ids: Iterable[int], *, virtual: bool = False) -> ContainerEdits:
    """Env, device nodes and mounts for these devices (pure): whole NPUs by physical id or,
    `virtual`, vNPUs by vNPU id. The container sees a vNPU as /dev/davinci<id>, backed by the host's
    /dev/vdavinci<id>."""
    ids = sorted(set(ids))
    nodes = _device_nodes(layout, [_own_node(i, virtual) for i in ids] + [(n, n) for n in layout.common_nodes])
    return ContainerEdits(env=visible_env(ids, virtual=virtual), device_nodes=nodes, mounts=_driver_mounts(layout))


def split_edits(
    layout: HostLayout, ids: Iterable[int], *, virtual: bool = False
) -> tuple[dict[int, ContainerEdits], ContainerEdits]:
    """`container_edits` in parts a runtime can combine: each device's own node, and the common part
    (shared nodes, driver mounts) that any set of devices needs once (pure).

    Neither part carries ASCEND_VISIBLE_DEVICES: several devices injected together would overwrite
    each other's value, so whoever combines them sets it for the whole set.
    """
    per_device = {
        device_id: ContainerEdits(
            env=(), device_nodes=_device_nodes(layout, [_own_node(device_id, virtual)]), mounts=()
        )
        for device_id in ids
    }
    common = ContainerEdits(
        env=(), device_nodes=_device_nodes(layout, [(n, n) for n in layout.common_nodes]), mounts=_driver_mounts(layout)
    )
    return per_device, common


def _own_node(device_id: int, virtual: bool) -> tuple[str, str]:
    """A device's node as (host name, container name) under /dev."""
    return (vnpu_node(device_id), device_node(device_id)) if virtual else (device_node(device_id),) * 2


def _device_nodes(layout: HostLayout, names: list[tuple[str, str]]) -> tuple[DeviceNode, ...]:
    if layout.injection is not Injection.NODES:
        return ()
    return tuple(DeviceNode(f"{layout.dev_root.rstrip('/')}/{host}", f"/dev/{inside}") for host, inside in names)


def _driver_mounts(layout: HostLayout) -> tuple[Mount, ...]:
    return tuple(Mount(path, path) for path in layout.driver_mounts)
