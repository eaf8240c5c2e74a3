"""NodePrepareResources / NodeUnprepareResources semantics: checkpoint, CDI files, the state lock."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
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
    VnpuRecord,
)
from npu_plugin.dra.claims import ClaimDevice, Holding, claim_devices, overlap_problem
from npu_plugin.dra.deadline import answer_by, wait_left
from npu_plugin.dra.vnpus import CREATE_TRIES, CreateTimeoutError, VnpuHands, lowest_free_id
from npu_plugin.edits import HostLayout
from npu_plugin.errors import (
    BackendError,
    CdiError,
    CheckpointError,
    ClaimError,
    NpuPluginError,
    clipped,
    describe_os_error,
    quoted,
)
from npu_plugin.inventory import Snapshot
from npu_plugin.ownership import Owner
from npu_plugin.vnpu_inventory import ChipPlan, served_chips

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


class _CreateGoesOnError(ClaimError):
    """A create outlived the wait: its claim's entry keeps its vNPU records until the create returns."""


def check_ref(ref: ClaimRef) -> None:
    """UIDs become file names and names become URL paths: nothing else may reach them."""
    if not _UID.fullmatch(ref.uid):
        raise ClaimError(f"invalid claim UID {quoted(ref.uid)}")
    if not _DNS_LABELISH.fullmatch(ref.namespace) or not _DNS_LABELISH.fullmatch(ref.name):
        raise ClaimError(f"invalid claim namespace/name {quoted(ref.namespace)}/{quoted(ref.name)}")


def prepared_devices(
    driver: str, uid: str, devices: Sequence[ClaimDevice], vnpus: Mapping[str, VnpuRecord] | None = None
) -> tuple[PreparedDevice, ...]:
    """The response devices, with the vNPU records by device name; each request's CDI id goes on its first
    device only."""
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
                vnpu=(vnpus or {}).get(device.device),
            )
        )
    return tuple(result)


