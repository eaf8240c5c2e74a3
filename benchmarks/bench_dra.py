"""DRA benchmarks: Prepare/Unprepare latency against a floor, start to registered + first slice,
idle RSS.

`run(results)` adds a "dra" entry to `results`; scripts/bench prints it with the rest. The floor is
what one Prepare cannot avoid — one GET of the claim from the same API server plus one fsync'd file
write — measured interleaved with the Prepares, in the same run. Nothing here asserts on time.
Targets: Prepare p99 <= 50 ms and <= 3x the floor; idle RSS <= 75 MiB; registered and first slice <=
2 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import urllib3

from benchmarks.common import (
    DRIVER,
    FULL,
    NODE,
    Budget,
    dev_root,
    dra_dirs,
    fake_api,
    percentile,
    rss_mib,
    serve_argv,
    timed,
    wait_for,
)
from benchmarks.report import Row, at_most
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from npu_plugin.sim.rest import SLICES_PATH, RestClient, claims_path
from npu_plugin.sim.scheduler import DeviceRequest, allocate_claim
from tests.support.cleanup import process, temporary_directory

TARGETS = {"prepare_p99_ms": 50.0, "prepare_p99_ratio": 3.0, "idle_rss_mib": 75.0, "ready_s": 2.0}


def daemon_argv(work: Path) -> list[str]:
    return serve_argv(
        "--mode", "dra", "--fake-profile", "atlas-800t-a2", "--dev-root", str(dev_root(work)), *dra_dirs(work)
    )


def slices_published(rest: RestClient) -> bool:
    return bool(rest.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})["items"])


class Floor:
    """One GET of the claim over a kept-alive connection, then one small file written and
    fsync'd."""

    def __init__(self, url: str, claim: Claim, scratch: Path) -> None:
        self._pool = urllib3.PoolManager(maxsize=1)
        self._url = url + claims_path(claim.namespace, claim.name)
        self._scratch = scratch

    def __call__(self) -> None:
        self._pool.request("GET", self._url).data  # noqa: B018 - the body is read as the daemon reads it
        fd = os.open(self._scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b'{"floor": true}\n' * 16)
            os.fsync(fd)
        finally:
            os.close(fd)


async def cycles(kubelet: DraKubeletSimulator, claim: Claim, floor: Floor, count: int) -> dict[str, list[float]]:
    """Prepare, Unprepare and the floor, alternating which goes first."""
    samples: dict[str, list[float]] = {"prepare": [], "unprepare": [], "floor": []}

    async def prepare() -> None:
        if (await kubelet.prepare([claim]))[claim.uid].error:
            raise RuntimeError("Prepare failed")

    for i in range(count):
        if i % 2:
            samples["floor"].append(await timed(lambda: asyncio.to_thread(floor)))
        samples["prepare"].append(await timed(prepare))
        samples["unprepare"].append(await timed(lambda: kubelet.unprepare([claim])))
        if not i % 2:
            samples["floor"].append(await timed(lambda: asyncio.to_thread(floor)))
    return samples


def summary(samples: dict[str, list[float]], warmup: int) -> dict[str, float]:
    result = {}
    for kind, values in samples.items():
        kept = values[warmup:]
        result[f"{kind}_p50_ms"] = round(percentile(kept, 0.5) * 1e3, 2)
        result[f"{kind}_p99_ms"] = round(percentile(kept, 0.99) * 1e3, 2)
    result["prepare_p99_ratio"] = round(result["prepare_p99_ms"] / result["floor_p99_ms"], 2)
    result["prepare_p50_ratio"] = round(result["prepare_p50_ms"] / result["floor_p50_ms"], 2)
    return result


async def measure(work: Path, url: str, calls: int, warmup: int, settle: float) -> dict[str, float]:
    rest = RestClient(url)
    async with DraKubeletSimulator(work / "reg", node_name=NODE, api_url=url, scan_interval=0.002) as kubelet:
        with process(daemon_argv(work), work / "daemon.log") as daemon:
            started = time.monotonic()
            await wait_for(lambda: kubelet.plugins.get(DRIVER), 30, "registration")
            registered = time.monotonic() - started
            await wait_for(lambda: slices_published(rest), 30, "ResourceSlice")
            first_slice = time.monotonic() - started
            await asyncio.sleep(settle)
            idle = rss_mib(daemon.pid)
            stored = allocate_claim(rest, namespace="default", name="bench", node=NODE, requests=[DeviceRequest("npu")])
            claim = Claim("default", "bench", stored["metadata"]["uid"])
            samples = await cycles(kubelet, claim, Floor(url, claim, work / "floor.json"), warmup + calls)
            loaded = rss_mib(daemon.pid)
    return {
        "calls": calls,
        **summary(samples, warmup),
        "registered_s": round(registered, 3),
        "first_slice_s": round(first_slice, 3),
        "idle_rss_mib": round(idle, 1),
        "rss_after_load_mib": round(loaded, 1),
    }


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    ready = r["first_slice_s"]
    return [
        Row(
            "Prepare p50",
            f"{r['prepare_p50_ms']:.2f} ms",
            f"floor {r['floor_p50_ms']:.2f} ms, {r['prepare_p50_ratio']:.2f}x",
        ),
        Row(
            "Prepare p99",
            f"{r['prepare_p99_ms']:.2f} ms",
            f"floor {r['floor_p99_ms']:.2f} ms, {r['prepare_p99_ratio']:.2f}x",
            f"<= {t['prepare_p99_ms']:g} ms, <= {t['prepare_p99_ratio']:g}x floor",
            at_most(r["prepare_p99_ms"], t["prepare_p99_ms"])
            and at_most(r["prepare_p99_ratio"], t["prepare_p99_ratio"]),
        ),
        Row("Unprepare p50 / p99", f"{r['unprepare_p50_ms']:.2f} / {r['unprepare_p99_ms']:.2f} ms"),
        Row(
            "start -> registered + first slice",
            f"{ready:.3f} s",
            f"registered at {r['registered_s']:.3f} s",
            f"<= {t['ready_s']:g} s",
            at_most(ready, t["ready_s"]),
        ),
        Row(
            "idle RSS",
            f"{r['idle_rss_mib']:.1f} MiB",
            f"after load {r['rss_after_load_mib']:.1f} MiB",
            f"<= {t['idle_rss_mib']:g} MiB",
            at_most(r["idle_rss_mib"], t["idle_rss_mib"]),
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure DRA mode and store the numbers and targets under results["dra"]."""
    with temporary_directory("npu-bench-dra-") as work, fake_api(work) as url:
        measured = asyncio.run(measure(work, url, budget.prepares, budget.warmup // 4, budget.settle))
    results["dra"] = {"results": measured, "targets": TARGETS}


if __name__ == "__main__":
    collected: dict[str, Any] = {}
    run(collected)
    print(json.dumps(collected, indent=2))
