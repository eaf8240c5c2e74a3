"""Start-up clean-up, under the state lock before the DRA socket serves: claims a crash left
half-prepared are released, the chips' vNPUs are compared with the checkpoint, and CDI specs and
temporary files no completed claim accounts for are removed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from npu_plugin.cdi.files import claim_spec_files, remove_claim_spec, remove_claim_spec_leftovers
from npu_plugin.dra.checkpoint import PREPARE_COMPLETED, Checkpoint, CheckpointStore
from npu_plugin.dra.claim_vnpus import ClaimVnpus
from npu_plugin.dra.statelock import StateLock
from npu_plugin.errors import BackendError, CdiError, describe_os_error
from npu_plugin.host.atomic import remove_leftovers
from npu_plugin.inventory.state import Snapshot

log = logging.getLogger(__name__)


def collect_garbage(
    state: StateLock, vnpus: ClaimVnpus, *, snapshot: Callable[[], Snapshot], cdi_root: Path, driver: str
) -> None:
    """At start: forget claims a crash left in PrepareStarted (the kubelet never heard of success
    and prepares them again) after destroying the vNPUs they may have created, and drop CDI files of
    claims not held as completed (a crash between writing the file and recording it, or between
    removing the entry and the file). vNPUs of prepared claims are kept; vNPUs no claim records are
    never destroyed."""
    with state.locked() as checkpoint:
        interrupted = [uid for uid, entry in checkpoint.claims.items() if entry.state != PREPARE_COMPLETED]
        released = 0
        for uid in interrupted:
            log.warning("claim %s was being prepared when the plugin stopped; releasing it", uid)
            if vnpus.destroy_interrupted(uid, checkpoint.claims[uid]):
                del checkpoint.claims[uid]
                released += 1
        if released:
            state.store.save(checkpoint)
        _check_live_vnpus(checkpoint, vnpus, snapshot)
        try:
            _remove_orphans(checkpoint, state.store, cdi_root, driver)
        except OSError as error:
            raise CdiError(f"cannot clean up --cdi-root: {describe_os_error(error)}") from None


def _check_live_vnpus(checkpoint: Checkpoint, vnpus: ClaimVnpus, snapshot: Callable[[], Snapshot]) -> None:
    """On each chip npu-plugin would split on demand, compare its vNPUs with the checkpoint: a
    prepared claim's vNPU that now has another template, and any vNPU no claim records, are foreign
    (never destroyed; their chip serves them as they are). A chip served as it is (a static-only
    product, --vnpu static) holds the administrator's vNPUs, which no checkpoint records: nothing
    there is foreign."""
    if vnpus.operations is None:
        return
    try:
        plans = vnpus.plans(snapshot(), checkpoint)
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
                vnpus.disown(vnpu.vnpu_id)
                foreign.append(vnpu.vnpu_id)
        if foreign:
            log.warning(
                "npu-%d holds vNPUs not created by npu-plugin (%s); they are never destroyed, and the chip "
                "serves them as they are until they are gone",
                physical_id,
                ", ".join(map(str, foreign)),
                extra={"physicalId": physical_id, "foreign": foreign},
            )


def _remove_orphans(checkpoint: Checkpoint, store: CheckpointStore, cdi_root: Path, driver: str) -> None:
    for uid, path in claim_spec_files(cdi_root, driver).items():
        if uid not in checkpoint.claims:
            log.info("removing orphaned CDI spec %s", path)
            remove_claim_spec(cdi_root, driver, uid)
    # Under the lock no write of ours is in flight, so any temporary file is a crash's leftover.
    for path in [
        *remove_claim_spec_leftovers(cdi_root, driver),
        *remove_leftovers(store.path.parent, store.path.name),
    ]:
        log.info("removed %s, left half-written by a crash", path)
