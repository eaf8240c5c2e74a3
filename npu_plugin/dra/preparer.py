"""NodePrepareResources / NodeUnprepareResources semantics: checkpoint, CDI files, the state lock."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_plugin.atomic import remove_leftovers
from npu_plugin.cdi.files import (
    claim_spec_files,
    claim_spec_path,
    remove_claim_spec,
    remove_claim_spec_leftovers,
    write_claim_spec,
)
from npu_plugin.cdi.spec import claim_cdi_id
from npu_plugin.dra.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    CheckpointStore,
    ClaimEntry,
    PreparedDevice,
)
from npu_plugin.dra.claims import ClaimDevice, claim_devices
from npu_plugin.edits import HostLayout
from npu_plugin.errors import CdiError, CheckpointError, ClaimError, NpuPluginError, clipped, describe_os_error, quoted
from npu_plugin.inventory import Snapshot
from npu_plugin.ownership import Owner

log = logging.getLogger(__name__)
LOCK_MODE = 0o600
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
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


FetchClaim = Callable[[str, str], Mapping[str, Any]]


def check_ref(ref: ClaimRef) -> None:
    """UIDs become file names and names become URL paths: nothing else may reach them."""
    if not _UID.fullmatch(ref.uid):
        raise ClaimError(f"invalid claim UID {quoted(ref.uid)}")
    if not _DNS_LABELISH.fullmatch(ref.namespace) or not _DNS_LABELISH.fullmatch(ref.name):
        raise ClaimError(f"invalid claim namespace/name {quoted(ref.namespace)}/{quoted(ref.name)}")


def prepared_devices(driver: str, uid: str, devices: Sequence[ClaimDevice]) -> tuple[PreparedDevice, ...]:
    """The response devices; each request's CDI id goes on its first device only."""
    seen: set[str] = set()
    result = []
    for device in devices:
        cdi = () if device.request in seen else (claim_cdi_id(driver, uid, device.request),)
        seen.add(device.request)
        result.append(
            PreparedDevice(
                request_names=(device.request,),
                pool_name=device.pool,
                device_name=device.device,
                physical_id=device.physical_id,
                cdi_device_ids=cdi,
            )
        )
    return tuple(result)


def requests_of(devices: Sequence[PreparedDevice]) -> dict[str, list[int]]:
    requests: dict[str, list[int]] = {}
    for device in devices:
        requests.setdefault(device.request_names[0], []).append(device.physical_id)
    return requests


