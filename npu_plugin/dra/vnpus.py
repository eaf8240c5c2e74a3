"""The preparer's operations on vNPUs: the chips' plans, id choice, create and destroy with the
driver's retries, and the wait for a new vNPU's device node.

Every call blocks; the preparer makes them under the state lock, so the checkpoint records a vNPU
before it exists and forgets it only after it is gone. A create waits on the driver only for as long
as the preparer allows, so a hung driver call cannot keep the lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from npu_plugin.aio.backoff import BackoffPolicy, BackoffWait
from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.device import Device, vnpu_node
from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.errors import BackendError, VnpuError, VnpuNotFoundError
from npu_plugin.inventory.vnpu_plans import ChipPlan, VnpuReader

if TYPE_CHECKING:
    from npu_plugin.observability.metrics import VnpuOp, VnpuResult

    OperationHook = Callable[[VnpuOp, VnpuResult, float | None], None]

log = logging.getLogger(__name__)
CREATE_TRIES = 3
DESTROY_TRIES = 3
# The pause between destroys of a vNPU still in use: about a second, jittered, as the one policy
# draws it.
DESTROY_BACKOFF = BackoffPolicy(initial=1.0, maximum=1.0)
NODE_WAIT_SECONDS = 5.0
NODE_POLL_SECONDS = 0.05


class CreateTimeoutError(BackendError):
    """The driver has not answered a create within the wait; the call goes on in its own thread."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the driver did not answer within {seconds:.1f}s")
        self.seconds = seconds


def _ignore(_op: VnpuOp, _result: VnpuResult, _seconds: float | None) -> None:
    pass


def lowest_free_id(id_range: tuple[int, int], taken: Collection[int]) -> int | None:
    """The lowest id of the chip's inclusive range that is not taken, or None when all are."""
    first, last = id_range
    return next((i for i in range(first, last + 1) if i not in taken), None)


