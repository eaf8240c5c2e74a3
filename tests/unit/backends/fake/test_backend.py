"""The fake backend's inventory file: a size cap, the last good inventory kept, health from memory,
a rewrite made before the watch started."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from npu_plugin.ascend.device import Device, Health
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.backends.fake.inventory_file import MAX_INVENTORY_BYTES
from npu_plugin.errors import InventoryFileError
from npu_plugin.host.fswatch import DirectoryWatch
from tests.support.daemon import write_inventory
from tests.support.fake_devices import profile_devices

A2 = profile_devices("atlas-800t-a2")


def oversized(path: Path) -> Path:
    with path.open("wb") as file:
        file.write(b"# padding\n" * (MAX_INVENTORY_BYTES // 10 + 1))
    return path


def test_an_oversized_file_is_refused_at_start_naming_the_cap_and_the_file(tmp_path: Path) -> None:
    path = oversized(tmp_path / "inventory.yaml")
    with pytest.raises(InventoryFileError) as raised:
        FakeBackend(path).discover()
    assert str(raised.value) == f"{path}: larger than the 4 MiB an inventory file may have"


def test_a_file_at_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    write_inventory(path, A2[:1])
    text = path.read_bytes()
    path.write_bytes(text + b"#" * (MAX_INVENTORY_BYTES - len(text) - 1) + b"\n")
    assert [d.physical_id for d in FakeBackend(path).discover()] == [0]


def test_an_oversized_rewrite_while_serving_keeps_the_last_good_inventory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "inventory.yaml"
    write_inventory(path, A2)
    backend = FakeBackend(path)
    backend.discover()
    oversized(path)
    assert backend.reload() == A2
    assert caplog.text.count("larger than the 4 MiB") == 1
    assert backend.reload() == A2
    assert caplog.text.count("larger than the 4 MiB") == 1, "logged once per bad rewrite"


def test_health_samples_read_the_inventory_last_read_not_the_file(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    write_inventory(path, A2)
    backend = FakeBackend(path)
    backend.discover()
    write_inventory(path, [replace(A2[0], health=Health.CRITICAL), *A2[1:]])
    assert set(backend.sample().values()) == {Health.OK}, "a sample parses nothing"
    backend.reload()  # what the file watch does after the write
    assert backend.sample()[0] is Health.CRITICAL


def test_a_rewrite_between_discovery_and_the_watch_start_is_picked_up(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    write_inventory(path, A2)
    backend = FakeBackend(path)
    backend.discover()
    write_inventory(path, [replace(d, health=Health.CRITICAL) if d.physical_id == 5 else d for d in A2])

    async def watched() -> list[list[Device]]:
        changes: list[list[Device]] = []
        watch = DirectoryWatch()
        backend.watch_changes(watch, changes.append)
        watch.start()  # no event will come: the write happened before
        try:
            for _ in range(200):
                await asyncio.sleep(0.01)
                if changes:
                    break
        finally:
            watch.stop()
        return changes

    changes = asyncio.run(watched())
    assert [d.health for d in changes[0]] == [Health.CRITICAL if d.physical_id == 5 else d.health for d in A2]
