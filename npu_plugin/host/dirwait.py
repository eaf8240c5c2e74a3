"""Wait, by watching rather than polling, for a directory someone else (the kubelet) creates, or for
a file to go."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from npu_plugin.aio.tasks import first_of
from npu_plugin.host.fswatch import DirectoryWatch

log = logging.getLogger(__name__)
# A missed file-system event (some overlay and network file systems drop them) costs at most this
# long.
RECHECK_SECONDS = 60.0


def nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (`/` at worst)."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())


async def wait_for_directory(path: Path, stop: asyncio.Event, owner: str) -> bool:
    """True once `path` is a directory, False when `stop` is set first; never creates it.

    Watches the nearest existing ancestor (one level at a time, as `mkdir -p` goes) and logs once
    that it is waiting for `owner` to create `path`, and once when it appeared.
    """
    waited = False
    while not stop.is_set():
        if path.is_dir():
            if waited:
                log.info("%s exists now", path)
            return True
        if not waited:
            log.warning("waiting for %s to create %s; npu-plugin does not create it", owner, path)
            waited = True
        await _next_change(path, stop)
    return False


async def _next_change(path: Path, stop: asyncio.Event) -> None:
    """Until something changes in the nearest existing ancestor of `path`, `stop`, or the re-check
    time."""
    changed = asyncio.Event()
    watched = nearest_existing(path)
    watch = DirectoryWatch()
    watch.add(watched, lambda _path, _kind: changed.set())
    watch.start()
    try:
        # What was created before the watch started sends no event: look once more first.
        if nearest_existing(path) == watched:
            await first_of(changed.wait(), stop.wait(), asyncio.sleep(RECHECK_SECONDS))
    finally:
        await asyncio.to_thread(watch.stop)


async def wait_until_gone(path: Path, stop: asyncio.Event) -> bool:
    """True once `path` no longer exists (deleted, renamed away, or its directory removed), False
    when `stop` is set first. Watches the directory of `path` and sets no timer: waiting costs
    nothing until something changes.
    """
    changed = asyncio.Event()
    watch = DirectoryWatch()
    try:
        watch.add(path.parent, lambda _path, _kind: changed.set())
        try:
            watch.start()
        except FileNotFoundError:  # its directory went first
            return not stop.is_set()
        while not stop.is_set():
            changed.clear()
            # What went before the watch started sends no event: look after clearing, before
            # waiting.
            if not path.exists():
                return True
            await first_of(changed.wait(), stop.wait())
        return False
    finally:
        await asyncio.to_thread(watch.stop)
