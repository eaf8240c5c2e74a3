"""The DRA checkpoint: versioned JSON of prepared claims, written atomically."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from npu_plugin.ascend.device import parse_dra_name
from npu_plugin.ascend.vnpu import VnpuOrigin
from npu_plugin.errors import CheckpointError, describe_os_error, quoted
from npu_plugin.host.atomic import write_atomic

log = logging.getLogger(__name__)
VERSION = 1
PREPARE_STARTED, PREPARE_COMPLETED = "PrepareStarted", "PrepareCompleted"
_STATES = (PREPARE_STARTED, PREPARE_COMPLETED)


class VnpuJson(TypedDict):
    physicalId: int
    template: str
    vnpuId: int
    origin: str


class DeviceJson(TypedDict):
    requestNames: list[str]
    poolName: str
    deviceName: str
    physicalId: NotRequired[int]  # absent in checkpoints written before it was recorded
    cdiDeviceIds: list[str]
    vnpu: NotRequired[VnpuJson]  # only for a vNPU; older binaries ignore it
    shareId: NotRequired[str]  # only for a share of a shared chip; absent in checkpoints from before sharing


@dataclass(frozen=True, slots=True)
class VnpuRecord:
    """The vNPU behind a prepared device: `dynamic` ones we create in Prepare and destroy in
    Unprepare, `static` ones existed before and are never destroyed. A dynamic record is written
    before the create call."""

    physical_id: int
    template: str
    vnpu_id: int
    origin: VnpuOrigin

    @property
    def created_by_us(self) -> bool:
        return self.origin is VnpuOrigin.DYNAMIC

    def to_json(self) -> VnpuJson:
        return {
            "physicalId": self.physical_id,
            "template": self.template,
            "vnpuId": self.vnpu_id,
            "origin": self.origin.value,
        }

    @classmethod
    def from_json(cls, raw: Any) -> VnpuRecord:
        if not isinstance(raw, dict):
            raise CheckpointError(f"malformed vnpu record {quoted(raw)}")
        numbers = [raw.get(key) for key in ("physicalId", "vnpuId")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
            raise CheckpointError(f"malformed vnpu record {quoted(raw)}: physicalId and vnpuId must be integers >= 0")
        if not isinstance(raw.get("template"), str):
            raise CheckpointError(f"malformed vnpu record {quoted(raw)}: template is not a string")
        if raw.get("origin") not in (VnpuOrigin.DYNAMIC, VnpuOrigin.STATIC):
            raise CheckpointError(f"malformed vnpu record {quoted(raw)}: origin is not dynamic or static")
        return cls(raw["physicalId"], raw["template"], raw["vnpuId"], VnpuOrigin(raw["origin"]))


class ClaimJson(TypedDict):
    namespace: str
    name: str
    state: str
    devices: list[DeviceJson]


class CheckpointJson(TypedDict):
    version: int
    bootId: str
    claims: dict[str, ClaimJson]


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device prepared for a claim: the request it serves, its name in the slice, the NPU behind
    it, and the CDI ids the kubelet passes to the runtime (on the first device of each request
    only)."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    physical_id: int
    cdi_device_ids: tuple[str, ...]
    vnpu: VnpuRecord | None = None
    share_id: str | None = None  # the allocation's shareID: a device is held per (device, share)

    def to_json(self) -> DeviceJson:
        document: DeviceJson = {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "physicalId": self.physical_id,
            "cdiDeviceIds": list(self.cdi_device_ids),
        }
        if self.vnpu is not None:
            document["vnpu"] = self.vnpu.to_json()
        if self.share_id is not None:
            document["shareId"] = self.share_id
        return document

    @classmethod
    def from_json(cls, raw: Any) -> PreparedDevice:
        if not isinstance(raw, dict):
            raise CheckpointError(f"malformed device entry {quoted(raw)}")
        device_name = _string(raw, "deviceName")
        return cls(
            request_names=_strings(raw, "requestNames"),
            pool_name=_string(raw, "poolName"),
            device_name=device_name,
            physical_id=_physical_id(raw, device_name),
            cdi_device_ids=_strings(raw, "cdiDeviceIds"),
            vnpu=VnpuRecord.from_json(raw["vnpu"]) if "vnpu" in raw else None,
            share_id=_string(raw, "shareId") if "shareId" in raw else None,
        )


def _string(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise CheckpointError(f"malformed device entry {quoted(raw)}: {key} is not a string")
    return value


def _strings(raw: dict[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CheckpointError(f"malformed device entry {quoted(raw)}: {key} is not a list of strings")
    return tuple(value)


def _physical_id(raw: dict[str, Any], device_name: str) -> int:
    """The recorded physical id; an entry from before it was recorded has it only in its device
    name."""
    if "physicalId" not in raw:
        legacy = parse_dra_name(device_name)
        if legacy is None:
            raise CheckpointError(f"malformed device entry {quoted(raw)}: no physicalId and not named npu-<id>")
        return legacy
    value = raw["physicalId"]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointError(f"malformed device entry {quoted(raw)}: physicalId is not a non-negative integer")
    return value


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    namespace: str
    name: str
    state: str
    devices: tuple[PreparedDevice, ...]

    def to_json(self) -> ClaimJson:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state,
            "devices": [d.to_json() for d in self.devices],
        }

    @classmethod
    def from_json(cls, raw: Any) -> ClaimEntry:
        if (
            not isinstance(raw, dict)
            or raw.get("state") not in _STATES
            or not all(isinstance(raw.get(key), str) for key in ("namespace", "name"))
        ):
            raise CheckpointError(f"malformed claim entry {quoted(raw)}")
        devices = raw.get("devices")
        if not isinstance(devices, list):
            raise CheckpointError(f"claim entry without a devices list: {quoted(raw)}")
        return cls(
            raw["namespace"],
            raw["name"],
            raw["state"],
            tuple(PreparedDevice.from_json(d) for d in devices),
        )


@dataclass(slots=True)
class Checkpoint:
    boot_id: str
    claims: dict[str, ClaimEntry] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        document: CheckpointJson = {
            "version": VERSION,
            "bootId": self.boot_id,
            "claims": {uid: entry.to_json() for uid, entry in sorted(self.claims.items())},
        }
        return (json.dumps(document, indent=2) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(f"not JSON: {error}") from None
        if not isinstance(document, dict) or document.get("version") != VERSION:
            version = document.get("version") if isinstance(document, dict) else None
            raise CheckpointError(f"unsupported checkpoint version {quoted(version)} (this build reads {VERSION})")
        claims = document.get("claims")
        if not isinstance(claims, dict):
            raise CheckpointError("`claims` is not an object")
        return cls(str(document.get("bootId", "")), {str(k): ClaimEntry.from_json(v) for k, v in claims.items()})

    def copy(self) -> Checkpoint:
        return Checkpoint(self.boot_id, dict(self.claims))

    def held(self, but: str) -> list[tuple[str, str, str | None]]:
        """(claim UID, device name, share id) of every device the other claims hold (prepared or
        being prepared)."""
        return [
            (uid, d.device_name, d.share_id) for uid, entry in self.claims.items() if uid != but for d in entry.devices
        ]

    def shares_held(self) -> dict[int, int]:
        """How many shares claims hold of each shared chip."""
        held: dict[int, int] = {}
        for entry in self.claims.values():
            for device in entry.devices:
                if device.share_id is not None:
                    held[device.physical_id] = held.get(device.physical_id, 0) + 1
        return held

    def vnpus(self) -> list[tuple[str, VnpuRecord]]:
        """The vNPU records of every claim, with the claim's UID."""
        return [(uid, d.vnpu) for uid, entry in self.claims.items() for d in entry.devices if d.vnpu is not None]

    def held_devices(self) -> set[int]:
        """Physical ids that claims hold (prepared or being prepared)."""
        return {d.physical_id for entry in self.claims.values() for d in entry.devices}


