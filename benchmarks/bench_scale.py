"""A 1,024-device node (fake inventory): slices and their chunking, the ListAndWatch message,
Allocate.

DRA: time from start to all 1,024 devices published (a complete pool), and how many slices carry
them. Device plugin: the ListAndWatch message the kubelet receives (bytes) and what building it
costs (timed in process, against the same for 8 devices), and Allocate on the 1,024-device daemon
against an 8-device one — interleaved, in the same run, both with a 60 s health poll so the fake
backend's re-reading of a 240 kB inventory file stays out of the numbers. Nothing here asserts on
time. Targets: published in <= 2 s; 128 devices per slice (8 slices); Allocate p50 within 1.25x of
the 8-device daemon's.
"""

from __future__ import annotations

import asyncio
import time
import timeit
from pathlib import Path
from typing import Any

from benchmarks.bench import FLOOR, echo_server, interleaved, served
from benchmarks.common import (
    FULL,
    NODE,
    RESOURCE,
    Budget,
    dev_root,
    dra_dirs,
    dra_serve_argv,
    fake_api,
    percentile,
    published,
    slice_count,
    wait_for,
    write_inventory,
)
from benchmarks.report import Row, at_most
from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.deviceplugin.service import list_response
from npu_plugin.inventory.state import Inventory
from npu_plugin.sim.rest import RestClient
from tests.support.cleanup import process, temporary_directory
from tests.support.fake_devices import many_devices

DEVICES = 1024
TARGETS = {"published_s": 2.0, "slices": 8, "allocate_p50_ratio": 1.25}
BIG, SMALL = "1024-devices", "8-devices"
QUIET = ("--health-interval", "60")


async def publish_time(work: Path, url: str, inventory: Path) -> tuple[float, int]:
    """Seconds from start to the complete pool of 1,024 devices, and its number of slices."""
    rest = RestClient(url)
    argv = dra_serve_argv(inventory, dev_root(work), dra_dirs(work))
    expected = [f"npu-{i}" for i in range(DEVICES)]
    with process(argv, work / "dra.log"):
        started = time.monotonic()
        await wait_for(lambda: published(rest) == expected, 60, "1,024 published devices", interval=0.005)
        seconds = time.monotonic() - started
    return seconds, slice_count(rest)


def build_seconds(count: int, rounds: int = 50) -> float:
    snapshot = Inventory(many_devices(count), failure_threshold=2, recovery_threshold=3).snapshot()
    return timeit.timeit(lambda: list_response(snapshot), number=rounds) / rounds


async def device_plugin(work: Path, inventory: Path, budget: Budget) -> dict[str, Any]:
    small = write_inventory(work / "small.yaml", many_devices(8))
    async with (
        served(work, BIG, *QUIET, source=("--fake-inventory", str(inventory))) as big,
        served(work, SMALL, *QUIET, source=("--fake-inventory", str(small))) as little,
    ):
        await wait_for(lambda: len(big.kubelet.plugin(RESOURCE).devices) == DEVICES, 30, "the 1,024-device list")
        message = pb.ListAndWatchResponse(devices=list(big.kubelet.plugin(RESOURCE).devices.values()))
        with echo_server(work) as echo:
            await wait_for(echo.exists, 30, "echo server")
            daemons = {BIG: big.socket, SMALL: little.socket}
            samples = await interleaved(daemons, {FLOOR: echo}, budget.calls // 2, budget.warmup)
    p50 = {name: percentile(values, 0.5) * 1e6 for name, values in samples.items()}
    p99 = {name: percentile(values, 0.99) * 1e6 for name, values in samples.items()}
    return {
        "list_bytes": message.ByteSize(),
        "list_build_ms": round(build_seconds(DEVICES) * 1e3, 3),
        "list_build_8_ms": round(build_seconds(8) * 1e3, 3),
        "calls": budget.calls // 2,
        "allocate_p50_us": round(p50[BIG], 1),
        "allocate_p99_us": round(p99[BIG], 1),
        "allocate_8_p50_us": round(p50[SMALL], 1),
        "allocate_8_p99_us": round(p99[SMALL], 1),
        "floor_p50_us": round(p50[FLOOR], 1),
        "allocate_p50_ratio": round(p50[BIG] / p50[SMALL], 2),
        "allocate_p99_ratio": round(p99[BIG] / p99[SMALL], 2),
    }


async def measure(work: Path, url: str, budget: Budget) -> dict[str, Any]:
    inventory = write_inventory(work / "inventory.yaml", many_devices(DEVICES))
    seconds, slices = await publish_time(work, url, inventory)
    return {
        "devices": DEVICES,
        "published_s": round(seconds, 3),
        "slices": slices,
        **await device_plugin(work, inventory, budget),
    }


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    return [
        Row(
            "start -> 1,024 devices published",
            f"{r['published_s']:.3f} s",
            "DRA mode, complete pool",
            f"<= {t['published_s']:g} s",
            at_most(r["published_s"], t["published_s"]),
        ),
        Row(
            "slices for 1,024 devices",
            f"{r['slices']}",
            f"{r['devices'] // r['slices']} devices each",
            f"{t['slices']} (128 per slice)",
            r["slices"] == t["slices"],
        ),
        Row("ListAndWatch message", f"{r['list_bytes'] / 1024:.1f} KiB", f"{r['list_bytes']} bytes"),
        Row("ListAndWatch build", f"{r['list_build_ms']:.3f} ms", f"8 devices: {r['list_build_8_ms']:.3f} ms"),
        Row(
            "Allocate p50, 1,024 devices",
            f"{r['allocate_p50_us']:.0f} us",
            f"8 devices {r['allocate_8_p50_us']:.0f} us, {r['allocate_p50_ratio']:.2f}x; floor "
            f"{r['floor_p50_us']:.0f} us",
            f"<= {t['allocate_p50_ratio']}x 8 devices",
            at_most(r["allocate_p50_ratio"], t["allocate_p50_ratio"]),
        ),
        Row(
            "Allocate p99, 1,024 devices",
            f"{r['allocate_p99_us']:.0f} us",
            f"8 devices {r['allocate_8_p99_us']:.0f} us, {r['allocate_p99_ratio']:.2f}x",
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure a 1,024-device node and store the numbers and targets under results["scale"]."""
    with temporary_directory("npu-bench-scale-") as work, fake_api(work) as url:
        measured = asyncio.run(measure(work, url, budget))
    results["scale"] = {"results": measured, "targets": TARGETS, "node": NODE}
