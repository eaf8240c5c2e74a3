"""Crash-safe file replacement (temp file, fsync, rename, fsync the directory) and directories of
exact modes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace `path` with `data` so a reader sees the old or the new content, never a half.

    `durable=False` skips the fsyncs: for files derived from a durable record and rewritten on
    demand (CDI specs, which the checkpoint and the kubelet's next Prepare restore), the rename
    alone is enough.
    """
    directory = path.parent
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        fsync_directory(directory)


def make_directories(directory: Path, mode: int) -> None:
    """Create `directory` and its missing parents with exactly `mode`; existing ones keep theirs.

    The mode is set after mkdir, not left to the umask: binding a socket narrows the process-wide
    umask for a moment (`sockets.start_unix_server`), and a directory made by another thread then
    would lack its x bits.
    """
    for folder in reversed([d for d in (directory, *directory.parents) if not d.exists()]):
        try:
            folder.mkdir(mode=mode)
        except FileExistsError:  # an old and a new pod starting together (rolling update) race to create it
            continue
        # Through a descriptor opened without following links: a symlink swapped in meanwhile is
        # refused.
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def remove_leftovers(directory: Path, pattern: str) -> list[Path]:
    """Remove the temporary files a crash inside `write_atomic` left for targets named like
    `pattern` (a glob); callers make sure no write of such a target is in progress. Returns what was
    removed."""
    removed = []
    for temp in directory.glob(f".{pattern}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
            removed.append(temp)
    return removed


def remove_file(path: Path, *, durable: bool = True) -> bool:
    """Remove `path` if present (durably unless told otherwise); True when something was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_directory(path.parent)
    return True


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
