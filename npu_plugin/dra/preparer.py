"""NodePrepareResources / NodeUnprepareResources for whole claims: each claim checked, read and
resolved to its devices, recorded PrepareStarted, its vNPUs made, its CDI spec written, recorded
PrepareCompleted; Unprepare undoes it in reverse. The state lock, the vNPU steps and the start-up
clean-up are modules of their own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from npu_plugin.ascend.container_edits import HostLayout, Mount
from npu_plugin.cdi.files import claim_spec_path, remove_claim_spec, write_claim_spec
from npu_plugin.dra.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    CheckpointStore,
    ClaimEntry,
    PreparedDevice,
)
from npu_plugin.dra.claim_vnpus import ClaimVnpus
from npu_plugin.dra.claims import Holding, claim_devices, held_conflict, overlap_problem
from npu_plugin.dra.cleanup import collect_garbage
from npu_plugin.dra.deadline import answer_by
from npu_plugin.dra.device_metadata import (
    claim_directory,
    metadata_mounts,
    remove_claim_metadata,
    remove_orphans,
    request_documents,
    write_claim_metadata,
)
from npu_plugin.dra.prepare_results import ClaimRef, PrepareResult, assign_ids, check_ref, prepared_devices, requests_of
from npu_plugin.dra.statelock import StateLock
from npu_plugin.dra.vnpus import VnpuOperations
from npu_plugin.errors import CheckpointError, ClaimError, NpuPluginError, describe_os_error
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Snapshot
from npu_plugin.inventory.vnpu_plans import served_chips
from npu_plugin.podannotations.mindcluster import device_targets

log = logging.getLogger(__name__)

FetchClaim = Callable[[str, str], Mapping[str, Any]]


class Preparer:
    """Blocking; the DRA service runs it in a worker thread. One batch at a time holds the state
    lock, which also serialises an overlapping old and new daemon during a rolling update."""

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
        vnpus: VnpuOperations | None = None,
        on_vnpus_changed: Callable[[], None] = lambda: None,
        shared: Callable[[int], bool] = lambda _physical_id: False,
        plugin_dir: Path | None = None,
    ) -> None:
        """`on_vnpus_changed` hears, from a worker thread, that vNPUs changed outside a Prepare or
        Unprepare call (a late create's vNPU destroyed); `shared` says whether a chip may be
        prepared in shares (--share-devices). `plugin_dir` (the driver's directory under the
        kubelet's plugins) holds each prepared claim's device metadata files (None: none)."""
        self.pool, self.layout, self.plugin_dir = pool, layout, plugin_dir
        self.shared = shared
        self._snapshot, self._fetch = snapshot, fetch_claim
        self.vnpus = vnpus  # None with --vnpu off: no vNPU name is accepted, no backend is asked
        self.state = StateLock(store=store, state_dir=state_dir, cdi_root=cdi_root, driver=driver)
        self._claim_vnpus = ClaimVnpus(vnpus, self.state, on_vnpus_changed)

    # The state lock's, kept in one place: the lock reads the same CDI specs Prepare writes.
    @property
    def driver(self) -> str:
        return self.state.driver

    @property
    def cdi_root(self) -> Path:
        return self.state.cdi_root

    @property
    def store(self) -> CheckpointStore:
        return self.state.store

    @property
    def prepared_claims(self) -> int:
        """Completed claims as of the last locked section, for metrics."""
        return self.state.prepared_claims

    def prepare(self, refs: Sequence[ClaimRef], *, deadline: float | None = None) -> dict[str, PrepareResult]:
        """Prepare a batch; `deadline` (time.monotonic) is when it must answer, so no driver call is
        waited on past it (by default, `DEFAULT_SECONDS` from now)."""
        if deadline is None:
            deadline = answer_by(None, time.monotonic())
        results: dict[str, PrepareResult] = {}
        fetched: dict[str, Mapping[str, Any]] = {}
        # Claims prepared before are answered from the checkpoint, so they need no API (it may be
        # down); the others are read before taking the lock, so a slow API holds up no other
        # Prepare.
        completed = self.store.completed_claims()
        for ref in refs:
            try:
                check_ref(ref)
                if ref.uid not in completed:
                    fetched[ref.uid] = self._fetch(ref.namespace, ref.name)
            except NpuPluginError as error:
                results[ref.uid] = PrepareResult(error=f"claim {ref.label}: {error}")
        try:
            with self.state.locked() as checkpoint:
                started = self._start(refs, fetched, checkpoint, results)
                # PrepareStarted reaches the disk before any CDI file does: after a crash the record
                # says which claims were in flight, and start-up drops them together with their
                # files.
                if any(checkpoint.claims[ref.uid].state == PREPARE_STARTED for ref in started):
                    self.store.save(checkpoint)
                for ref in started:
                    results[ref.uid] = self._complete(ref, checkpoint, deadline, fetched.get(ref.uid))
                if started:
                    self.store.save(checkpoint)
        except CheckpointError as error:
            # Nothing of this batch was recorded as completed: every claim not refused already fails
            # with it.
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
            if entry is not None and (creating := self._claim_vnpus.still_creating(entry)):
                log.warning("prepare refused: %s", creating, extra={"claim": ref.label})
                results[ref.uid] = PrepareResult(error=f"claim {ref.label}: {creating}")
                continue
            if entry is None or entry.state != PREPARE_COMPLETED:
                try:
                    if unaccounted := self.state.unaccounted_claims(checkpoint) - {ref.uid}:
                        raise ClaimError(
                            "the checkpoint was rewritten from memory after it turned bad, and --cdi-root holds "
                            f"specs of claims it does not know ({', '.join(sorted(unaccounted))}): no new claim "
                            "is prepared until those are unprepared"
                        )
                    if entry is not None and not self._claim_vnpus.destroy_interrupted(ref.uid, entry):
                        raise ClaimError("the vNPUs an interrupted Prepare of this claim made cannot be destroyed yet")
                    # Not read yet when the other daemon (rolling update) unprepared it since we
                    # looked.
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

        plans = self._claim_vnpus.plans(snapshot, checkpoint)
        offered = self.vnpus.offered if self.vnpus is not None else None
        served = served_chips(plans, offered, self.shared)
        found = claim_devices(
            claim,
            uid=ref.uid,
            driver=self.driver,
            pool=self.pool,
            refuse_device=refuse,
            vnpus=served,
            shared=self.shared,
        )
        if problem := held_conflict(found, checkpoint.held(but=ref.uid)):
            raise ClaimError(problem)
        # Shares of one chip never overlap one another (held_conflict keeps them from whole
        # devices); the vNPU rules below are for the rest.
        others = [(uid, d) for uid, entry in checkpoint.claims.items() if uid != ref.uid for d in entry.devices]
        held = [Holding(d.physical_id, d.vnpu.template if d.vnpu else None) for _uid, d in others if d.share_id is None]
        recorded = frozenset(record.vnpu_id for _uid, record in checkpoint.vnpus())
        unshared = [d for d in found if d.share_id is None]
        if problem := overlap_problem(unshared, served.chips, held, recorded):
            raise ClaimError(problem)
        taken = {record.vnpu_id for uid, record in checkpoint.vnpus() if uid != ref.uid}
        return prepared_devices(self.driver, ref.uid, found, assign_ids(found, plans, taken))

    def own_vnpu_ids(self) -> frozenset[int]:
        """The vNPU ids we created, for whoever plans what a chip serves: any other vNPU is foreign.
        Read without the state lock, which a Prepare holds while it waits on the driver."""
        return self._claim_vnpus.own_ids(self.store.peek())

    def _complete(
        self, ref: ClaimRef, checkpoint: Checkpoint, deadline: float, claim: Mapping[str, Any] | None
    ) -> PrepareResult:
        """Make the claim's vNPUs and write its files; `claim` is the object read for this call
        (None when the checkpoint answered), whose reservedFor pods the result names."""
        try:
            self._claim_vnpus.make(ref, checkpoint, deadline)
        except ClaimError as error:
            log.error("prepare failed: %s", error, extra={"claim": ref.label})  # noqa: TRY400
            return PrepareResult(error=f"claim {ref.label}: {error}")
        entry = checkpoint.claims[ref.uid]
        whole, virtual = requests_of(entry.devices)
        mounts = self._write_metadata(ref, entry.devices)
        try:
            write_claim_spec(self.cdi_root, self.driver, ref.uid, whole, self.layout, virtual=virtual, mounts=mounts)
        except OSError as error:
            if entry.state == PREPARE_STARTED:
                self._claim_vnpus.undo(entry.devices)
                del checkpoint.claims[ref.uid]
                if self.plugin_dir is not None:
                    remove_claim_metadata(self.plugin_dir, ref)
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
        reserved_for = (claim.get("status") or {}).get("reservedFor") if claim is not None else None
        return PrepareResult(devices=entry.devices, pods=tuple(device_targets(reserved_for, ref.namespace)))

    def _write_metadata(self, ref: ClaimRef, devices: Sequence[PreparedDevice]) -> dict[str, Mount]:
        """The claim's device metadata files, and the mounts its CDI spec adds for them; a file
        that cannot be written is logged and not mounted (the Prepare goes on without it)."""
        if self.plugin_dir is None:
            return {}
        snapshot = self._snapshot()
        documents = request_documents(
            self.driver, ref, devices, lambda i: view.device if (view := snapshot.get(i)) is not None else None
        )
        try:
            write_claim_metadata(self.plugin_dir, ref, documents)
        except OSError as error:
            problem = describe_os_error(error, claim_directory(self.plugin_dir, ref))
            log.error(  # noqa: TRY400
                "cannot write the device metadata of claim %s: %s; its containers get none",
                ref.label,
                problem,
                extra={"claim": ref.label},
            )
            remove_claim_metadata(self.plugin_dir, ref)
            return {}
        return metadata_mounts(self.plugin_dir, self.driver, ref, documents)

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
            with self.state.locked() as checkpoint:
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
        """Destroy the vNPUs we created for a claim, remove its CDI spec, then its entry; the entry
        stays while a vNPU or the spec cannot be removed (the kubelet retries, and until then the
        vNPU counts as used)."""
        entry = checkpoint.claims.get(ref.uid)
        if entry is not None and (
            problem := self._claim_vnpus.still_creating(entry) or self._claim_vnpus.destroy_created(entry.devices)
        ):
            return f"claim {ref.label}: {problem}"
        try:
            remove_claim_spec(self.cdi_root, self.driver, ref.uid)
        except OSError as error:
            problem = describe_os_error(error, claim_spec_path(self.cdi_root, self.driver, ref.uid))
            log.error("cannot remove CDI spec %s", problem, extra={"claim": ref.label})  # noqa: TRY400
            return f"claim {ref.label}: cannot remove CDI spec {problem}"
        if self.plugin_dir is not None:
            remove_claim_metadata(self.plugin_dir, ref)
        if checkpoint.claims.pop(ref.uid, None) is not None:
            log.info("unprepared claim %s/%s", ref.namespace, ref.name, extra={"claim": ref.label})
        return ""

    def collect_garbage(self) -> None:
        """At start, before serving: release the claims a crash left half-prepared, compare the
        chips' vNPUs with the checkpoint, and remove CDI specs and temporary files no completed
        claim accounts for."""
        collect_garbage(
            self.state, self._claim_vnpus, snapshot=self._snapshot, cdi_root=self.cdi_root, driver=self.driver
        )
        if self.plugin_dir is not None:
            claims = self.store.peek().claims.values()
            for path in remove_orphans(self.plugin_dir, [(c.namespace, c.name) for c in claims]):
                log.info("removed the device metadata of a claim no longer prepared: %s", path)

    def held_devices(self) -> set[int]:
        """Physical ids that checkpointed claims hold (prepared or being prepared), read without the
        state lock, which a Prepare holds while it waits on the driver."""
        return self.store.peek().held_devices()
