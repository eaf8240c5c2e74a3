"""Shared NPUs (--share-devices): Prepare of a share against a whole-NPU Prepare, and a node of 16
chips x 100 shares.

DRA on Kubernetes 1.36 (DRAConsumableCapacity on by default): one daemon, one claim for a whole NPU
and one for a share of a shared NPU, their Prepare/Unprepare cycles interleaved in the same run. A
16-chip node with every chip shared 100 times: from start to the device plugin's ListAndWatch
holding all 1,600 shares, and to DRA's pool with the 16 shared chips published; the size of that
ListAndWatch message. Nothing here asserts on time. Targets: share Prepare p50 <= 1.2x the whole-NPU
Prepare p50; each node published <= 1 s after start; the ListAndWatch message < 256 KiB.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.bench import served
from benchmarks.common import (
    DRIVER,
    FULL,
    NODE,
    RESOURCE,
    Budget,
    dev_root,
    dra_dirs,
    fake_api_argv,
    first_line,
    percentile,
    serve_argv,
    timed,
    wait_for,
    write_inventory,
)
from benchmarks.report import Row, at_most
from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from npu_plugin.sim.rest import SLICES_PATH, RestClient
from npu_plugin.sim.scheduler import DeviceRequest, allocate_claim
from tests.support.cleanup import process, temporary_directory
from tests.support.fake_devices import many_devices

CHIPS, SHARES = 16, 100
TARGETS = {"prepare_p50_ratio": 1.2, "published_s": 1.0, "list_kib": 256.0}
WHOLE, SHARE = "whole", "share"


@contextmanager
def fake_api_136(work: Path) -> Iterator[str]:
    """A fake API server process serving Kubernetes 1.36, where consumable capacity is on."""
    with process([*fake_api_argv(work), "--kubernetes-version", "1.36"], work / "fakeapi.log"):
        yield first_line(work / "fakeapi.log")


def shared_published(rest: RestClient, count: int) -> bool:
    items = rest.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})["items"]
    devices = [d for s in items for d in s["spec"].get("devices") or []]
    return sum(bool(d.get("allowMultipleAllocations")) for d in devices) == count


def claim(rest: RestClient, name: str, request: DeviceRequest) -> Claim:
    stored = allocate_claim(rest, namespace="default", name=name, node=NODE, requests=[request])
    return Claim("default", name, stored["metadata"]["uid"])


async def cycles(kubelet: DraKubeletSimulator, claims: dict[str, Claim], count: int) -> dict[str, list[float]]:
    """Prepare and Unprepare of each claim, alternating which goes first."""
    samples: dict[str, list[float]] = {WHOLE: [], SHARE: []}

    async def prepare(ref: Claim) -> None:
        if (answer := (await kubelet.prepare([ref]))[ref.uid]).error:
            raise RuntimeError(f"Prepare failed: {answer.error}")

    for i in range(count):
        for kind in (WHOLE, SHARE) if i % 2 else (SHARE, WHOLE):
            ref = claims[kind]
            samples[kind].append(await timed(functools.partial(prepare, ref)))
            await kubelet.unprepare([ref])
    return samples


async def dra(work: Path, url: str, budget: Budget) -> dict[str, Any]:
    rest = RestClient(url)
    inventory = write_inventory(work / "dra.yaml", many_devices(CHIPS))
    argv = serve_argv(
        "--mode", "dra", "--fake-inventory", str(inventory), "--dev-root", str(dev_root(work, CHIPS)), *dra_dirs(work)
    )
    argv += ["--share-devices", f"1-{CHIPS - 1}", "--share-count", str(SHARES)]
    async with DraKubeletSimulator(work / "reg", node_name=NODE, api_url=url, scan_interval=0.002) as kubelet:
        with process(argv, work / "dra.log"):
            started = time.monotonic()
            await wait_for(lambda: shared_published(rest, CHIPS - 1), 30, "the shared chips", interval=0.005)
            published = time.monotonic() - started
            await wait_for(lambda: kubelet.plugins.get(DRIVER), 30, "registration")
            whole = claim(rest, WHOLE, DeviceRequest("npu"))
            share = claim(rest, SHARE, DeviceRequest("npu", capacity={"memory": "1Gi"}))
            samples = await cycles(kubelet, {WHOLE: whole, SHARE: share}, budget.prepares // 2 + budget.warmup // 8)
    kept = {kind: values[budget.warmup // 8 :] for kind, values in samples.items()}
    p50 = {kind: percentile(values, 0.5) * 1e3 for kind, values in kept.items()}
    p99 = {kind: percentile(values, 0.99) * 1e3 for kind, values in kept.items()}
    return {
        "prepares": len(kept[SHARE]),
        "whole_prepare_p50_ms": round(p50[WHOLE], 2),
        "whole_prepare_p99_ms": round(p99[WHOLE], 2),
        "share_prepare_p50_ms": round(p50[SHARE], 2),
        "share_prepare_p99_ms": round(p99[SHARE], 2),
        "prepare_p50_ratio": round(p50[SHARE] / p50[WHOLE], 2),
        "dra_published_s": round(published, 3),
    }


async def device_plugin(work: Path) -> dict[str, Any]:
    inventory = write_inventory(work / "dp.yaml", many_devices(CHIPS))
    dev_root(work, CHIPS)
    share = ("--share-devices", "all", "--share-count", str(SHARES))
    started = time.monotonic()
    async with served(work, "shares", *share, source=("--fake-inventory", str(inventory))) as daemon:
        listing = daemon.kubelet.plugin(RESOURCE)
        await wait_for(lambda: len(listing.devices) == CHIPS * SHARES, 30, "1,600 shares", interval=0.005)
        listed = time.monotonic() - started
        message = pb.ListAndWatchResponse(devices=list(listing.devices.values()))
    return {"dp_listed_s": round(listed, 3), "list_bytes": message.ByteSize()}


async def measure(work: Path, url: str, budget: Budget) -> dict[str, Any]:
    return {"chips": CHIPS, "shares": SHARES, **await dra(work, url, budget), **await device_plugin(work)}


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    return [
        Row(
            "Prepare p50, share / whole NPU",
            f"{r['share_prepare_p50_ms']:.2f} ms",
            f"whole NPU {r['whole_prepare_p50_ms']:.2f} ms, {r['prepare_p50_ratio']:.2f}x; same daemon, interleaved",
            f"<= {t['prepare_p50_ratio']:g}x whole NPU",
            at_most(r["prepare_p50_ratio"], t["prepare_p50_ratio"]),
        ),
        Row(
            "Prepare p99, share / whole NPU",
            f"{r['share_prepare_p99_ms']:.2f} ms",
            f"whole NPU {r['whole_prepare_p99_ms']:.2f} ms",
        ),
        Row(
            "start -> 16 x 100 shares listed",
            f"{r['dp_listed_s']:.3f} s",
            "device plugin, ListAndWatch with every share",
            f"<= {t['published_s']:g} s",
            at_most(r["dp_listed_s"], t["published_s"]),
        ),
        Row(
            "start -> 15 shared chips published",
            f"{r['dra_published_s']:.3f} s",
            "DRA, Kubernetes 1.36, consumable capacity",
            f"<= {t['published_s']:g} s",
            at_most(r["dra_published_s"], t["published_s"]),
        ),
        Row(
            "ListAndWatch message, 1,600 shares",
            f"{r['list_bytes'] / 1024:.1f} KiB",
            f"{r['list_bytes']} bytes",
            f"< {t['list_kib']:g} KiB",
            r["list_bytes"] < t["list_kib"] * 1024,
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure shared NPUs and store the numbers and targets under results["shares"]."""
    with temporary_directory("npu-bench-shares-") as work, fake_api_136(work) as url:
        measured = asyncio.run(measure(work, url, budget))
    results["shares"] = {"results": measured, "targets": TARGETS, "node": NODE}
