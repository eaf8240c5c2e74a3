"""wait_for_directory: it waits by watching, one level at a time, and never creates what it waits
for. wait_until_gone: it returns when the file goes, however it goes, and sets no timer while it
waits."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from npu_plugin.host.dirwait import nearest_existing, wait_for_directory, wait_until_gone
from tests.support.timerloop import run_counting_timers


def test_nearest_existing(tmp_path: Path) -> None:
    assert nearest_existing(tmp_path / "a" / "b" / "c") == tmp_path
    assert nearest_existing(tmp_path) == tmp_path
    assert nearest_existing(Path("/no-such-root-dir/x")) == Path("/")


def test_a_directory_that_exists_is_no_wait(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="npu_plugin.host.dirwait"):
        assert asyncio.run(wait_for_directory(tmp_path, asyncio.Event(), "the kubelet"))
    assert caplog.records == []


def test_waits_for_every_level_to_be_created_and_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = tmp_path / "var" / "lib" / "kubelet" / "device-plugins"

    async def scenario() -> bool:
        waiting = asyncio.create_task(wait_for_directory(target, asyncio.Event(), "the kubelet"))
        for level in (tmp_path / "var", tmp_path / "var" / "lib", target.parent, target):
            await asyncio.sleep(0.1)
            assert not waiting.done(), f"returned before {level} existed"
            level.mkdir()
        return await asyncio.wait_for(waiting, 10)

    with caplog.at_level(logging.INFO, logger="npu_plugin.host.dirwait"):
        assert asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"waiting for the kubelet to create {target}; npu-plugin does not create it",
        f"{target} exists now",
    ]


def test_stop_ends_the_wait_and_nothing_is_created(tmp_path: Path) -> None:
    target = tmp_path / "kubelet" / "device-plugins"

    async def scenario() -> bool:
        stop = asyncio.Event()
        waiting = asyncio.create_task(wait_for_directory(target, stop, "the kubelet"))
        await asyncio.sleep(0.1)
        stop.set()
        return await asyncio.wait_for(waiting, 10)

    assert not asyncio.run(scenario())
    assert not (tmp_path / "kubelet").exists()


def _remove(path: Path) -> None:
    path.unlink()


def _rename_in_place(path: Path) -> None:
    path.rename(path.with_name(".old-" + path.name))


def _rename_out(path: Path) -> None:
    path.rename(path.parent.parent / "moved.sock")


def _remove_directory(path: Path) -> None:
    shutil.rmtree(path.parent)


@pytest.mark.parametrize("remove", [_remove, _rename_in_place, _rename_out, _remove_directory])
def test_returns_when_the_file_goes_without_setting_a_timer(tmp_path: Path, remove: Callable[[Path], None]) -> None:
    target = tmp_path / "registry" / "driver-reg.sock"
    target.parent.mkdir()
    target.touch()
    (target.parent / "other-reg.sock").touch()

    async def scenario() -> bool:
        waiting = asyncio.create_task(wait_until_gone(target, asyncio.Event()))
        for _ in range(10):  # the task starts its watch and waits; nothing of that takes a timer
            await asyncio.sleep(0)
        assert not waiting.done()
        (target.parent / "other-reg.sock").unlink()  # another file's event wakes it, and it waits on
        target.touch()
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiting.done()
        remove(target)
        return await waiting

    gone, loop = run_counting_timers(scenario)
    assert gone
    assert loop.timers_by_task == []


def test_a_file_already_gone_or_without_its_directory_is_no_wait(tmp_path: Path) -> None:
    assert asyncio.run(wait_until_gone(tmp_path / "absent.sock", asyncio.Event()))
    assert asyncio.run(wait_until_gone(tmp_path / "no-such-dir" / "absent.sock", asyncio.Event()))


def test_stop_ends_the_wait_for_removal_and_the_file_stays(tmp_path: Path) -> None:
    target = tmp_path / "driver-reg.sock"
    target.touch()

    async def scenario() -> bool:
        stop = asyncio.Event()
        waiting = asyncio.create_task(wait_until_gone(target, stop))
        await asyncio.sleep(0.1)
        stop.set()
        return await asyncio.wait_for(waiting, 10)

    assert not asyncio.run(scenario())
    assert target.exists()
