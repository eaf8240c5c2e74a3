"""Small asyncio helpers for supervised tasks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from npu_plugin.aio.backoff import Backoff, BackoffPolicy

T = TypeVar("T")
RESTART_BACKOFF = BackoffPolicy(initial=1.0, maximum=60.0)


async def supervised(
    run: Callable[[], Awaitable[None]], *, what: str, log: logging.Logger, policy: BackoffPolicy = RESTART_BACKOFF
) -> None:
    """Run `run()` until it returns; after an unexpected error, log it with its cause and run it
    again after a back-off, so a background task can never die unnoticed. Cancellation ends it at
    once."""
    backoff = Backoff(policy)
    while True:
        try:
            await run()
            return
        except Exception as error:
            pause = backoff.failed()
            log.error("%s stopped on an unexpected error, restarting in %.1fs: %r", what, pause, error, exc_info=True)
            await asyncio.sleep(pause)


async def first_of(*awaitables: Awaitable[Any]) -> None:
    """Wait until the first of these finishes, cancel the rest, re-raise the finisher's error."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error


async def until_closed(source: AsyncGenerator[T, None], closing: asyncio.Event) -> AsyncGenerator[T, None]:
    """Items of `source` until `closing` is set; the pending read is cancelled before the source
    closes, so a consumer that is cancelled mid-read (a client dropping its stream) leaks
    nothing."""
    closed = asyncio.ensure_future(closing.wait())
    step: asyncio.Future[T] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(source))
            await asyncio.wait({step, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                return
            yield step.result()
    finally:
        pending = [task for task in (closed, step) if task is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await source.aclose()


async def repeating(source: AsyncGenerator[T, None], every: float) -> AsyncGenerator[tuple[T, bool], None]:
    """Each item of `source` as `(item, False)`, and the latest one again as `(item, True)` whenever
    `every` seconds pass without a new one; ends with `source`, which it closes."""
    step: asyncio.Future[T] = asyncio.ensure_future(anext(source))
    try:
        latest, repeated = await step, False
        while True:
            yield latest, repeated
            if step.done():
                step = asyncio.ensure_future(anext(source))
            await asyncio.wait({step}, timeout=every)
            repeated = not step.done()
            if not repeated:
                latest = step.result()
    except StopAsyncIteration:
        return
    finally:
        if not step.done():
            step.cancel()
            await asyncio.gather(step, return_exceptions=True)
        await source.aclose()
