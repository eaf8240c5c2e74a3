"""The fake backend's simulated vNPU hardware: a persistent state file with the driver's create and
destroy rules.

The state file (`--fake-vnpu-state`) is JSON, written atomically:

{"bootId": "...", "recover": true, "vnpus": {"0": [{"vnpuId": 100, "template": "vir05_1c_16g"}]},
"faults": {}}

It outlives the daemon, as vNPUs outlive it on real hardware: a missing file starts from the
inventory's `existing` vNPUs, and a file written under another boot id is a reboot (the vNPUs come
back only when `recover` is true, as with the driver's /etc/vnpu.cfg). Each vNPU has a file
`<dev-root>/vdavinci<id>` standing for its device node: a character device with the numbers of
`<dev-root>/davinci_manager` when that is one (a real node's runtime resolves CDI device nodes to
their numbers, so the local cluster's fake NPUs are character devices), else a regular file. Tests
edit the state file, between runs or while serving, to set the fault knobs in `faults`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.device import vnpu_node
from npu_plugin.ascend.vnpu import AICORE, DESTROY_ALL_ID, ChipMode, ChipVnpu, Vnpu
from npu_plugin.errors import VnpuError, VnpuNotFoundError
from npu_plugin.host.atomic import make_directories, write_atomic

log = logging.getLogger(__name__)

MAX_VNPUS_PER_CHIP = 32  # DCMI_SOC_SPLIT_MAX
# The media units the driver checks before a create, on 310P and 910B only.
_MEDIA = ("vpc", "venc", "vdec", "jpegd", "jpege")
_MEDIA_CHECKED = ("Ascend310P", "Ascend910B")
_FAULTS = ("createError", "createErrorCount", "createDelaySeconds", "hangCreate", "destroyBusy", "nodeDelaySeconds")
MAX_STATE_BYTES = 2**20
# How often a hung create (hangCreate) looks whether the knob was cleared: a test double's poll,
# never the daemon's.
HANG_CHECK_SECONDS = 0.1


@dataclass(slots=True)
class HardwareState:
    """The simulated hardware: its boot, whether vNPUs survive a reboot, the vNPUs per chip and the
    fault knobs."""

    boot_id: str
    recover: bool = True
    vnpus: dict[int, list[Vnpu]] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)

    def all_vnpus(self) -> list[Vnpu]:
        return [vnpu for chip in self.vnpus.values() for vnpu in chip]


def _whole(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{what}: expected an integer >= {low}, got {value!r}")
    return value


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 3600:
        raise ValueError(f"{what}: expected seconds from 0 to 3600, got {value!r}")
    return float(value)


def _check_faults(faults: Any) -> dict[str, Any]:
    if not isinstance(faults, dict):
        raise ValueError(f"faults: expected an object, got {faults!r}")
    for key, value in faults.items():
        if key not in _FAULTS:
            raise ValueError(f"faults.{key}: unknown knob (allowed: {', '.join(_FAULTS)})")
        if key == "createError" and (isinstance(value, bool) or not isinstance(value, int) or value >= 0):
            raise ValueError(f"faults.createError: expected a negative DCMI code like -8005, got {value!r}")
        if key in ("createErrorCount", "destroyBusy"):
            _whole(value, f"faults.{key}", low=1 if key == "createErrorCount" else 0)
        if key in ("createDelaySeconds", "nodeDelaySeconds"):
            _seconds(value, f"faults.{key}")
        if key == "hangCreate" and not isinstance(value, bool):
            if not isinstance(value, list) or not value:
                raise ValueError(f"faults.hangCreate: expected true, false or a list of physical ids, got {value!r}")
            for index, physical_id in enumerate(value):
                _whole(physical_id, f"faults.hangCreate[{index}]")
    return dict(faults)


def _hangs(faults: Mapping[str, Any], physical_id: int) -> bool:
    """Whether `hangCreate` hangs a create on the chip: true hangs every create, a list those on its
    chips."""
    knob = faults.get("hangCreate", False)
    return knob is True or (isinstance(knob, list) and physical_id in knob)


def _parse_vnpus(chips: Any) -> dict[int, list[Vnpu]]:
    if not isinstance(chips, dict):
        raise ValueError(f"vnpus: expected an object of physical id -> list, got {chips!r}")
    vnpus: dict[int, list[Vnpu]] = {}
    seen: set[int] = set()
    for key, entries in chips.items():
        if not key.isdigit():
            raise ValueError(f"vnpus: {key!r} is not a physical id")
        if not isinstance(entries, list):
            raise ValueError(f"vnpus.{key}: expected a list, got {entries!r}")
        for index, entry in enumerate(entries):
            where = f"vnpus.{key}[{index}]"
            if not isinstance(entry, dict) or entry.keys() != {"vnpuId", "template"}:
                raise ValueError(f"{where}: expected {{vnpuId, template}}, got {entry!r}")
            vnpu_id = _whole(entry["vnpuId"], f"{where}.vnpuId")
            if not isinstance(entry["template"], str) or not entry["template"]:
                raise ValueError(f"{where}.template: expected a template name, got {entry['template']!r}")
            if vnpu_id in seen:
                raise ValueError(f"{where}.vnpuId: {vnpu_id} is used twice (an id is unique per server)")
            seen.add(vnpu_id)
            vnpus.setdefault(int(key), []).append(Vnpu(int(key), vnpu_id, entry["template"]))
    return vnpus


def parse_state(text: str) -> HardwareState:
    """The state file's content; ValueError saying which key is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    if not isinstance(document, dict):
        raise ValueError("expected a JSON object with bootId, recover, vnpus and faults")
    unknown = document.keys() - {"bootId", "recover", "vnpus", "faults"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r} (allowed: bootId, recover, vnpus, faults)")
    boot_id = document.get("bootId")
    if not isinstance(boot_id, str) or not boot_id:
        raise ValueError(f"bootId: expected a non-empty string, got {boot_id!r}")
    recover = document.get("recover", True)
    if not isinstance(recover, bool):
        raise ValueError(f"recover: expected true or false, got {recover!r}")
    vnpus = _parse_vnpus(document.get("vnpus", {}))
    return HardwareState(boot_id, recover, vnpus, _check_faults(document.get("faults", {})))


