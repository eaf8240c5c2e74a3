"""fswatch.Reread: a burst of change events costs one or two reads, never one per event; the latest
wins. DirectoryWatch: the kernel reports only the changes it relays, never a directory listed or a
file read; a file changed before its watch started is read once it starts."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from watchdog.events import FileDeletedEvent

from npu_plugin.errors import InventoryFileError
from npu_plugin.host.fswatch import DirectoryWatch, Relay, Reread


class Source:
    """A file stand-in whose reads block until released, so the test decides when each read ends."""

    def __init__(self) -> None:
        self.version = 0
        self.reads = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = threading.Event()
        self.started = threading.Event()

    def read(self) -> int:
        self.reads += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        seen = self.version
        self.started.set()
        self.release.wait(10)
        self.in_flight -= 1
        return seen


def test_a_burst_during_a_read_costs_one_more_read_and_delivers_the_latest() -> None:
    async def scenario() -> tuple[Source, list[int]]:
        source, delivered = Source(), []
        reread = Reread(source.read, delivered.append)
        reread.changed()
        await asyncio.to_thread(source.started.wait, 10)
        for version in range(1, 51):  # 50 writes land while the first read is still parsing
            source.version = version
            reread.changed()
        source.release.set()
        while reread.busy:
            await asyncio.sleep(0)
        return source, delivered

    source, delivered = asyncio.run(scenario())
    assert (source.reads, source.most_in_flight) == (2, 1)
    assert delivered == [50], "the first read's stale result is dropped; the latest content wins"


def test_an_idle_change_is_one_read() -> None:
    async def scenario() -> tuple[Source, list[int]]:
        source, delivered = Source(), []
        source.release.set()
        reread = Reread(source.read, delivered.append)
        for version in (1, 2):
            source.version = version
            reread.changed()
            while reread.busy:
                await asyncio.sleep(0)
        return source, delivered

    source, delivered = asyncio.run(scenario())
    assert (source.reads, delivered) == (2, [1, 2])


def test_a_failed_read_is_logged_and_the_next_change_reads_again(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[int] = []

    def read() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise InventoryFileError("inventory.yaml: larger than the 4 MiB an inventory file may have")
        return len(attempts)

    async def scenario() -> list[int]:
        delivered: list[int] = []
        reread = Reread(read, delivered.append)
        for _ in range(2):
            reread.changed()
            while reread.busy:
                await asyncio.sleep(0)
        return delivered

    assert asyncio.run(scenario()) == [2]
    assert "re-reading a changed file failed: inventory.yaml: larger than the 4 MiB" in caplog.text


IN_ACCESS, IN_CLOSE_NOWRITE, IN_OPEN = 0x1, 0x10, 0x20  # <sys/inotify.h>
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x2, 0x8, 0x40, 0x80, 0x100, 0x200


def inotify_masks(directory: Path) -> list[int]:
    """The event masks this process's inotify watches on `directory` ask the kernel for (proc(5),
    fdinfo)."""
    inode, masks = directory.stat().st_ino, []
    for info in Path("/proc/self/fdinfo").iterdir():
        try:
            lines = info.read_text().splitlines()
        except OSError:  # an fd closed since the listing
            continue
        for line in lines:
            if line.startswith("inotify wd:"):
                fields = dict(field.split(":", 1) for field in line.split()[1:])
                if int(fields["ino"], 16) == inode:
                    masks.append(int(fields["mask"], 16))
    return masks


def test_a_watched_directory_listed_or_a_file_in_it_read_wakes_no_thread(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        watch = DirectoryWatch()
        watch.add(tmp_path, lambda _path, _kind: None)
        watch.start()
        try:
            return inotify_masks(tmp_path)
        finally:
            await asyncio.to_thread(watch.stop)

    [mask] = asyncio.run(scenario())
    assert mask & (IN_ACCESS | IN_OPEN | IN_CLOSE_NOWRITE) == 0, hex(mask)
    relayed = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    assert mask & relayed == relayed, hex(mask)


@pytest.mark.parametrize(("up_to_date", "reads"), [(False, 1), (True, 0)])
def test_a_file_changed_before_its_watch_started_is_read_once_the_watch_starts(
    tmp_path: Path, up_to_date: bool, reads: int
) -> None:
    """No event tells of a write between the last read and the watch's start: `up_to_date` does."""
    path = tmp_path / "inventory.yaml"
    path.write_text("written before the watch\n")

    async def scenario() -> list[str]:
        delivered: list[str] = []
        watch = DirectoryWatch()
        watch.add_file(path, path.read_text, delivered.append, up_to_date=lambda: up_to_date)
        watch.start()
        try:
            for _ in range(50):  # the read runs in a thread: give it the loop's turns, not a deadline
                await asyncio.sleep(0.01)
                if delivered:
                    break
        finally:
            watch.stop()
        return delivered

    assert asyncio.run(scenario()) == ["written before the watch\n"] * reads


def test_an_event_after_the_loop_closed_is_dropped_quietly() -> None:
    """A watchdog thread can hear one last event (a temporary directory removed at shutdown) after the loop it
    relays to has closed: that must not kill the thread with "Event loop is closed"."""
    loop = asyncio.new_event_loop()
    relay = Relay(loop, lambda _path, _kind: None)
    loop.close()
    relay.on_any_event(FileDeletedEvent("/tmp/gone"))
