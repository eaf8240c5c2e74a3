"""Small asyncio helpers for supervised tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


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
