"""Retry with exponential back-off whose sleeps an event can cut short (tenacity)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

T = TypeVar("T")


async def retry_forever(
    attempt: Callable[[], Awaitable[T]], *, what: str, log: logging.Logger,
    retry_on: tuple[type[BaseException], ...], wake: asyncio.Event | None = None,
    initial: float = 0.1, maximum: float = 5.0,
) -> T:
    """Call `attempt` until it succeeds; each failure is logged once per back-off step.

    Setting `wake` ends the current sleep at once (e.g. kubelet.sock just appeared).
    """

    async def sleep(seconds: float) -> None:
        if wake is None:
            await asyncio.sleep(seconds)
            return
        # asyncio.wait, not wait_for: on 3.11 wait_for can swallow a cancellation that races the wake-up.
        waiter = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({waiter}, timeout=seconds)
        finally:
            waiter.cancel()
        wake.clear()

    def report(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        seconds = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s failed (attempt %d), retrying in %.1fs: %s", what, state.attempt_number, seconds, error,
                    extra={"error": str(error)})

    retrying = AsyncRetrying(
        sleep=sleep, wait=wait_exponential(multiplier=initial, max=maximum),
        retry=retry_if_exception_type(retry_on), before_sleep=report, reraise=True,
    )
    async def call() -> T:
        # tenacity awaits only coroutine functions; a lambda returning an awaitable would not be awaited.
        return await attempt()

    return await retrying(call)
