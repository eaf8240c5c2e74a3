"""Small asyncio helpers for supervised tasks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


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
    """Items of `source` until `closing` is set; the pending read is cancelled before the source closes,
    so a consumer that is cancelled mid-read (a client dropping its stream) leaks nothing."""
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