class VnpuOperations:
    """Create, destroy and look at vNPUs through a VnpuBackend; `sleep` and the timings are
    injectable so tests never wait on the wall clock."""

    def __init__(
        self,
        backend: VnpuBackend,
        reader: VnpuReader,
        dev_root: Path,
        *,
        offered: frozenset[str] | None = None,
        retry_policy: BackoffPolicy = DESTROY_BACKOFF,
        node_wait_seconds: float = NODE_WAIT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        on_operation: OperationHook = _ignore,
    ) -> None:
        self.backend, self.reader, self.dev_root, self.offered = backend, reader, dev_root, offered
        self._on_operation = on_operation
        self._retry_policy, self._node_wait_seconds, self._sleep = retry_policy, node_wait_seconds, sleep
        self._guard = threading.Lock()
        self._creating: dict[int, float] = {}  # vNPU id -> start, of creates that outlived their wait

    def plans(self, devices: Sequence[Device], ours: frozenset[int]) -> dict[int, ChipPlan]:
        """How each chip is served now; `ours` are the vNPU ids the checkpoint records as created by
        us."""
        return self.reader.read(devices, ours)

    def live(self, physical_id: int) -> list[Vnpu]:
        return self.backend.list_vnpus(physical_id)

    def id_range(self, physical_id: int) -> tuple[int, int]:
        chip = self.backend.chip_vnpu(physical_id)
        if chip is None:
            raise VnpuError(driver_codes.DEVICE_NOT_EXIST, f"npu-{physical_id} reports no vNPU facts")
        return chip.id_range

    def create(
        self, physical_id: int, template: str, vnpu_id: int, *, wait: float, on_late_return: Callable[[], None]
    ) -> None:
        """Create the vNPU in a thread of its own and wait at most `wait` seconds for the driver.
        When it has not answered by then, raise CreateTimeoutError: the create goes on,
        `creating_since` reports its id, and when it returns at last (made or refused),
        `on_late_return` runs in its thread, before the id leaves `creating_since`."""
        started = time.monotonic()
        answer: Future[None] = Future()

        def call() -> None:
            try:
                self._create(physical_id, template, vnpu_id)
            except Exception as error:  # handed to the waiter, which raises it
                answer.set_exception(error)
            else:
                answer.set_result(None)
            with self._guard:
                late = vnpu_id in self._creating
            if late:
                try:
                    on_late_return()
                finally:
                    with self._guard:
                        del self._creating[vnpu_id]

        # A daemon thread: a driver call that never returns must not hold up the daemon's exit.
        threading.Thread(target=call, name=f"vnpu-create-{vnpu_id}", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            answer.result(timeout=wait)
        with self._guard:
            if not answer.done():
                self._creating[vnpu_id] = started
                log.error(
                    "create vNPU %s on npu-%d (id %d): the driver did not answer within %.1fs; it goes on without "
                    "its claim",
                    template,
                    physical_id,
                    vnpu_id,
                    wait,
                    extra={"physicalId": physical_id, "template": template, "vnpuId": vnpu_id},
                )
                raise CreateTimeoutError(wait)
        answer.result()

    def creating_since(self, vnpu_id: int) -> float | None:
        """When (time.monotonic) a create of this id that outlived its wait started; None unless one
        is running."""
        with self._guard:
            return self._creating.get(vnpu_id)

    def _create(self, physical_id: int, template: str, vnpu_id: int) -> None:
        started = time.monotonic()
        try:
            self.backend.create_vnpu(physical_id, template, vnpu_id)
        except VnpuError as error:
            # Called only once the overlap check found room, so a lack of resources is a hardware
            # rule the counters do not model (the 310P's vGroups, say).
            refused = error.code == driver_codes.INNER_ERR
            log.warning(
                "create vNPU %s on npu-%d (id %d) failed%s: %s",
                template,
                physical_id,
                vnpu_id,
                ": hardware refused a template mix the counters allow (offer one template per node with "
                "--vnpu-templates)"
                if refused
                else "",
                error,
                extra={"physicalId": physical_id, "template": template, "vnpuId": vnpu_id, "code": error.code},
            )
            self._on_operation("create", "refused", None)
            raise
        except BackendError:
            self._on_operation("create", "error", None)  # the call itself failed (npu-smi, DCMI)
            raise
        self._on_operation("create", "success", time.monotonic() - started)
        log.info(
            "created vNPU %s on npu-%d (id %d) in %.2fs",
            template,
            physical_id,
            vnpu_id,
            time.monotonic() - started,
            extra={"physicalId": physical_id, "template": template, "vnpuId": vnpu_id},
        )

    def destroy(self, physical_id: int, vnpu_id: int) -> None:
        """Destroy with the driver's retries (a vNPU still in use frees up shortly after its
        container stops); one that does not exist is already what we want. Raises the last
        BackendError."""
        retrying = Retrying(
            stop=stop_after_attempt(DESTROY_TRIES),
            wait=BackoffWait(self._retry_policy),
            retry=retry_if_exception_type(BackendError),
            sleep=self._sleep,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                self._destroy_once(physical_id, vnpu_id, attempt.retry_state.attempt_number)

    def _destroy_once(self, physical_id: int, vnpu_id: int, attempt: int) -> None:
        try:
            self.backend.destroy_vnpu(physical_id, vnpu_id)
        except VnpuNotFoundError:
            self._on_operation("destroy", "success", None)
            log.info("vNPU %d on npu-%d is already gone", vnpu_id, physical_id, extra={"vnpuId": vnpu_id})
            return
        except BackendError as error:
            self._on_operation("destroy", "refused" if isinstance(error, VnpuError) else "error", None)
            log.warning(
                "destroy vNPU %d on npu-%d failed (try %d of %d): %s",
                vnpu_id,
                physical_id,
                attempt,
                DESTROY_TRIES,
                error,
                extra={"physicalId": physical_id, "vnpuId": vnpu_id, "code": getattr(error, "code", None)},
            )
            raise
        self._on_operation("destroy", "success", None)
        log.info("destroyed vNPU %d on npu-%d", vnpu_id, physical_id, extra={"vnpuId": vnpu_id})

    def node_appears(self, vnpu_id: int) -> bool:
        """Whether `<dev-root>/vdavinci<id>` exists within the wait (the driver may make it after
        returning)."""
        node = self.dev_root / vnpu_node(vnpu_id)
        deadline = time.monotonic() + self._node_wait_seconds
        while not node.exists():
            if time.monotonic() >= deadline:
                return False
            self._sleep(NODE_POLL_SECONDS)
        return True
