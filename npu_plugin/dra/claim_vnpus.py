"""A claim's vNPUs within Prepare and Unprepare: the chips' plans with the vNPU ids we own, each
create bounded by the Prepare's deadline (a create outliving it settled when it returns), an id
someone else took replaced by the next free one, the undo of a failed Prepare, the re-create of a
prepared claim's vNPU after a reboot, and the destroy of what a claim created. The steps that change
vNPUs run under the state lock their caller holds; a late create's settling, in the create's own
thread, takes it itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from npu_plugin.ascend.device import vnpu_node
from npu_plugin.dra.checkpoint import PREPARE_STARTED, Checkpoint, ClaimEntry, PreparedDevice
from npu_plugin.dra.deadline import wait_left
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.dra.statelock import StateLock
from npu_plugin.dra.vnpus import CREATE_TRIES, CreateTimeoutError, VnpuOperations, lowest_free_id
from npu_plugin.errors import BackendError, CheckpointError, ClaimError
from npu_plugin.inventory.state import Snapshot
from npu_plugin.inventory.vnpu_plans import ChipPlan

log = logging.getLogger(__name__)


class _CreateGoesOnError(ClaimError):
    """A create outlived the wait: its claim's entry keeps its vNPU records until the create
    returns."""


class ClaimVnpus:
    """The preparer's vNPU steps; with `operations` None (--vnpu off) there are none to make, and a
    recorded vNPU we created cannot be destroyed."""

    def __init__(
        self, operations: VnpuOperations | None, state: StateLock, on_vnpus_changed: Callable[[], None]
    ) -> None:
        """`on_vnpus_changed` hears, from a worker thread, that vNPUs changed outside a Prepare or
        Unprepare call (a late create's vNPU destroyed)."""
        self.operations, self._state, self._on_vnpus_changed = operations, state, on_vnpus_changed
        self._mismatched: set[int] = set()  # recorded vNPU ids whose live vNPU has another template

    def disown(self, vnpu_id: int) -> None:
        """A recorded vNPU found with another template is foreign from now on: never counted as
        ours."""
        self._mismatched.add(vnpu_id)

    def plans(self, snapshot: Snapshot, checkpoint: Checkpoint) -> dict[int, ChipPlan]:
        """How each chip is served now, the vNPUs the checkpoint records as ours kept ours; {} with
        --vnpu off."""
        if self.operations is None:
            return {}
        return self.operations.plans([view.device for view in snapshot.devices], self.own_ids(checkpoint))

    def own_ids(self, checkpoint: Checkpoint) -> frozenset[int]:
        """vNPU ids we created, as the checkpoint records them (less those found with another
        template)."""
        ids = {r.vnpu_id for _uid, r in checkpoint.vnpus() if r.created_by_us}
        return frozenset(ids - self._mismatched)

    def make(self, ref: ClaimRef, checkpoint: Checkpoint, deadline: float) -> None:
        """Create the claim's vNPUs that do not exist (each of a new claim; those of a prepared
        claim that a reboot took, with their recorded ids) and wait for their device nodes. When
        that fails, a new claim's vNPUs are destroyed again and its entry dropped; a prepared claim
        keeps its entry. ClaimError.

        A create the driver has not answered by `deadline` is left running: the entry stays as it
        is, so its vNPUs still count as used and their ids stay reserved, and `_settle_late_create`
        runs when it returns."""
        entry = checkpoint.claims[ref.uid]
        if self.operations is None or not any(d.vnpu is not None and d.vnpu.created_by_us for d in entry.devices):
            return
        created: list[PreparedDevice] = []
        try:
            for index, device in enumerate(entry.devices):
                if device.vnpu is not None and device.vnpu.created_by_us:
                    self._make_one(ref, checkpoint, index, deadline, created)
        except _CreateGoesOnError:
            raise
        except (ClaimError, BackendError) as error:
            if entry.state == PREPARE_STARTED:
                self.undo(created)
                del checkpoint.claims[ref.uid]
            raise ClaimError(str(error)) from None

    def _make_one(
        self, ref: ClaimRef, checkpoint: Checkpoint, index: int, deadline: float, created: list[PreparedDevice]
    ) -> None:
        operations = self.operations
        assert operations is not None
        entry = checkpoint.claims[ref.uid]
        record = entry.devices[index].vnpu
        assert record is not None
        live = {v.vnpu_id: v.template for v in operations.live(record.physical_id)}
        if live.get(record.vnpu_id) == record.template:
            return
        new = entry.state == PREPARE_STARTED
        for attempt in range(1, CREATE_TRIES + 1):
            if record.vnpu_id in live:
                problem = f"the id holds a {live[record.vnpu_id]} vNPU"
            else:
                try:
                    operations.create(
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
                live = {v.vnpu_id: v.template for v in operations.live(record.physical_id)}
            free = None
            if new and record.vnpu_id in live and attempt < CREATE_TRIES:
                taken = {r.vnpu_id for _uid, r in checkpoint.vnpus()} | live.keys()
                free = lowest_free_id(operations.id_range(record.physical_id), taken)
            if free is None:
                raise ClaimError(
                    f"creating vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}) "
                    f"failed: {problem}"
                )
            # The id is someone else's: record the next free one before trying it, so no crash
            # leaves a vNPU of ours unrecorded.
            record = replace(record, vnpu_id=free)
            devices = list(entry.devices)
            devices[index] = replace(devices[index], vnpu=record)
            entry = checkpoint.claims[ref.uid] = replace(entry, devices=tuple(devices))
            self._state.store.save(checkpoint)
        created.append(entry.devices[index])
        if not operations.node_appears(record.vnpu_id):
            raise ClaimError(
                f"vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}) was created but "
                f"{operations.dev_root / vnpu_node(record.vnpu_id)} did not appear"
            )

    def still_creating(self, entry: ClaimEntry) -> str | None:
        """Why a claim cannot be prepared or unprepared now: a create of one of its vNPUs that
        outlived its wait is still running (a second create, or a destroy racing it, would leak a
        vNPU); None when none is."""
        if self.operations is None:
            return None
        for device in entry.devices:
            record = device.vnpu
            if record is None or (since := self.operations.creating_since(record.vnpu_id)) is None:
                continue
            return (
                f"vNPU {record.template} on npu-{record.physical_id} (id {record.vnpu_id}) is still being created: "
                f"the driver has not answered for {time.monotonic() - since:.0f}s; retry once it has"
            )
        return None

    def _settle_late_create(self, ref: ClaimRef) -> None:
        """A create that outlived its Prepare has returned (made or refused; runs in its thread). A
        claim still PrepareStarted is released as start-up releases an interrupted one: its vNPUs
        destroyed, its entry dropped, and the kubelet's retry prepares it anew. A prepared claim
        (its vNPU re-created after a reboot) keeps the vNPU it records. When the checkpoint cannot
        be read, the claim's next Prepare releases it."""
        try:
            with self._state.locked() as checkpoint:
                entry = checkpoint.claims.get(ref.uid)
                if entry is None or entry.state != PREPARE_STARTED:
                    return
                if problem := self.destroy_created(entry.devices):
                    log.error(
                        "a late create of claim %s returned; keeping its record until its vNPUs can be destroyed: %s",
                        ref.label,
                        problem,
                        extra={"claim": ref.label},
                    )
                    return
                del checkpoint.claims[ref.uid]
                self._state.store.save(checkpoint)
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

    def undo(self, devices: Sequence[PreparedDevice]) -> None:
        """Destroy the vNPUs a failed Prepare made; one that cannot be destroyed stays, as a foreign
        vNPU."""
        if self.operations is None:
            return
        for device in devices:
            if device.vnpu is not None and device.vnpu.created_by_us:
                try:
                    self.operations.destroy(device.vnpu.physical_id, device.vnpu.vnpu_id)
                except BackendError as error:
                    log.error(  # noqa: TRY400
                        "cannot destroy vNPU %d on npu-%d after a failed prepare; it stays as a foreign vNPU: %s",
                        device.vnpu.vnpu_id,
                        device.vnpu.physical_id,
                        error,
                    )

    def destroy_created(self, devices: Sequence[PreparedDevice]) -> str | None:
        """Destroy the vNPUs we created for these devices (made or not: a crash may have come before
        or after the create); why one cannot be destroyed, or None."""
        for device in devices:
            record = device.vnpu
            if record is None or not record.created_by_us:
                continue
            where = f"vNPU {record.vnpu_id} ({record.template}) on npu-{record.physical_id}"
            if self.operations is None:
                return f"{where} was created with --vnpu dynamic; serve with it to destroy it"
            try:
                self.operations.destroy(record.physical_id, record.vnpu_id)
            except BackendError as error:
                return f"destroying {where} failed: {error}"
        return None

    def destroy_interrupted(self, uid: str, entry: ClaimEntry) -> bool:
        """Destroy the vNPUs an interrupted Prepare recorded; False keeps the entry, so the vNPU
        stays counted as used, the next start tries again, and so does a Prepare of the same
        claim."""
        if problem := self.destroy_created(entry.devices):
            log.error("claim %s was being prepared when the plugin stopped; keeping its record: %s", uid, problem)
            return False
        return True
