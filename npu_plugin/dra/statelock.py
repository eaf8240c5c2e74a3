"""The state lock and the checkpoint read under it: one Prepare, Unprepare or clean-up at a time,
across an overlapping old and new daemon of a rolling update too, and the claim specs a checkpoint
rewritten from memory cannot account for."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from npu_plugin.cdi.files import claim_spec_files
from npu_plugin.dra.checkpoint import PREPARE_COMPLETED, Checkpoint, CheckpointStore
from npu_plugin.errors import CheckpointError, describe_os_error

log = logging.getLogger(__name__)
LOCK_MODE = 0o600


class StateLock:
    """`prepare.lock` in the state directory, taken with flock around each read-modify-write of the
    checkpoint."""

    def __init__(self, *, store: CheckpointStore, state_dir: Path, cdi_root: Path, driver: str) -> None:
        self.store, self.cdi_root, self.driver = store, cdi_root, driver
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
        # Never through a symlink (a planted one would make us create its target), never left to the
        # umask.
        try:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_MODE)
        except OSError as error:
            raise CheckpointError(f"cannot open the state lock: {describe_os_error(error, self._lock_path)}") from None
        os.fchmod(fd, LOCK_MODE)
        return fd

    def _note_unaccounted(self, checkpoint: Checkpoint) -> None:
        """After a rewrite from memory: claim specs of claims the checkpoint does not know were
        prepared by another daemon of a rolling update since we last read it, on devices we cannot
        account for."""
        unknown = set(claim_spec_files(self.cdi_root, self.driver)) - checkpoint.claims.keys()
        if unknown - self._unaccounted:
            log.error(
                "--cdi-root holds specs of claims the rewritten checkpoint does not know (%s); no new claim is "
                "prepared until they are unprepared",
                ", ".join(sorted(unknown)),
            )
        self._unaccounted |= unknown

    def unaccounted_claims(self, checkpoint: Checkpoint) -> set[str]:
        """Claims whose specs the rewritten checkpoint still does not know and that are still in
        --cdi-root."""
        if self._unaccounted:
            present = claim_spec_files(self.cdi_root, self.driver)
            self._unaccounted = {uid for uid in self._unaccounted if uid in present and uid not in checkpoint.claims}
        return self._unaccounted
