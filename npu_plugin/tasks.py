"""Small asyncio helpers for supervised tasks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
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


async def until_closed(source: AsyncGenerator[T, None], closing: asyncio.Event) -> AsyncIterator[T]:
    """Items of `source` until `closing` is set; the source is closed either way."""
    closed = asyncio.ensure_future(closing.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({step, closed}, return_when=asyncio.FIRST_COMPLETED)
            if closed in done:
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)
                return
            yield step.result()
    finally:
        closed.cancel()
        await source.aclose()