def requests_of(devices: Sequence[PreparedDevice]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Each request's whole NPUs (physical ids) and vNPUs (vNPU ids)."""
    whole: dict[str, list[int]] = {}
    virtual: dict[str, list[int]] = {}
    for device in devices:
        if device.vnpu is None:
            whole.setdefault(device.request_names[0], []).append(device.physical_id)
        else:
            virtual.setdefault(device.request_names[0], []).append(device.vnpu.vnpu_id)
    return whole, virtual


def assign_ids(devices: Sequence[ClaimDevice], plans: Mapping[int, ChipPlan], taken: set[int]) -> dict[str, VnpuRecord]:
    """vNPU records for a claim's vNPUs: a new one gets the lowest id of its chip's range that no live vNPU
    and no checkpointed claim holds (`taken`, which grows with each id given)."""
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
        vnpus: VnpuHands | None = None,
        on_vnpus_changed: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_vnpus_changed` hears, from a worker thread, that vNPUs changed outside a Prepare or Unprepare call
        (a late create's vNPU destroyed)."""
        self.driver, self.pool = driver, pool
        self._on_vnpus_changed = on_vnpus_changed
        self.cdi_root, self.layout = cdi_root, layout
        self.store, self._snapshot, self._fetch = store, snapshot, fetch_claim
        self.vnpus = vnpus  # None with --vnpu off: no vNPU name is accepted, no backend is asked
        self._mismatched: set[int] = set()  # recorded vNPU ids whose live vNPU has another template
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

    def prepare(self, refs: Sequence[ClaimRef], *, deadline: float | None = None) -> dict[str, PrepareResult]:
        """Prepare a batch; `deadline` (time.monotonic) is when it must answer, so no driver call is waited on
        past it (by default, `DEFAULT_SECONDS` from now)."""
        if deadline is None:
            deadline = answer_by(None, time.monotonic())
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
                    results[ref.uid] = self._complete(ref, checkpoint, deadline)
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
            if entry is not None and (creating := self._still_creating(entry)):
                log.warning("prepare refused: %s", creating, extra={"claim": ref.label})
                results[ref.uid] = PrepareResult(error=f"claim {ref.label}: {creating}")
                continue
            if entry is None or entry.state != PREPARE_COMPLETED:
                try:
                    if unaccounted := self._unaccounted_claims(checkpoint) - {ref.uid}:
                        raise ClaimError(
                            "the checkpoint was rewritten from memory after it turned bad, and --cdi-root holds "
                            f"specs of claims it does not know ({', '.join(sorted(unaccounted))}): no new claim "
                            "is prepared until those are unprepared"
                        )
                    if entry is not None and not self._destroy_interrupted(ref.uid, entry):
                        raise ClaimError("the vNPUs an interrupted Prepare of this claim made cannot be destroyed yet")
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
            return None

        plans = self._plans(snapshot, checkpoint)
        offered = self.vnpus.offered if self.vnpus is not None else None
        served = served_chips(plans, offered)
        found = claim_devices(
            claim, uid=ref.uid, driver=self.driver, pool=self.pool, refuse_device=refuse, vnpus=served
        )
        for device in found:
            holder = checkpoint.holder_of(device.device)
            if holder is not None and holder != ref.uid:
                raise ClaimError(f"device {device.device}: already prepared for claim {holder}")
        others = [(uid, d) for uid, entry in checkpoint.claims.items() if uid != ref.uid for d in entry.devices]
        held = [Holding(d.physical_id, d.vnpu.template if d.vnpu else None) for _uid, d in others]
        recorded = frozenset(record.vnpu_id for _uid, record in checkpoint.vnpus())
        if problem := overlap_problem(found, served.chips, held, recorded):
            raise ClaimError(problem)
        taken = {record.vnpu_id for uid, record in checkpoint.vnpus() if uid != ref.uid}
        return prepared_devices(self.driver, ref.uid, found, assign_ids(found, plans, taken))

    def _plans(self, snapshot: Snapshot, checkpoint: Checkpoint) -> dict[int, ChipPlan]:
        if self.vnpus is None:
            return {}
        return self.vnpus.plans([view.device for view in snapshot.devices], self._own_ids(checkpoint))

    def _own_ids(self, checkpoint: Checkpoint) -> frozenset[int]:
        """vNPU ids we created, as the checkpoint records them (less those found with another template)."""
        ids = {r.vnpu_id for _uid, r in checkpoint.vnpus() if r.created_by_us}
        return frozenset(ids - self._mismatched)

    def own_vnpu_ids(self) -> frozenset[int]:
        """The vNPU ids we created, for whoever plans what a chip serves: any other vNPU is foreign. Read without
        the state lock, which a Prepare holds while it waits on the driver."""
        return self._own_ids(self.store.peek())

    def _complete(self, ref: ClaimRef, checkpoint: Checkpoint, deadline: float) -> PrepareResult:
        try:
            self._make_vnpus(ref, checkpoint, deadline)
        except ClaimError as error:
            log.error("prepare failed: %s", error, extra={"claim": ref.label})  # noqa: TRY400
            return PrepareResult(error=f"claim {ref.label}: {error}")
        entry = checkpoint.claims[ref.uid]
        whole, virtual = requests_of(entry.devices)
        try:
            write_claim_spec(self.cdi_root, self.driver, ref.uid, whole, self.layout, virtual=virtual)
        except OSError as error:
            if entry.state == PREPARE_STARTED:
                self._undo_vnpus(entry.devices)
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

    def _make_vnpus(self, ref: ClaimRef, checkpoint: Checkpoint, deadline: float) -> None:
        """Create the claim's vNPUs that do not exist (each of a new claim; those of a prepared claim that a
        reboot took, with their recorded ids) and wait for their device nodes. When that fails, a new claim's
        vNPUs are destroyed again and its entry dropped; a prepared claim keeps its entry. ClaimError.

        A create the driver has not answered by `deadline` is left running: the entry stays as it is, so its
        vNPUs still count as used and their ids stay reserved, and `_settle_late_create` runs when it returns."""
        entry = checkpoint.claims[ref.uid]
        if self.vnpus is None or not any(d.vnpu is not None and d.vnpu.created_by_us for d in entry.devices):
            return
        created: list[PreparedDevice] = []
        try:
            for index, device in enumerate(entry.devices):
                if device.vnpu is not None and device.vnpu.created_by_us:
                    self._make_vnpu(ref, checkpoint, index, deadline, created)
        except _CreateGoesOnError:
            raise
        except (ClaimError, BackendError) as error:
            if entry.state == PREPARE_STARTED:
                self._undo_vnpus(created)
                del checkpoint.claims[ref.uid]
            raise ClaimError(str(error)) from None

    def _make_vnpu(
        self, ref: ClaimRef, checkpoint: Checkpoint, index: int, deadline: float, created: list[PreparedDevice]
    ) -> None:
        hands = self.vnpus
        assert hands is not None
        entry = checkpoint.claims[ref.uid]
        record = entry.devices[index].vnpu
        assert record is not None
        live = {v.vnpu_id: v.template for v in hands.live(record.physical_id)}
        if live.get(record.vnpu_id) == record.template:
            return
        new = entry.state == PREPARE_STARTED
        for attempt in range(1, CREATE_TRIES + 1):
            if record.vnpu_id in live:
                problem = f"the id holds a {live[record.vnpu_id]} vNPU"
            else:
                try:
                    hands.create(
                        record.physical_id,
                        record.template,
                        record.vnpu_id,
                        wait=wait_left(deadline, time.monotonic()),
                        on_late_return=partial(self._settle_late_create, ref),
                    )
                    break
                except CreateTimeoutError as error:
                    raise _CreateGoesOnError(
                        f"creating vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}): {error}; "
                        "the create goes on, and once it returns the vNPU is destroyed and a retry of this claim "
                        "prepares it anew"
                    ) from None
                except BackendError as error:
                    problem = str(error)
                live = {v.vnpu_id: v.template for v in hands.live(record.physical_id)}
            free = None
            if new and record.vnpu_id in live and attempt < CREATE_TRIES:
                taken = {r.vnpu_id for _uid, r in checkpoint.vnpus()} | live.keys()
                free = lowest_free_id(hands.id_range(record.physical_id), taken)
            if free is None:
                raise ClaimError(
                    f"creating vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}) "
                    f"failed: {problem}"
                )
            # The id is someone else's: record the next free one before trying it, so no crash leaves a vNPU
            # of ours unrecorded.
            record = replace(record, vnpu_id=free)
            devices = list(entry.devices)
            devices[index] = replace(devices[index], vnpu=record)
            entry = checkpoint.claims[ref.uid] = replace(entry, devices=tuple(devices))
            self.store.save(checkpoint)
        created.append(entry.devices[index])
        if not hands.node_appears(record.vnpu_id):
            raise ClaimError(
                f"vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}) was created but "
                f"{hands.dev_root}/vdavinci{record.vnpu_id} did not appear"
            )

    def _still_creating(self, entry: ClaimEntry) -> str | None:
        """Why a claim cannot be prepared or unprepared now: a create of one of its vNPUs that outlived its wait
        is still running (a second create, or a destroy racing it, would leak a vNPU); None when none is."""
        if self.vnpus is None:
            return None
        for device in entry.devices:
            record = device.vnpu
            if record is None or (since := self.vnpus.creating_since(record.vnpu_id)) is None:
                continue
            return (
                f"vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}) is still being created: "
                f"the driver has not answered for {time.monotonic() - since:.0f}s; retry once it has"
            )
        return None

    def _settle_late_create(self, ref: ClaimRef) -> None:
        """A create that outlived its Prepare has returned (made or refused; runs in its thread). A claim still
        PrepareStarted is released as start-up releases an interrupted one: its vNPUs destroyed, its entry
        dropped, and the kubelet's retry prepares it anew. A prepared claim (its vNPU re-created after a reboot)
        keeps the vNPU it records. When the checkpoint cannot be read, the claim's next Prepare releases it."""
        try:
            with self.locked() as checkpoint:
                entry = checkpoint.claims.get(ref.uid)
                if entry is None or entry.state != PREPARE_STARTED:
                    return
                if problem := self._destroy_created(entry.devices):
                    log.error(
                        "a late create of claim %s returned; keeping its record until its vNPUs can be destroyed: %s",
                        ref.label,
                        problem,
                        extra={"claim": ref.label},
                    )
                    return
                del checkpoint.claims[ref.uid]
                self.store.save(checkpoint)
                log.warning(
                    "a late create of claim %s returned after its Prepare had answered; its vNPUs are destroyed and "
                    "the claim released, for the kubelet's retry to prepare anew",
                    ref.label,
                    extra={"claim": ref.label},
                )
        except CheckpointError as error:
            log.error("a late create of claim %s returned: %s", ref.label, error, extra={"claim": ref.label})  # noqa: TRY400
            return
        self._on_vnpus_changed()

    def _undo_vnpus(self, devices: Sequence[PreparedDevice]) -> None:
        """Destroy the vNPUs a failed Prepare made; one that cannot be destroyed stays, as a foreign vNPU."""
        if self.vnpus is None:
            return
        for device in devices:
            if device.vnpu is not None and device.vnpu.created_by_us:
                try:
                    self.vnpus.destroy(device.vnpu.physical_id, device.vnpu.vnpu_id)
                except BackendError as error:
                    log.error(  # noqa: TRY400
                        "cannot destroy vNPU %d on npu-%d after a failed prepare; it stays as a foreign vNPU: %s",
                        device.vnpu.vnpu_id,
                        device.vnpu.physical_id,
                        error,
                    )

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
        """Destroy the vNPUs we created for a claim, remove its CDI spec, then its entry; the entry stays while
        a vNPU or the spec cannot be removed (the kubelet retries, and until then the vNPU counts as used)."""
        entry = checkpoint.claims.get(ref.uid)
        if entry is not None and (problem := self._still_creating(entry) or self._destroy_created(entry.devices)):
            return f"claim {ref.label}: {problem}"
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
        prepares them again) after destroying the vNPUs they may have created, and drop CDI files of claims
        not held as completed (a crash between writing the file and recording it, or between removing the
        entry and the file). vNPUs of prepared claims are kept; vNPUs no claim records are never destroyed."""
        with self.locked() as checkpoint:
            interrupted = [uid for uid, entry in checkpoint.claims.items() if entry.state != PREPARE_COMPLETED]
            released = 0
            for uid in interrupted:
                log.warning("claim %s was being prepared when the plugin stopped; releasing it", uid)
                if self._destroy_interrupted(uid, checkpoint.claims[uid]):
                    del checkpoint.claims[uid]
                    released += 1
            if released:
                self.store.save(checkpoint)
            self._check_live_vnpus(checkpoint)
            try:
                self._remove_orphans(checkpoint)
            except OSError as error:
                raise CdiError(f"cannot clean up --cdi-root: {describe_os_error(error)}") from None

    def _destroy_created(self, devices: Sequence[PreparedDevice]) -> str | None:
        """Destroy the vNPUs we created for these devices (made or not: a crash may have come before or after
        the create); why one cannot be destroyed, or None."""
        for device in devices:
            record = device.vnpu
            if record is None or not record.created_by_us:
                continue
            where = f"vNPU {record.vnpu_id} ({record.template}) on npu-{record.physical_id}"
            if self.vnpus is None:
                return f"{where} was created with --vnpu dynamic; serve with it to destroy it"
            try:
                self.vnpus.destroy(record.physical_id, record.vnpu_id)
            except BackendError as error:
                return f"destroying {where} failed: {error}"
        return None

    def _destroy_interrupted(self, uid: str, entry: ClaimEntry) -> bool:
        """Destroy the vNPUs an interrupted Prepare recorded; False keeps the entry, so the vNPU stays counted
        as used, the next start tries again, and so does a Prepare of the same claim."""
        if problem := self._destroy_created(entry.devices):
            log.error("claim %s was being prepared when the plugin stopped; keeping its record: %s", uid, problem)
            return False
        return True

    def _check_live_vnpus(self, checkpoint: Checkpoint) -> None:
        """On each chip npu-plugin would split on demand, compare its vNPUs with the checkpoint: a prepared claim's
        vNPU that now has another template, and any vNPU no claim records, are foreign (never destroyed; their chip
        serves them as they are). A chip served as it is (a static-only product, --vnpu static) holds the
        administrator's vNPUs, which no checkpoint records: nothing there is foreign."""
        if self.vnpus is None:
            return
        try:
            plans = self._plans(self._snapshot(), checkpoint)
        except BackendError as error:
            log.warning("cannot compare the chips' vNPUs with the checkpoint: %s", error, extra={"error": str(error)})
            return
        records = {r.vnpu_id: (uid, r) for uid, r in checkpoint.vnpus()}
        for physical_id, plan in sorted(plans.items()):
            if not plan.split_on_demand:
                continue
            foreign = []
            for vnpu in plan.chip.vnpus:
                known = records.get(vnpu.vnpu_id)
                if known is None:
                    foreign.append(vnpu.vnpu_id)
                elif known[1].template != vnpu.template:
                    log.error(
                        "vNPU %d on npu-%d is a %s, but claim %s recorded a %s; treating it as foreign",
                        vnpu.vnpu_id,
                        vnpu.physical_id,
                        vnpu.template,
                        known[0],
                        known[1].template,
                    )
                    self._mismatched.add(vnpu.vnpu_id)
                    foreign.append(vnpu.vnpu_id)
            if foreign:
                log.warning(
                    "npu-%d holds vNPUs not created by npu-plugin (%s); they are never destroyed, and the chip "
                    "serves them as they are until they are gone",
                    physical_id,
                    ", ".join(map(str, foreign)),
                    extra={"physicalId": physical_id, "foreign": foreign},
                )

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
        """Physical ids that checkpointed claims hold (prepared or being prepared), read without the state lock,
        which a Prepare holds while it waits on the driver."""
        return self.store.peek().held_devices()
