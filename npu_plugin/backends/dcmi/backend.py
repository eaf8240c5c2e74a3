"""Discovery, health and vNPUs through Huawei's DCMI library (libdcmi.so), bound with ctypes."""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import TypeVar

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.device import Device, Health, LinkState, device_key, has_roce
from npu_plugin.ascend.vnpu import (
    DESTROY_ALL_ID,
    ChipMode,
    ChipVnpu,
    Vnpu,
    VnpuTemplate,
    default_id_range,
    static_only_reason,
)
from npu_plugin.backends.dcmi import abi
from npu_plugin.backends.dcmi import vnpu as dcmi_vnpu
from npu_plugin.backends.driver_version import DRIVER_VERSION_FILE, read_driver_version
from npu_plugin.backends.npusmi.backend import NpuSmiBackend
from npu_plugin.errors import BackendError, DcmiError, VnpuError

DEFAULT_LIBRARY = "libdcmi.so"
# How long a caller waits for the library while another call runs in it. Longer than any DCMI call
# of a healthy driver (a vNPU create included: npu-smi, whose create makes the same call, is given
# 10 s), far shorter than the kubelet's 45 s Prepare deadline, so a Prepare queued behind a hung
# call still gets an error of its own in time.
DEFAULT_LOCK_TIMEOUT_SECONDS = 15.0

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Slot:
    """Where one die sits in DCMI's id spaces; card_id + device_index address every per-die call."""

    card_id: int
    device_index: int
    logic_id: int
    physical_id: int

    def __str__(self) -> str:
        return f"card {self.card_id} device {self.device_index} (physical id {self.physical_id})"


@dataclass(frozen=True, slots=True)
class _Running:
    """The library call in progress: what a caller that cannot get the library is told it waits
    on."""

    call: str
    args: tuple[object, ...]
    since: float


@dataclass(frozen=True, slots=True)
class _Chip:
    """What a die's chip calls tell: npu-smi's chip name and the family."""

    name: str
    device_type: str


@dataclass(frozen=True, slots=True)
class _Probe:
    """What discovery learnt about one die before chip names are settled."""

    slot: _Slot
    chip: _Chip | None
    ai_core: int | None
    memory: int
    pci_bus_id: str | None
    health: Health
    device_ip: str | None = None
    spod: tuple[int | None, int | None, int | None] = (None, None, None)