def render_state(state: HardwareState) -> bytes:
    document = {
        "bootId": state.boot_id,
        "recover": state.recover,
        "vnpus": {
            str(physical_id): [{"vnpuId": v.vnpu_id, "template": v.template} for v in vnpus]
            for physical_id, vnpus in sorted(state.vnpus.items())
            if vnpus
        },
        "faults": state.faults,
    }
    return (json.dumps(document, indent=2) + "\n").encode()


@dataclass(frozen=True, slots=True)
class FakeChip:
    """What the inventory says about a chip: its vNPU facts and its family (the driver's checks
    depend on it)."""

    vnpu: ChipVnpu
    device_type: str


class FakeVnpuHardware:
    """The driver's create and destroy, over the state file (`path`) or, without one, over memory
    and without device nodes.

    `chips` gives the inventory's current chips. Every call re-reads the file, so edits made while
    serving take effect at the next call; a corrupt file fails the call with a VnpuError naming the
    file and changes nothing. Calls are serialised: the daemon calls from worker threads. A create
    hung by `hangCreate` waits outside that lock, as a hung driver call does not stop the driver's
    other calls, and returns once the knob is cleared.
    """

    def __init__(
        self, path: Path | None, dev_root: Path, boot_id: str, chips: Callable[[], Mapping[int, FakeChip]]
    ) -> None:
        self.path, self._dev_root, self._boot_id, self._chips = path, dev_root, boot_id, chips
        self._lock = threading.Lock()
        self._memory: HardwareState | None = None

    # ---- queries

    def vnpus(self, physical_id: int) -> list[Vnpu]:
        with self._lock:
            return list(self._load().vnpus.get(physical_id, []))

    def check(self) -> None:
        """Read the state (creating it on first use); VnpuError when it is corrupt."""
        with self._lock:
            self._load()

    # ---- the driver's operations

    def create(self, physical_id: int, template: str, vnpu_id: int) -> int:
        with self._lock:
            vnpu_id, hang = self._create(physical_id, template, vnpu_id)
        if hang:
            # Outside the lock, as a driver call hangs: the fake's other calls go on meanwhile.
            log.warning(
                "fake vNPU hardware: create vNPU %s id %d on npu-%d made the vNPU and now hangs (hangCreate)",
                template,
                vnpu_id,
                physical_id,
            )
            while not self._hang_cleared(physical_id):
                time.sleep(HANG_CHECK_SECONDS)
            log.info("fake vNPU hardware: hangCreate was cleared; the create of vNPU %d returns", vnpu_id)
        return vnpu_id

    def _create(self, physical_id: int, template: str, vnpu_id: int) -> tuple[int, bool]:
        """Make the vNPU; its id, and whether the create is to hang now."""
        state = self._load()
        chip = self._chip(physical_id)
        where = f"create vNPU {template} id {vnpu_id} on npu-{physical_id}"
        if chip.vnpu.mode is not ChipMode.CONTAINER:
            raise VnpuError(
                driver_codes.OPER_NOT_PERMITTED, f"{where}: the chip is in {chip.vnpu.mode} mode, not container"
            )
        if (code := state.faults.get("createError")) is not None:
            self._count_down(state, "createErrorCount", "createError")
            raise VnpuError(code, f"{where}: injected failure (faults.createError)")
        spec = chip.vnpu.template(template)
        if spec is None:
            known = ", ".join(t.name for t in chip.vnpu.templates) or "none"
            raise VnpuError(driver_codes.INVALID_PARAMETER, f"{where}: unknown template (the chip has: {known})")
        vnpu_id = self._free_id(state, chip.vnpu, vnpu_id, where)
        held = state.vnpus.get(physical_id, [])
        if len(held) >= MAX_VNPUS_PER_CHIP:
            raise VnpuError(
                driver_codes.INVALID_PARAMETER, f"{where}: the chip already holds {MAX_VNPUS_PER_CHIP} vNPUs"
            )
        self._check_resources(chip, [*(v.template for v in held), template], where)
        delay = state.faults.get("createDelaySeconds", 0)
        if delay:
            time.sleep(delay)
        state.vnpus.setdefault(physical_id, []).append(Vnpu(physical_id, vnpu_id, template))
        self._save(state)
        self._make_node(vnpu_id, state.faults.get("nodeDelaySeconds", 0))
        return vnpu_id, _hangs(state.faults, physical_id)

    def _hang_cleared(self, physical_id: int) -> bool:
        """Whether the state file's `hangCreate` no longer covers the chip (a corrupt file keeps the
        create hanging)."""
        try:
            with self._lock:
                return not _hangs(self._load().faults, physical_id)
        except VnpuError:
            return False

    def destroy(self, physical_id: int, vnpu_id: int) -> None:
        with self._lock:
            state = self._load()
            where = f"destroy vNPU id {vnpu_id} on npu-{physical_id}"
            held = state.vnpus.get(physical_id, [])
            if vnpu_id == DESTROY_ALL_ID:
                doomed = list(held)  # what the driver does with this id: every vNPU of the chip goes
            else:
                doomed = [v for v in held if v.vnpu_id == vnpu_id]
                if not doomed:
                    raise VnpuNotFoundError(driver_codes.DEVICE_NOT_EXIST, f"{where}: no such vNPU")
            if state.faults.get("destroyBusy"):
                self._count_down(state, "destroyBusy")
                raise VnpuError(driver_codes.RESOURCE_OCCUPIED, f"{where}: the vNPU is in use (faults.destroyBusy)")
            state.vnpus[physical_id] = [v for v in held if v not in doomed]
            self._save(state)
            for vnpu in doomed:
                self._remove_node(vnpu.vnpu_id)

    # ---- the rules

    def _chip(self, physical_id: int) -> FakeChip:
        chip = self._chips().get(physical_id)
        if chip is None:
            raise VnpuError(
                driver_codes.DEVICE_NOT_EXIST, f"npu-{physical_id} has no vNPU support in the fake inventory"
            )
        return chip

    def _free_id(self, state: HardwareState, chip: ChipVnpu, vnpu_id: int, where: str) -> int:
        first, last = chip.id_range
        used = {v.vnpu_id for v in state.all_vnpus()}
        if vnpu_id == driver_codes.ANY_VNPU_ID:
            free = [i for i in range(first, last + 1) if i not in used]
            if not free:
                raise VnpuError(driver_codes.INVALID_PARAMETER, f"{where}: every id {first}-{last} is in use")
            return free[0]
        if vnpu_id == DESTROY_ALL_ID or not first <= vnpu_id <= last:
            raise VnpuError(
                driver_codes.INVALID_PARAMETER, f"{where}: the id is outside the chip's range {first}-{last}"
            )
        if vnpu_id in used:
            raise VnpuError(driver_codes.INVALID_PARAMETER, f"{where}: the id is in use")
        return vnpu_id

    @staticmethod
    def _check_resources(chip: FakeChip, templates: list[str], where: str) -> None:
        """Free ≥ needed for AI cores, for AI CPUs when the chip reports them, and for the media
        units on 310P and 910B: the sums npu-smi checks. Memory and PNGD are not checked."""
        checked = [AICORE, "aicpu", *(_MEDIA if chip.device_type in _MEDIA_CHECKED else ())]
        for resource in (name for name in checked if name in chip.vnpu.totals):
            needed = Decimal(0)
            for name in templates:
                spec = chip.vnpu.template(name)
                if spec is not None:
                    needed += Decimal(spec.aicore) if resource == AICORE else spec.uses.get(resource, Decimal(0))
            total = chip.vnpu.totals[resource]
            if needed > total:
                raise VnpuError(
                    driver_codes.INNER_ERR,
                    f"{where}: check {resource} num failed: {needed} needed in all, the chip has {total}",
                )

    def _count_down(self, state: HardwareState, counter: str, *knobs: str) -> None:
        """One armed fault used: the counter goes down in the file, and the knobs go when it reaches
        0."""
        remaining = int(state.faults.get(counter, 1)) - 1
        if remaining > 0:
            state.faults[counter] = remaining
        else:
            for knob in (counter, *knobs):
                state.faults.pop(knob, None)
        self._save(state)

    # ---- the state file

    def _load(self) -> HardwareState:
        if self.path is None:
            if self._memory is None:
                self._memory = self._initial()
            return self._memory
        try:
            with self.path.open("rb") as file:
                data = file.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            state = self._initial()
            make_directories(self.path.parent, 0o750)
            self._save(state)
            self._make_nodes(state)
            return state
        except OSError as error:
            raise VnpuError(
                driver_codes.INNER_ERR, f"fake vNPU state {self.path}: cannot read: {error.strerror}"
            ) from None
        try:
            if len(data) > MAX_STATE_BYTES:
                raise ValueError(f"larger than {MAX_STATE_BYTES // 2**20} MiB")
            state = parse_state(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise VnpuError(driver_codes.INNER_ERR, f"fake vNPU state {self.path} is corrupt: {error}") from None
        if state.boot_id != self._boot_id:
            self._reboot(state)
        return state

    def _initial(self) -> HardwareState:
        chips = self._chips()
        return HardwareState(self._boot_id, vnpus={p: list(c.vnpu.vnpus) for p, c in chips.items() if c.vnpu.vnpus})

    def _reboot(self, state: HardwareState) -> None:
        """The node rebooted since the state was written: the driver re-creates the vNPUs from its
        recovery config when `recover` is on; otherwise they are gone."""
        log.info(
            "fake vNPU hardware: the node rebooted; %s its vNPUs",
            "recovering" if state.recover else "dropping",
            extra={"recover": state.recover},
        )
        if not state.recover:
            for vnpu in state.all_vnpus():
                self._remove_node(vnpu.vnpu_id)
            state.vnpus.clear()
        state.boot_id = self._boot_id
        self._save(state)
        self._make_nodes(state)

    def _save(self, state: HardwareState) -> None:
        if self.path is not None:
            write_atomic(self.path, render_state(state), 0o600)

    # ---- device nodes

    def _node(self, vnpu_id: int) -> Path:
        return self._dev_root / vnpu_node(vnpu_id)

    def _remove_node(self, vnpu_id: int) -> None:
        if self.path is not None:
            self._node(vnpu_id).unlink(missing_ok=True)

    def _make_nodes(self, state: HardwareState) -> None:
        for vnpu in state.all_vnpus():
            self._make_node(vnpu.vnpu_id, 0)

    def _make_node(self, vnpu_id: int, delay: float) -> None:
        if self.path is None:  # a look at the hardware (`inventory`): the host's device nodes are not ours
            return
        if delay:  # udev making the node a while after the driver returned
            timer = threading.Timer(delay, self._make_node, (vnpu_id, 0))
            timer.daemon = True
            timer.start()
            return
        make_directories(self._dev_root, 0o755)
        numbers = _character_device(self._dev_root / "davinci_manager")
        with contextlib.suppress(FileExistsError):
            if numbers is None:
                self._node(vnpu_id).touch(exist_ok=False)
            else:
                os.mknod(self._node(vnpu_id), 0o666 | stat.S_IFCHR, numbers)


def _character_device(path: Path) -> int | None:
    """The device numbers of `path` when it is a character device, else None."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_rdev if stat.S_ISCHR(status.st_mode) else None
