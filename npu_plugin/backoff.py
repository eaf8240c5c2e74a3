"""Retry with exponential back-off (tenacity), logging each failure once per step."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

T = TypeVar("T")


async def retry_forever(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    log: logging.Logger,
    retry_on: tuple[type[BaseException], ...],
    initial: float = 0.1,
    maximum: float = 5.0,
) -> T:
    """Call `attempt` until it succeeds; each failure is logged once per back-off step.

    The sleeps are plain `asyncio.sleep`, so cancelling the caller ends the retries at once.
    """

    def report(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        seconds = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s failed (attempt %d), retrying in %.1fs: %s",
            what,
            state.attempt_number,
            seconds,
            error,
            extra={"error": str(error)},
        )

    retrying = AsyncRetrying(
        sleep=asyncio.sleep,
        wait=wait_exponential(multiplier=initial, max=maximum),
        retry=retry_if_exception_type(retry_on),
        before_sleep=report,
        reraise=True,
    )

    async def call() -> T:
        # tenacity awaits only coroutine functions; a lambda returning an awaitable would not be awaited.
        return await attempt()

    return await retrying(call)