class DcmiBackend:
    """NPUs as the DCMI library reports them; one instance owns one loaded library.

    `driver_version_file` is read for the driver version when the library has no
    dcmi_get_driver_version (dcmi_get_dcmi_version is the library's own version, not the driver's).
    `npu_smi` is run only for vNPU templates, which DCMI has no public call for (see dcmi_vnpu).

    The library is called by one thread at a time. A caller waits for it at most `lock_timeout`
    seconds: a driver call that never returns (a hung vNPU create, say) then makes health read
    Unknown and the other methods raise BackendError naming that call, instead of stalling every
    thread behind it; later callers are told at once, and all works again once it returns.
    """

    name = "dcmi"
    host_sysfs = True

    def __init__(
        self,
        library: str | None = None,
        *,
        driver_version_file: Path = DRIVER_VERSION_FILE,
        npu_smi: str = "npu-smi",
        lock_timeout: float | None = None,
    ) -> None:
        self._library = library or DEFAULT_LIBRARY
        self._npu_smi = NpuSmiBackend(npu_smi)
        self._device_types: dict[int, str] = {}
        self._vnpu_notes: set[str] = set()
        self._driver_version_file = driver_version_file
        self._funcs = _bind(_load(self._library), self._library)
        self._card_list_call = next(call for call in abi.CARD_LIST_CALLS if call in self._funcs)
        self._lock = threading.Lock()
        # Read here, not as the parameter's default, so that a test can set the module's value.
        self._lock_timeout = DEFAULT_LOCK_TIMEOUT_SECONDS if lock_timeout is None else lock_timeout
        self._running: _Running | None = None
        # The overdue call already logged, so each hang is reported once when noticed and once when
        # it ends.
        self._overdue: _Running | None = None
        self._overdue_lock = threading.Lock()
        self._initialized = False
        self._closed = False
        self._slots: tuple[_Slot, ...] = ()
        self._failing: dict[int, int] = {}

    def discover(self) -> list[Device]:
        """Every NPU die, sorted by physical id. Raises DcmiError when enumeration itself fails."""
        with self._exclusive():
            self._slots = self._enumerate()
            if not self._slots:
                raise BackendError(f"DCMI ({self._library}) reports no NPU devices")
            driver = self._driver_version()
            probes = [self._probe(slot) for slot in self._slots]
        devices = _settle_chip_names(probes, driver)
        self._device_types = {device.physical_id: device.device_type for device in devices}
        return devices

    def sample(self) -> dict[int, Health]:
        """Health per physical id; a device whose query fails, or every device while the library is
        busy past the lock timeout, is Unknown. Never raises."""
        if not self._acquire():
            self._busy()
            return {slot.physical_id: Health.UNKNOWN for slot in self._slots}
        try:
            slots = self._known_slots()
            if self._closed:
                return {slot.physical_id: Health.UNKNOWN for slot in slots}
            return {slot.physical_id: self._sampled_health(slot) for slot in slots}
        finally:
            self._lock.release()

    def fault_codes(self, physical_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """dcmi_get_device_errorcode_v2 for these dies; a die whose call fails (or a library
        without the call, or one busy past the lock timeout) is left out. Never raises."""
        found = self._per_die(physical_ids, self._fault_codes)
        return {physical_id: codes for physical_id, codes in found.items() if codes}

    def link_states(self, physical_ids: Iterable[int]) -> dict[int, LinkState]:
        """dcmi_get_device_network_health for these dies; a die whose call fails (or a library
        without the call, or one busy past the lock timeout) is left out. Never raises."""
        found = self._per_die(physical_ids, self._link)
        return {physical_id: link for physical_id, link in found.items() if link is not LinkState.UNKNOWN}

    def _per_die(self, physical_ids: Iterable[int], query: Callable[[_Slot], T]) -> dict[int, T]:
        """`query` of each of these dies under the library lock; {} when the library stays busy
        past the lock timeout or is closed."""
        wanted = set(physical_ids)
        if not self._acquire():
            self._busy()
            return {}
        try:
            if self._closed:
                return {}
            return {slot.physical_id: query(slot) for slot in self._known_slots() if slot.physical_id in wanted}
        finally:
            self._lock.release()

    def _link(self, slot: _Slot) -> LinkState:
        result = ctypes.c_uint()
        code = self._call("dcmi_get_device_network_health", slot.card_id, slot.device_index, ctypes.byref(result))
        if code != driver_codes.OK:
            if code != driver_codes.NOT_SUPPORT:
                log.debug("DCMI dcmi_get_device_network_health failed for %s with error code %d", slot, code)
            return LinkState.UNKNOWN
        return abi.link_from_network_health(result.value)

    def _fault_codes(self, slot: _Slot) -> tuple[int, ...]:
        count = ctypes.c_int()
        codes = (ctypes.c_uint * abi.ERROR_CODE_MAX_COUNT)()
        call = "dcmi_get_device_errorcode_v2"
        code = self._call(call, slot.card_id, slot.device_index, ctypes.byref(count), codes, abi.ERROR_CODE_MAX_COUNT)
        if code != driver_codes.OK:
            if code != driver_codes.NOT_SUPPORT:
                log.debug("DCMI %s failed for %s with error code %d", call, slot, code, extra=_about(slot))
            return ()
        return tuple(sorted(set(codes[: max(0, min(count.value, abi.ERROR_CODE_MAX_COUNT))])))

    def hccs_peers(self) -> dict[int, frozenset[int]]:
        """HCCS (or SIO) peers per physical id, for devices the driver answered about; {} when
        unsupported."""
        with self._exclusive():
            slots = self._known_slots()
            if self._closed or len(slots) < 2:
                return {}
            return self._hccs_peers(slots)

    def close(self) -> None:
        """Stop using the library; later discover() raises, sample() reports every device Unknown.

        Does not wait for the library: a call in progress (one that never returns, at worst) ends as
        it would, and the next call sees the flag, so a hung driver call cannot hold up the daemon's
        exit.
        """
        self._closed = True

    # ---- vNPUs ----

    def chip_vnpu(self, physical_id: int) -> ChipVnpu | None:
        """Totals and vNPUs from the driver, templates from npu-smi; None when the driver cannot
        split the chip."""
        with self._exclusive():
            slot = self._slot_of(physical_id)
            facts = dcmi_vnpu.read_chip(self._call, slot.card_id, slot.device_index)
            mode = dcmi_vnpu.read_mode(self._call) if facts is not None else None
            dies = sum(other.card_id == slot.card_id for other in self._slots)
        if facts is None:
            return None
        if mode is None:
            self._note_once(
                "mode", "DCMI dcmi_get_vdevice_mode is missing or fails; container mode is assumed", logging.INFO
            )
        templates, from_npu_smi = self._templates(slot, facts)
        device_type = self._device_types.get(physical_id, "")
        return ChipVnpu(
            physical_id=physical_id,
            mode=mode or ChipMode.CONTAINER,
            totals=facts.totals,
            templates=templates,
            id_range=default_id_range(physical_id, device_type),
            dynamic_supported=from_npu_smi and static_only_reason(device_type, dies) is None,
            vnpus=tuple(Vnpu(physical_id, vnpu.vnpu_id, vnpu.template.name) for vnpu in facts.vnpus),
        )

    def list_vnpus(self, physical_id: int) -> list[Vnpu]:
        """The vNPUs the driver lists for the chip now."""
        with self._exclusive():
            slot = self._slot_of(physical_id)
            facts = dcmi_vnpu.read_chip(self._call, slot.card_id, slot.device_index)
        vnpus = facts.vnpus if facts is not None else ()
        return [Vnpu(physical_id, vnpu.vnpu_id, vnpu.template.name) for vnpu in vnpus]

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        """dcmi_create_vdevice; returns the id the driver gave."""
        with self._exclusive():
            slot = self._slot_of(physical_id)
            return dcmi_vnpu.create(self._call, slot.card_id, slot.device_index, template, vnpu_id)

    def destroy_vnpu(self, physical_id: int, vnpu_id: int) -> None:
        """dcmi_set_destroy_vdevice; the driver's destroy-all id is refused before any call."""
        if vnpu_id == DESTROY_ALL_ID:
            raise VnpuError(
                driver_codes.INVALID_PARAMETER,
                f"refusing to destroy vNPU {vnpu_id} on npu-{physical_id}: "
                "the driver reads that id as every vNPU of the chip",
            )
        with self._exclusive():
            slot = self._slot_of(physical_id)
            dcmi_vnpu.destroy(self._call, slot.card_id, slot.device_index, vnpu_id)

    def _templates(self, slot: _Slot, facts: dcmi_vnpu.ChipFacts) -> tuple[tuple[VnpuTemplate, ...], bool]:
        """npu-smi's templates for the card, and True; without npu-smi, those of the chip's vNPUs,
        and False."""
        try:
            return self._npu_smi.templates(slot.card_id), True
        except BackendError as error:
            self._note_once(
                "templates",
                f"DCMI has no template query and npu-smi cannot list them ({error}); vNPUs are not created on "
                "demand, and only the templates of existing vNPUs are known",
                logging.WARNING,
            )
            return dcmi_vnpu.existing_templates(facts.vnpus), False

    def _note_once(self, key: str, message: str, level: int) -> None:
        """Say a vNPU fact the backend falls back on once per backend, not at every read."""
        if key not in self._vnpu_notes:
            self._vnpu_notes.add(key)
            log.log(level, "%s", message, extra={"error": message})

    def _slot_of(self, physical_id: int) -> _Slot:
        slot = next((slot for slot in self._slots if slot.physical_id == physical_id), None)
        if slot is None:
            raise BackendError(f"DCMI backend: no NPU with physical id {physical_id} was discovered")
        return slot

    # ---- calls ----

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The library to this thread alone; BackendError naming the call in the way when it stays
        busy."""
        if not self._acquire():
            raise BackendError(self._busy())
        try:
            yield
        finally:
            self._lock.release()

    def _acquire(self) -> bool:
        """Take the library: False when it stays busy for the lock timeout, and at once while a call
        already found overdue still runs, so a batch of callers behind one hung call is not kept
        waiting one after another."""
        if self._lock.acquire(blocking=False):
            return True
        overdue = self._overdue
        if overdue is not None and overdue is self._running:
            return False
        return self._lock.acquire(timeout=self._lock_timeout)

    def _busy(self) -> str:
        """Why the library could not be had; logged once per overdue call."""
        running = self._running
        if running is None:  # it returned just as the wait ran out
            return f"DCMI busy: the library stayed in use for more than {self._lock_timeout:g} s"
        what = f"{running.call}{self._subject(running.args)}"
        message = (
            f"DCMI busy: {what} has not returned for {time.monotonic() - running.since:.1f} s (a hung driver? "
            "look for a dev_sq_task thread in D state and at /var/log/npu; driver 25.5 or later is suggested)"
        )
        with self._overdue_lock:
            first = self._overdue is not running
            self._overdue = running
        if first:
            log.warning("%s", message, extra={"error": message})
        return message

    def _subject(self, args: tuple[object, ...]) -> str:
        """` on npu-<physical id>` when the call's first two arguments are a discovered die's card
        and device, as every per-die DCMI call's are; else nothing."""
        slot = next((slot for slot in self._slots if (slot.card_id, slot.device_index) == args[:2]), None)
        return "" if slot is None else f" on npu-{slot.physical_id}"

    def _call(self, call: str, *args: object) -> int:
        if self._closed:
            raise BackendError(f"DCMI backend for {self._library} is closed")
        func = self._funcs.get(call)
        if func is None:
            return driver_codes.NOT_SUPPORT
        running = _Running(call, args, time.monotonic())
        self._running = running
        try:
            return int(func(*args))
        finally:
            self._running = None
            self._returned(running)

    def _returned(self, running: _Running) -> None:
        """Say once that a call reported overdue has returned: the library answers again."""
        if self._overdue is not running:  # the common case, decided without the lock
            return
        with self._overdue_lock:
            if self._overdue is not running:
                return
            self._overdue = None
        took = time.monotonic() - running.since
        log.info(
            "DCMI %s%s returned after %.1f s; the library answers again",
            running.call,
            self._subject(running.args),
            took,
        )

    def _check(self, call: str, *args: object) -> None:
        code = self._call(call, *args)
        if code != driver_codes.OK:
            raise DcmiError(call, code)

    # ---- enumeration: card → device index → logic id → physical id ----

    def _enumerate(self) -> tuple[_Slot, ...]:
        if not self._initialized:
            self._check("dcmi_init")
            self._initialized = True
        slots = tuple(self._slot(card, index) for card in self._card_ids() for index in range(self._device_count(card)))
        _reject_duplicates(slots)
        return slots

    def _card_ids(self) -> list[int]:
        ids = (ctypes.c_int * abi.MAX_CARD_NUM)()
        count = ctypes.c_int()
        self._check(self._card_list_call, ctypes.byref(count), ids, abi.MAX_CARD_NUM)
        if not 0 <= count.value <= abi.MAX_CARD_NUM:
            raise BackendError(f"DCMI {self._card_list_call} reported {count.value} cards")
        return list(ids[: count.value])

    def _device_count(self, card: int) -> int:
        count = ctypes.c_int()
        self._check("dcmi_get_device_num_in_card", card, ctypes.byref(count))
        if count.value < 0:
            raise BackendError(f"DCMI reported {count.value} devices in card {card}")
        return count.value

    def _slot(self, card: int, index: int) -> _Slot:
        logic = ctypes.c_int()
        self._check("dcmi_get_device_logic_id", ctypes.byref(logic), card, index)
        physical = ctypes.c_uint()
        self._check("dcmi_get_device_phyid_from_logicid", logic.value, ctypes.byref(physical))
        return _Slot(card, index, logic.value, physical.value)

    def _known_slots(self) -> tuple[_Slot, ...]:
        if not self._slots and not self._closed:
            try:
                self._slots = self._enumerate()
            except BackendError as err:
                log.warning("DCMI cannot list devices: %s", err, extra={"error": str(err)})
        return self._slots

    # ---- per-device details; a failure leaves the field at its default ----

    def _probe(self, slot: _Slot) -> _Probe:
        chip, ai_core = self._chip(slot)
        health = self._sampled_health(slot)
        probe = _Probe(slot, chip, ai_core, self._memory(slot), self._bus_id(slot), health)
        if chip is None or not has_roce(chip.device_type):
            return probe
        spod = self._super_pod(slot) if chip.device_type == "Ascend910C" else probe.spod
        return replace(probe, device_ip=self._device_ip(slot), spod=spod)

    def _device_ip(self, slot: _Slot) -> str | None:
        """The RoCE port's address, IPv4 first then IPv6 (as mind-cluster asks: the caller sets
        ip_type); None when the port has none or the call fails (said once, by discovery)."""
        for ip_type in (abi.IPADDR_TYPE_V4, abi.IPADDR_TYPE_V6):
            address, mask = abi.IpAddr(ip_type=ip_type), abi.IpAddr(ip_type=ip_type)
            args = (slot.card_id, slot.device_index, abi.ROCE_PORT, 0, ctypes.byref(address), ctypes.byref(mask))
            code = self._call("dcmi_get_device_ip", *args)
            if code != driver_codes.OK:
                log.debug("DCMI dcmi_get_device_ip failed for %s with error code %d", slot, code, extra=_about(slot))
                return None
            if (found := abi.ip_from(address)) is not None:
                return found
        return None

    def _super_pod(self, slot: _Slot) -> tuple[int | None, int | None, int | None]:
        """Super pod id, server index and rack of an Atlas A3 die (dcmi_get_device_info's chip-info
        command); unknown ones None."""
        info = abi.SpodInfo()
        size = ctypes.c_uint(ctypes.sizeof(info))
        command = (abi.MAIN_CMD_CHIP_INF, abi.CHIP_INF_SUB_CMD_SPOD_INFO, ctypes.byref(info), ctypes.byref(size))
        code = self._call("dcmi_get_device_info", slot.card_id, slot.device_index, *command)
        if code != driver_codes.OK:
            _warn_optional("dcmi_get_device_info (super-pod info)", slot, code)
            return None, None, None
        return abi.spod_identity(info)

    def _chip(self, slot: _Slot) -> tuple[_Chip | None, int | None]:
        """Chip name and family; like mind-cluster's devmanager, the v2 call first (its npu_name is
        the real model where the v1 call says plain `Ascend910`), the v1 call when v2 is missing or
        fails, and an A3 board id overriding both."""
        answer = self._chip_info_v2(slot) or self._chip_info_v1(slot)
        if answer is None:
            return None, None
        name, npu_name, ai_core = answer
        try:
            device_type = abi.device_type_from(name, npu_name, self._board_id(slot))
        except ValueError as err:
            log.warning("DCMI reported an unknown chip for %s: %s", slot, err, extra=_about(slot, str(err)))
            return None, ai_core or None
        return _Chip(name, device_type), ai_core or None

    def _chip_info_v2(self, slot: _Slot) -> tuple[str, str, int] | None:
        if "dcmi_get_device_chip_info_v2" not in self._funcs:
            return None
        info = abi.ChipInfoV2()
        code = self._call("dcmi_get_device_chip_info_v2", slot.card_id, slot.device_index, ctypes.byref(info))
        if code != driver_codes.OK:
            log.debug("DCMI dcmi_get_device_chip_info_v2 failed for %s with error code %d; trying v1", slot, code)
            return None
        name = abi.chip_name_from(bytes(info.chip_type), bytes(info.chip_name))
        return name, abi.decode_c_string(bytes(info.npu_name)), info.aicore_cnt

    def _chip_info_v1(self, slot: _Slot) -> tuple[str, str, int] | None:
        info = abi.ChipInfo()
        code = self._call("dcmi_get_device_chip_info", slot.card_id, slot.device_index, ctypes.byref(info))
        if code != driver_codes.OK:
            _warn_optional("dcmi_get_device_chip_info", slot, code)
            return None
        return abi.chip_name_from(bytes(info.chip_type), bytes(info.chip_name)), "", info.aicore_cnt

    def _board_id(self, slot: _Slot) -> int | None:
        info = abi.BoardInfo()
        code = self._call("dcmi_get_device_board_info", slot.card_id, slot.device_index, ctypes.byref(info))
        if code != driver_codes.OK:
            log.debug("DCMI dcmi_get_device_board_info failed for %s with error code %d", slot, code)
            return None
        return int(info.board_id)

    def _memory(self, slot: _Slot) -> int:
        hbm = abi.HbmInfo()
        code = self._call("dcmi_get_device_hbm_info", slot.card_id, slot.device_index, ctypes.byref(hbm))
        if code == driver_codes.OK and hbm.memory_size > 0:
            return abi.megabytes_to_bytes(hbm.memory_size)
        # Cards without HBM (310P) report their DDR through the v3 memory call instead.
        ddr = abi.MemoryInfoV3()
        ddr_code = self._call("dcmi_get_device_memory_info_v3", slot.card_id, slot.device_index, ctypes.byref(ddr))
        if ddr_code == driver_codes.OK and ddr.memory_size > 0:
            return abi.megabytes_to_bytes(ddr.memory_size)
        _warn_optional("dcmi_get_device_hbm_info and dcmi_get_device_memory_info_v3", slot, ddr_code)
        return 0

    def _bus_id(self, slot: _Slot) -> str | None:
        info = abi.PcieInfoAll()
        code = self._call("dcmi_get_device_pcie_info_v2", slot.card_id, slot.device_index, ctypes.byref(info))
        if code != driver_codes.OK:
            _warn_optional("dcmi_get_device_pcie_info_v2", slot, code)
            return None
        try:
            return abi.format_bus_id(info.domain, info.bdf_busid, info.bdf_deviceid, info.bdf_funcid)
        except ValueError as err:
            log.warning("DCMI reported an invalid PCI address for %s: %s", slot, err, extra=_about(slot, str(err)))
            return None

    def _health(self, slot: _Slot) -> tuple[int, Health]:
        word = ctypes.c_uint()
        code = self._call("dcmi_get_device_health", slot.card_id, slot.device_index, ctypes.byref(word))
        return code, abi.health_from_code(word.value) if code == driver_codes.OK else Health.UNKNOWN

    def _sampled_health(self, slot: _Slot) -> Health:
        code, health = self._health(slot)
        previous = self._failing.pop(slot.physical_id, driver_codes.OK)
        if code != driver_codes.OK:
            self._failing[slot.physical_id] = code
            if code != previous:  # once per failure, not once per poll
                log.warning(
                    "DCMI dcmi_get_device_health failed for %s with error code %d",
                    slot,
                    code,
                    extra=_about(slot, f"error code {code}"),
                )
        elif previous != driver_codes.OK:
            log.info("DCMI dcmi_get_device_health answers again for %s", slot, extra=_about(slot))
        return health

    def _driver_version(self) -> str | None:
        """dcmi_get_driver_version, else the driver's version file; never the DCMI library's own
        version."""
        buffer = ctypes.create_string_buffer(abi.VERSION_BUFFER_LEN)
        code = self._call("dcmi_get_driver_version", buffer, abi.VERSION_BUFFER_LEN)
        if code == driver_codes.OK and (version := abi.decode_c_string(buffer.raw)):
            return version
        if code not in (driver_codes.OK, driver_codes.NOT_SUPPORT):
            log.warning(
                "DCMI dcmi_get_driver_version failed with error code %d; reading %s",
                code,
                self._driver_version_file,
                extra={"error": f"error code {code}"},
            )
        return read_driver_version(self._driver_version_file)

    # ---- topology ----

    def _hccs_peers(self, slots: tuple[_Slot, ...]) -> dict[int, frozenset[int]]:
        answered: set[int] = set()
        peers: dict[int, set[int]] = {slot.physical_id: set() for slot in slots}
        for first, second in combinations(slots, 2):
            code, topo = self._topo(first, second)
            if code == driver_codes.NOT_SUPPORT:
                return {}
            if code != driver_codes.OK:
                log.debug("DCMI topology of %s and %s failed with error code %d", first, second, code)
                continue
            answered |= {first.physical_id, second.physical_id}
            if abi.is_hccs_peer(topo):
                peers[first.physical_id].add(second.physical_id)
                peers[second.physical_id].add(first.physical_id)
        return {physical_id: frozenset(peers[physical_id]) for physical_id in sorted(answered)}

    def _topo(self, first: _Slot, second: _Slot) -> tuple[int, int]:
        topo = ctypes.c_int()
        code = self._call(
            "dcmi_get_topo_info_by_device_id",
            first.card_id,
            first.device_index,
            second.card_id,
            second.device_index,
            ctypes.byref(topo),
        )
        return code, topo.value


def _load(library: str) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(library)
    except OSError as err:
        where = " (searched the dynamic loader path)" if "/" not in library else ""
        raise BackendError(f"cannot load DCMI library {library!r}{where}: {err}") from err


def _bind(lib: ctypes.CDLL, library: str) -> dict[str, Callable[..., int]]:
    """The library's DCMI functions with their C signatures; missing optional ones are left out."""
    funcs: dict[str, Callable[..., int]] = {}
    for call, argtypes in abi.SIGNATURES.items():
        func = getattr(lib, call, None)
        if func is not None:
            func.argtypes = argtypes
            func.restype = ctypes.c_int
            funcs[call] = func
    missing = [call for call in abi.REQUIRED_CALLS if call not in funcs]
    if not any(call in funcs for call in abi.CARD_LIST_CALLS):
        missing.append(" or ".join(abi.CARD_LIST_CALLS))
    if missing:
        raise BackendError(f"{library} is not a usable DCMI library: it lacks {', '.join(missing)}")
    return funcs


def _warn_optional(call: str, slot: _Slot, code: int) -> None:
    log.warning(
        "DCMI %s failed for %s with error code %d; leaving it unset",
        call,
        slot,
        code,
        extra=_about(slot, f"error code {code}"),
    )


def _about(slot: _Slot, error: str | None = None) -> dict[str, str]:
    """The structured keys of a log line about one die."""
    keys = {"device": device_key([slot.physical_id])}
    if error is not None:
        keys["error"] = error
    return keys


def _reject_duplicates(slots: Iterable[_Slot]) -> None:
    seen: dict[int, _Slot] = {}
    for slot in slots:
        if (first := seen.setdefault(slot.physical_id, slot)) is not slot:
            raise BackendError(f"DCMI reported physical id {slot.physical_id} for both {first} and {slot}")


def _settle_chip_names(probes: list[_Probe], driver: str | None) -> list[Device]:
    """Devices whose chip info failed take the node's most common chip (nodes are homogeneous)."""
    chips = Counter(probe.chip for probe in probes if probe.chip)
    if probes and not chips:
        raise BackendError("DCMI reported no known chip name for any device")
    devices = []
    for probe in sorted(probes, key=lambda p: p.slot.physical_id):
        chip = probe.chip
        if chip is None:
            chip = chips.most_common(1)[0][0]
            log.warning(
                "assuming chip %s for %s, like the other devices", chip.name, probe.slot, extra=_about(probe.slot)
            )
        devices.append(_device(probe, chip, driver))
    return devices


def _device(probe: _Probe, chip: _Chip, driver: str | None) -> Device:
    slot = probe.slot
    return Device(
        physical_id=slot.physical_id,
        chip_name=chip.name,
        device_type=chip.device_type,
        logic_id=slot.logic_id,
        card_id=slot.card_id,
        chip_id=slot.device_index,
        memory=probe.memory,
        ai_core=probe.ai_core,
        pci_bus_id=probe.pci_bus_id,
        driver_version=driver,
        health=probe.health,
        device_ip=probe.device_ip,
        super_pod_id=probe.spod[0],
        server_index=probe.spod[1],
        rack_id=probe.spod[2],
    )