class CheckpointStore:
    """Reads and writes `<state-dir>/checkpoint.json`; callers hold the state-dir lock, except
    `peek`'s.

    While serving, what this daemon last read or wrote is the truth: a checkpoint that turns corrupt
    (or vanishes while it holds claims) is moved aside, logged as an error once per incident, and
    rewritten from memory, so no prepared claim is forgotten and none of its devices handed out
    again. Only at start, with nothing in memory yet, does a corrupt checkpoint mean starting empty.
    Read and write failures (a directory in its place, a full disk) are CheckpointErrors naming the
    path and the errno.
    """

    def __init__(self, state_dir: Path, boot_id: str) -> None:
        self.path = state_dir / "checkpoint.json"
        self.boot_id = boot_id
        self._last_good: Checkpoint | None = None  # None until the first load, at start
        self._incident = False  # the file was found bad and not yet read back good
        self.restored = False  # the last load rewrote the file from memory

    def load(self) -> Checkpoint:
        """The stored checkpoint (a copy the caller may change and `save`)."""
        self.restored = False
        data = self._read()
        if data is None:
            if self._last_good is not None and self._last_good.claims:
                return self._restore("vanished")
            checkpoint = Checkpoint(self.boot_id)
        else:
            try:
                checkpoint = Checkpoint.from_bytes(data)
            except CheckpointError as error:
                aside = self._move_aside()
                if self._last_good is not None:
                    return self._restore(f"is corrupt ({error}); moved aside to {aside}")
                log.error(  # noqa: TRY400 - the cause is in the message; a traceback would only alarm
                    "checkpoint %s is corrupt (%s); moved aside to %s, starting with no prepared claims",
                    self.path,
                    error,
                    aside,
                    extra={"error": str(error)},
                )
                checkpoint = Checkpoint(self.boot_id)
        if checkpoint.boot_id != self.boot_id:
            log.info(
                "checkpoint is from an earlier boot; claims stay reserved until the kubelet prepares or "
                "unprepares them again"
            )
            checkpoint.boot_id = self.boot_id
        self._incident = False
        self._last_good = checkpoint.copy()
        return checkpoint

    def _read(self) -> bytes | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # never a file a symlink names
            with os.fdopen(fd, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CheckpointError(f"cannot read the checkpoint: {describe_os_error(error, self.path)}") from None

    def _move_aside(self) -> Path:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            self.path.rename(aside)
        except OSError as error:
            raise CheckpointError(f"cannot move the corrupt checkpoint aside: {describe_os_error(error)}") from None
        return aside

    def _restore(self, what_happened: str) -> Checkpoint:
        assert self._last_good is not None
        if not self._incident:
            self._incident = True
            log.error(
                "checkpoint %s %s while serving; keeping the %d claim(s) this daemon holds in memory and "
                "writing them back",
                self.path,
                what_happened,
                len(self._last_good.claims),
                extra={"error": f"checkpoint {what_happened}"},
            )
        checkpoint = self._last_good.copy()
        self.save(checkpoint)
        self.restored = True
        return checkpoint.copy()

    def peek(self) -> Checkpoint:
        """The checkpoint as stored, read without the lock and without side effects: writes are
        atomic renames, so a reader always sees a whole file. When it cannot be read (missing,
        corrupt, unreadable), what this daemon last read or wrote, which is what the next locked
        load restores; empty before the first."""
        try:
            data = self._read()
            if data is not None:
                return Checkpoint.from_bytes(data)
        except CheckpointError:
            pass
        last = self._last_good
        return last.copy() if last is not None else Checkpoint(self.boot_id)

    def completed_claims(self) -> set[str]:
        """UIDs held as completed, read without the lock (see `peek`)."""
        return {uid for uid, entry in self.peek().claims.items() if entry.state == PREPARE_COMPLETED}

    def save(self, checkpoint: Checkpoint) -> None:
        try:
            write_atomic(self.path, checkpoint.to_bytes(), mode=0o600)
        except OSError as error:
            raise CheckpointError(f"cannot write the checkpoint: {describe_os_error(error, self.path)}") from None
        self._last_good = checkpoint.copy()
