"""fswatch.Reread: a burst of change events costs one or two reads, never one per event; the latest wins."""

from __future__ import annotations

import asyncio
import threading

import pytest

from npu_plugin.errors import InventoryFileError
from npu_plugin.fswatch import Reread


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
