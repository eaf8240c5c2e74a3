"""No background task of the daemon dies unnoticed: a task failing on an unexpected error (a bug)
stops the whole daemon in order and the error reaches the caller, which exits 1 (the DaemonSet then
restarts it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from npu_plugin.ascend.device import Health
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.config import Config, Mode
from npu_plugin.daemon import Daemon


class BrokenSample(FakeBackend):
    """The Backend seam: a backend whose `sample` breaks its never-raises promise, as a bug
    would."""

    def sample(self) -> dict[int, Health]:
        raise RuntimeError("a bug in the health sample")


def test_a_failing_task_stops_the_daemon_in_order_and_reaches_the_caller(tmp_path: Path) -> None:
    dev_root = tmp_path / "dev"
    dev_root.mkdir()
    kubelet_dir = tmp_path / "kubelet" / "device-plugins"  # absent: the device plugin task waits for it
    options = BackendOptions(kind=BackendKind.FAKE, fake_profile="atlas-800t-a2", dev_root=dev_root)
    config = Config(mode=Mode.DEVICE_PLUGIN, backend=options, health_interval=0.01, device_plugin_path=kubelet_dir)
    backend = BrokenSample(profile="atlas-800t-a2", dev_root=dev_root)
    daemon = Daemon(config, backend, backend.discover())

    with pytest.raises(RuntimeError, match="a bug in the health sample"):
        asyncio.run(asyncio.wait_for(daemon.run(), 60))  # the timeout only bounds a failing test
    assert daemon.stop.is_set(), "the other tasks were told to stop"
