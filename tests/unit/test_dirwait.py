"""wait_for_directory: it waits by watching, one level at a time, and never creates what it waits for."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from npu_plugin.dirwait import nearest_existing, wait_for_directory


def test_nearest_existing(tmp_path: Path) -> None:
    assert nearest_existing(tmp_path / "a" / "b" / "c") == tmp_path
    assert nearest_existing(tmp_path) == tmp_path
    assert nearest_existing(Path("/no-such-root-dir/x")) == Path("/")


def test_a_directory_that_exists_is_no_wait(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="npu_plugin.dirwait"):
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

    with caplog.at_level(logging.INFO, logger="npu_plugin.dirwait"):
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