class Preparer:
    """Blocking; the DRA service runs it in a worker thread. One batch at a time holds the state lock,
    which also serialises an overlapping old and new daemon during a rolling update."""

    def __init__(
        self,
        *,
        driver: str,
        pool: str,
        cdi_root: Path,
        state_dir: Path,
        layout: HostLayout,
        store: CheckpointStore,
        snapshot: Callable[[], Snapshot],
        fetch_claim: FetchClaim,
    ) -> None:
        self.driver, self.pool = driver, pool
        self.cdi_root, self.layout = cdi_root, layout
        self.store, self._snapshot, self._fetch = store, snapshot, fetch_claim
        self._lock_path = state_dir / "prepare.lock"
        self._unaccounted: set[str] = set()  # claims whose specs exist but no checkpoint we read knows
        self.prepared_claims = 0  # completed claims as of the last locked section, for metrics

    @contextlib.contextmanager
    def locked(self) -> Iterator[Checkpoint]:
        """The checkpoint under the state lock; CheckpointError when either cannot be read."""
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            checkpoint = self.store.load()
            if self.store.restored:
                self._note_unaccounted(checkpoint)
            yield checkpoint
            self.prepared_claims = sum(e.state == PREPARE_COMPLETED for e in checkpoint.claims.values())
        finally:
            os.close(fd)  # closing releases the lock

    def _open_lock(self) -> int:
        # Never through a symlink (a planted one would make us create its target), never left to the umask.
        try:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_MODE)
        except OSError as error:
            raise CheckpointError(f"cannot open the state lock: {describe_os_error(error, self._lock_path)}") from None
        os.fchmod(fd, LOCK_MODE)
        return fd

    def _note_unaccounted(self, checkpoint: Checkpoint) -> None:
        """After a rewrite from memory: claim specs of claims the checkpoint does not know were prepared by
        another daemon of a rolling update since we last read it, on devices we cannot account for."""
        unknown = set(claim_spec_files(self.cdi_root, self.driver)) - checkpoint.claims.keys()
        if unknown - self._unaccounted:
            log.error(
                "--cdi-root holds specs of claims the rewritten checkpoint does not know (%s); no new claim is "
                "prepared until they are unprepared",
                ", ".join(sorted(unknown)),
            )
        self._unaccounted |= unknown

    def _unaccounted_claims(self, checkpoint: Checkpoint) -> set[str]:
        if self._unaccounted:
            present = claim_spec_files(self.cdi_root, self.driver)
            self._unaccounted = {uid for uid in self._unaccounted if uid in present and uid not in checkpoint.claims}
        return self._unaccounted

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        fetched: dict[str, Mapping[str, Any]] = {}
        # Claims prepared before are answered from the checkpoint, so they need no API (it may be down); the
        # others are read before taking the lock, so a slow API holds up no other Prepare.
        completed = self.store.completed_claims()
        for ref in refs:
            try:
                check_ref(ref)
                if ref.uid not in completed:
                    fetched[ref.uid] = self._fetch(ref.namespace, ref.name)
            except NpuPluginError as error:
                results[ref.uid] = PrepareResult(error=f"claim {ref.label}: {error}")
        try:
            with self.locked() as checkpoint:
                started = self._start(refs, fetched, checkpoint, results)
                # PrepareStarted reaches the disk before any CDI file does: after a crash the record
                # says which claims were in flight, and start-up drops them together with their files.
                if any(checkpoint.claims[ref.uid].state == PREPARE_STARTED for ref in started):
                    self.store.save(checkpoint)
                for ref in started:
                    results[ref.uid] = self._complete(ref, checkpoint)
                if started:
                    self.store.save(checkpoint)
        except CheckpointError as error:
            # Nothing of this batch was recorded as completed: every claim not refused already fails with it.
            log.error("prepare failed: %s", error, extra={"error": str(error)})  # noqa: TRY400
            for ref in refs:
                if ref.uid not in results or not results[ref.uid].error:
                    results[ref.uid] = PrepareResult(error=f"claim {ref.label}: {error}")
        return results

    def _start(
        self,
        refs: Sequence[ClaimRef],
        fetched: Mapping[str, Mapping[str, Any]],
        checkpoint: Checkpoint,
        results: dict[str, PrepareResult],
    ) -> list[ClaimRef]:
        started = []
        for ref in refs:
            if ref.uid in results:
                continue
            entry = checkpoint.claims.get(ref.uid)
            if entry is None or entry.state != PREPARE_COMPLETED:
                try:
                    if unaccounted := self._unaccounted_claims(checkpoint) - {ref.uid}:
                        raise ClaimError(
                            "the checkpoint was rewritten from memory after it turned bad, and --cdi-root holds "
                            f"specs of claims it does not know ({', '.join(sorted(unaccounted))}): no new claim "
                            "is prepared until those are unprepared"
                        )
                    # Not read yet when the other daemon (rolling update) unprepared it since we looked.
                    claim = fetched[ref.uid] if ref.uid in fetched else self._fetch(ref.namespace, ref.name)
                    devices = self._resolve(ref, claim, checkpoint)
                except NpuPluginError as error:
                    log.warning("prepare refused: %s", error, extra={"claim": ref.label})
                    results[ref.uid] = PrepareResult(error=f"claim {ref.label}: {error}")
                    continue
                checkpoint.claims[ref.uid] = ClaimEntry(ref.namespace, ref.name, PREPARE_STARTED, devices)
            started.append(ref)
        return started

    def _resolve(self, ref: ClaimRef, claim: Mapping[str, Any], checkpoint: Checkpoint) -> tuple[PreparedDevice, ...]:
        snapshot = self._snapshot()

        def refuse(physical_id: int) -> str | None:
            view = snapshot.get(physical_id)
            if view is None:
                return "unknown device on this node"
            if view.owner is not Owner.DRA:
                return f"owned by {view.owner.value}, not DRA"
            if view.draining:
                return "being handed over to the device plugin (--dra-devices); it takes no new claims"
            holder = checkpoint.holder_of(physical_id)
            if holder is not None and holder != ref.uid:
                return f"already prepared for claim {holder}"
            return None

        found = claim_devices(claim, uid=ref.uid, driver=self.driver, pool=self.pool, refuse_device=refuse)
        return prepared_devices(self.driver, ref.uid, found)

    def _complete(self, ref: ClaimRef, checkpoint: Checkpoint) -> PrepareResult:
        entry = checkpoint.claims[ref.uid]
        try:
            write_claim_spec(self.cdi_root, self.driver, ref.uid, requests_of(entry.devices), self.layout)
        except OSError as error:
            if entry.state == PREPARE_STARTED:
                del checkpoint.claims[ref.uid]
            problem = describe_os_error(error, claim_spec_path(self.cdi_root, self.driver, ref.uid))
            log.error("cannot write CDI spec %s", problem, extra={"claim": ref.label})  # noqa: TRY400
            return PrepareResult(error=f"claim {ref.label}: cannot write CDI spec {problem}")
        checkpoint.claims[ref.uid] = ClaimEntry(entry.namespace, entry.name, PREPARE_COMPLETED, entry.devices)
        log.info(
            "prepared claim %s/%s: %s",
            ref.namespace,
            ref.name,
            ", ".join(d.device_name for d in entry.devices),
            extra={"claim": ref.label},
        )
        return PrepareResult(devices=entry.devices)

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Errors by claim UID ("" for success); an unknown claim succeeds."""
        errors: dict[str, str] = {}
        valid = []
        for ref in refs:
            try:
                check_ref(ref)
                valid.append(ref)
            except ClaimError as error:
                errors[ref.uid] = str(error)
        try:
            with self.locked() as checkpoint:
                held = len(checkpoint.claims)
                for ref in valid:
                    errors[ref.uid] = self._forget(ref, checkpoint)
                if len(checkpoint.claims) != held:
                    self.store.save(checkpoint)
        except CheckpointError as error:
            log.error("unprepare failed: %s", error, extra={"error": str(error)})  # noqa: TRY400
            errors |= {ref.uid: f"claim {ref.label}: {error}" for ref in valid}
        return errors

    def _forget(self, ref: ClaimRef, checkpoint: Checkpoint) -> str:
        """Remove a claim's CDI spec, then its entry; the entry stays while the spec cannot be removed."""
        try:
            remove_claim_spec(self.cdi_root, self.driver, ref.uid)
        except OSError as error:
            problem = describe_os_error(error, claim_spec_path(self.cdi_root, self.driver, ref.uid))
            log.error("cannot remove CDI spec %s", problem, extra={"claim": ref.label})  # noqa: TRY400
            return f"claim {ref.label}: cannot remove CDI spec {problem}"
        if checkpoint.claims.pop(ref.uid, None) is not None:
            log.info("unprepared claim %s/%s", ref.namespace, ref.name, extra={"claim": ref.label})
        return ""

    def collect_garbage(self) -> None:
        """At start: forget claims a crash left in PrepareStarted (the kubelet never heard of success and
        prepares them again) and drop CDI files of claims not held as completed (a crash between writing
        the file and recording it, or between removing the entry and the file)."""
        with self.locked() as checkpoint:
            interrupted = [uid for uid, entry in checkpoint.claims.items() if entry.state != PREPARE_COMPLETED]
            for uid in interrupted:
                log.warning("claim %s was being prepared when the plugin stopped; releasing it", uid)
                del checkpoint.claims[uid]
            if interrupted:
                self.store.save(checkpoint)
            try:
                self._remove_orphans(checkpoint)
            except OSError as error:
                raise CdiError(f"cannot clean up --cdi-root: {describe_os_error(error)}") from None

    def _remove_orphans(self, checkpoint: Checkpoint) -> None:
        for uid, path in claim_spec_files(self.cdi_root, self.driver).items():
            if uid not in checkpoint.claims:
                log.info("removing orphaned CDI spec %s", path)
                remove_claim_spec(self.cdi_root, self.driver, uid)
        # Under the lock no write of ours is in flight, so any temporary file is a crash's leftover.
        for path in [
            *remove_claim_spec_leftovers(self.cdi_root, self.driver),
            *remove_leftovers(self.store.path.parent, self.store.path.name),
        ]:
            log.info("removed %s, left half-written by a crash", path)

    def held_devices(self) -> set[int]:
        """Physical ids that checkpointed claims hold (prepared or being prepared)."""
        if not self._lock_path.parent.is_dir():
            return set()
        with self.locked() as checkpoint:
            return checkpoint.held_devices()
