"""Run `npu-plugin serve` so that it kills itself with SIGKILL at one exact point of a vNPU claim's
life, for the crash-table tests; the product has no switch for this.

    python -m tests.support.crash_point POINT PYTHON -m npu_plugin serve ARGS...

(the tail is what `tests.conftest.Daemons` runs after a `wrapper`). The checkpoint write that would
record POINT sends SIGKILL to its own process instead, so the daemon dies with everything before
that write on disk:

- `prepare-completed`: the write recording PrepareCompleted for a claim holding a vNPU (the vNPU is made, its
  CDI file written, the entry still PrepareStarted);
- `unprepare-removed`: the write dropping the entry of a claim holding a vNPU (the vNPU is destroyed, the CDI
  file removed, the entry still PrepareCompleted).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
from collections.abc import Callable

from npu_plugin.dra.checkpoint import PREPARE_COMPLETED, Checkpoint, CheckpointStore, ClaimEntry


def holds_vnpu(entry: ClaimEntry | None) -> bool:
    return entry is not None and any(d.vnpu is not None for d in entry.devices)


def completes_a_vnpu_claim(before: Checkpoint, after: Checkpoint) -> bool:
    return any(
        holds_vnpu(entry)
        and entry.state == PREPARE_COMPLETED
        and getattr(before.claims.get(uid), "state", None) != PREPARE_COMPLETED
        for uid, entry in after.claims.items()
    )


def drops_a_vnpu_claim(before: Checkpoint, after: Checkpoint) -> bool:
    return any(holds_vnpu(entry) and uid not in after.claims for uid, entry in before.claims.items())


POINTS: dict[str, Callable[[Checkpoint, Checkpoint], bool]] = {
    "prepare-completed": completes_a_vnpu_claim,
    "unprepare-removed": drops_a_vnpu_claim,
}


def kill_at(point: Callable[[Checkpoint, Checkpoint], bool]) -> None:
    save = CheckpointStore.save

    def save_or_die(self: CheckpointStore, checkpoint: Checkpoint) -> None:
        before = self._last_good  # what this daemon last read or wrote: the state on disk
        if before is not None and point(before, checkpoint):
            os.kill(os.getpid(), signal.SIGKILL)
        save(self, checkpoint)

    CheckpointStore.save = save_or_die  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    point, _python, flag, module, *args = argv
    if point not in POINTS or (flag, module) != ("-m", "npu_plugin"):
        sys.exit(f"usage: python -m tests.support.crash_point {{{','.join(POINTS)}}} PYTHON -m npu_plugin ARGS...")
    kill_at(POINTS[point])
    sys.argv = ["npu-plugin", *args]
    runpy.run_module("npu_plugin", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
