"""The one back-off policy of every retry loop: exponential, capped, with jitter, honouring
Retry-After.

Retried calls run on tenacity (`retry_forever` here, the vNPU destroy in `dra/vnpus.py`) with
`BackoffWait` as the wait strategy and `log_each_step` as `before_sleep`; the long-running loops
(the slice watch, supervised tasks) keep their own failure count in a `Backoff`.

Jitter matters at fleet scale: 10,000 daemons that lost the API server together must not come back
in lock-step, so each pause is drawn from the upper half of its exponential step.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.wait import wait_base

T = TypeVar("T")
# More doublings than any cap needs: 2.0 ** 1024 overflows, which after ~1,000 failures in a row (an
# hour or more of an unreachable API server) would end the retrying loop.
MAX_DOUBLINGS = 64
# A server asking for a longer pause than this is obeyed only this far: the daemon must come back
# eventually.
RETRY_AFTER_LIMIT = 300.0


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    initial: float = 0.1
    maximum: float = 5.0

    def delay(
        self, failures: int, retry_after: float | None = None, draw: Callable[[], float] = random.random
    ) -> float:
        """The pause after `failures` consecutive failures, at least the server's `retry_after`
        (capped)."""
        step = min(self.maximum, self.initial * 2.0 ** min(max(0, failures - 1), MAX_DOUBLINGS))
        return max(step * (0.5 + 0.5 * draw()), min(retry_after or 0.0, RETRY_AFTER_LIMIT))


class Backoff:
    """The consecutive-failure count of one loop: `failed` gives the next pause, `succeeded` resets
    it. `draw` gives the jitter of each pause (uniform in [0, 1))."""

    def __init__(self, policy: BackoffPolicy, draw: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self.failures = 0
        self._draw = draw

    def failed(self, retry_after: float | None = None) -> float:
        self.failures += 1
        return self.policy.delay(self.failures, retry_after, self._draw)

    def succeeded(self) -> None:
        self.failures = 0


class BackoffWait(wait_base):
    """The policy as a tenacity wait strategy: the pause after the attempt's failures in a row, at
    least the `retry_after` the failure carries (a KubeApiError of a 429 or 503)."""

    def __init__(self, policy: BackoffPolicy, draw: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self._draw = draw

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        return self.policy.delay(retry_state.attempt_number, getattr(error, "retry_after", None), self._draw)


def log_each_step(
    what: str, log: logging.Logger, repeat_level: int = logging.WARNING
) -> Callable[[RetryCallState], None]:
    """A tenacity `before_sleep`: one line per back-off step, naming the attempt, pause and error; a
    warning, except a failure repeating the one before (same text), logged at `repeat_level`."""
    last: list[str] = []

    def before_sleep(retry_state: RetryCallState) -> None:
        outcome, action = retry_state.outcome, retry_state.next_action
        error = outcome.exception() if outcome is not None else None
        level = repeat_level if last == [str(error)] else logging.WARNING
        last[:] = [str(error)]
        log.log(
            level,
            "%s failed (attempt %d), retrying in %.1fs: %s",
            what,
            retry_state.attempt_number,
            action.sleep if action is not None else 0.0,
            error,
            extra={"error": str(error)},
        )

    return before_sleep


async def retry_forever(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    log: logging.Logger,
    retry_on: tuple[type[BaseException], ...],
    policy: BackoffPolicy = BackoffPolicy(),
    repeat_level: int = logging.WARNING,
) -> T:
    """Call `attempt` until it succeeds; each failure is logged once per back-off step.

    A failure repeating the one before (same text) is logged at `repeat_level`: a caller expecting a
    long wait (the device plugin before the kubelet starts) passes DEBUG, so the log holds the first
    failure, any new one, and the recovery, which counts them. A failure carrying a `retry_after`
    attribute (a KubeApiError of a 429 or 503) pauses at least that long. The sleeps are plain
    `asyncio.sleep`, so cancelling the caller ends the retries at once.
    """
    retrying = AsyncRetrying(
        wait=BackoffWait(policy),
        retry=retry_if_exception_type(retry_on),
        before_sleep=log_each_step(what, log, repeat_level),
        reraise=True,
    )
    attempts = 0

    async def call() -> T:  # tenacity awaits only what a coroutine function returns, not a lambda's awaitable
        nonlocal attempts
        attempts += 1
        return await attempt()

    result: T = await retrying(call)
    if attempts > 1:
        log.info("%s succeeded after %d failed attempts", what, attempts - 1)
    return result
