"""A real daemon whose fake inventory file grows huge in a burst of writes: memory stays bounded,
the file is refused by its size, and the next good rewrite is picked up."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from npu_plugin.ascend.device import Health
from tests.support.daemon import DaemonProcess, Launcher, write_inventory
from tests.support.fake_devices import profile_devices

A2 = profile_devices("atlas-800t-a2")
CHUNK = b"#" * (2**20 - 1) + b"\n"
# The daemon idles near 45 MiB; parsing every 1 MiB write of a 50 MB file took it past 400 MiB.
RSS_LIMIT_MIB = 150


def daemon_args(inventory: Path, dev_root: Path, plugin_dir: Path) -> list[str]:
    return [
        "--backend=fake",
        f"--fake-inventory={inventory}",
        f"--dev-root={dev_root}",
        f"--device-plugin-path={plugin_dir}",
        "--health-interval=0.1",
        "--health-failure-threshold=1",
    ]


def peak_rss_mib(daemon: DaemonProcess) -> float:
    status = Path(f"/proc/{daemon.pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1)) / 1024


def test_a_50_mb_burst_keeps_memory_bounded_and_the_next_good_rewrite_wins(
    tmp_path: Path, short_dir: Path, dev_root: Path, launch_daemon: Launcher
) -> None:
    inventory = tmp_path / "inventory.yaml"
    write_inventory(inventory, A2)
    daemon = launch_daemon(*daemon_args(inventory, dev_root, short_dir / "dp"))
    daemon.wait_for_log("starting")
    with inventory.open("wb") as file:
        for _ in range(50):
            file.write(CHUNK)
            file.flush()
    daemon.wait_for_log(f"{inventory}: larger than the 4 MiB an inventory file may have")
    write_inventory(inventory, [replace(A2[5], health=Health.CRITICAL) if d is A2[5] else d for d in A2])
    daemon.wait_for_log("turned unhealthy")
    assert peak_rss_mib(daemon) < RSS_LIMIT_MIB
    log = daemon.log()
    rejected = [line for line in log.splitlines() if "larger than the 4 MiB" in line]
    assert len(rejected) == 1, "one warning per bad rewrite, not one per write"
    assert "Traceback" not in log


def test_an_oversized_file_at_start_is_one_line_naming_the_cap(
    tmp_path: Path, short_dir: Path, dev_root: Path, launch_daemon: Launcher
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_bytes(CHUNK * 5)
    daemon = launch_daemon(*daemon_args(inventory, dev_root, short_dir / "dp"))
    assert daemon.process.wait(30) == 1
    assert daemon.log() == (f"npu-plugin serve: error: {inventory}: larger than the 4 MiB an inventory file may have\n")
