"""Shared NPUs (--share-devices): Prepare of a share against a whole-NPU Prepare, and a node of 16
chips x 100 shares.

DRA on Kubernetes 1.36 (DRAConsumableCapacity on by default): one daemon, one claim for a whole NPU
and one for a share of a shared NPU, their Prepare/Unprepare cycles interleaved in the same run. A
16-chip node with every chip shared 100 times: from start to the device plugin's ListAndWatch
holding all 1,600 shares, and to DRA's pool with 15 of its chips shared and published; the size of
that ListAndWatch message. Nothing here asserts on time.

Start to published is mostly the interpreter starting and importing the daemon, which sharing does
not change and a loaded machine slows: so DRA's is measured against a floor, the same daemon on the
same 16 chips with none shared, each a fresh process, the two alternating in the same run, and the
target is on the ratio of their medians.

Targets: share Prepare p50 <= 1.2x the whole-NPU Prepare p50; the device plugin's shares listed <=
1 s after start; DRA's shared chips published <= 1.2x the unshared floor; the ListAndWatch message
< 256 KiB.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
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
    dra_serve_argv,
    fake_api_argv,
    first_line,
    percentile,
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
TARGETS = {"prepare_p50_ratio": 1.2, "published_s": 1.0, "published_ratio": 1.2, "list_kib": 256.0}
WHOLE, SHARE = "whole", "share"
SHARED_CHIPS = f"1-{CHIPS - 1}"


@contextmanager
def fake_api_136(work: Path) -> Iterator[str]:
    """A fake API server process serving Kubernetes 1.36, where consumable capacity is on."""
    with process([*fake_api_argv(work), "--kubernetes-version", "1.36"], work / "fakeapi.log"):
        yield first_line(work / "fakeapi.log")


def node_published(rest: RestClient, shared: int) -> bool:
    """Whether the node's slices hold all CHIPS chips, `shared` of them with consumable capacity."""
    items = rest.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})["items"]
    devices = [d for s in items for d in s["spec"].get("devices") or []]
    return len(devices) == CHIPS and sum(bool(d.get("allowMultipleAllocations")) for d in devices) == shared


def dra_argv(work: Path, kubeconfig: Path, inventory: Path, *, shared: bool) -> list[str]:
    """A DRA daemon of the node living in `work`, with chips 1 to CHIPS-1 shared or none."""
    argv = dra_serve_argv(inventory, dev_root(work, CHIPS), dra_dirs(work, kubeconfig=kubeconfig))
    return [*argv, "--share-devices", SHARED_CHIPS, "--share-count", str(SHARES)] if shared else argv


async def start_to_published(work: Path, url: str, inventory: Path, *, shared: bool) -> float:
    """Seconds from a fresh daemon's spawn (living in a new directory of `work`) to the node published;
    its slices deleted after."""
    rest = RestClient(url)
    run = work / f"start-{len(list(work.glob('start-*')))}"
    run.mkdir()
    argv = dra_argv(run, work / "kubeconfig", inventory, shared=shared)
    async with DraKubeletSimulator(run / "reg", node_name=NODE, api_url=url, scan_interval=0.002):
        with process(argv, run / "dra.log"):
            started = time.monotonic()
            await wait_for(lambda: node_published(rest, CHIPS - 1 if shared else 0), 30, "the node", interval=0.005)
            seconds = time.monotonic() - started
    rest.request("DELETE", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})
    return seconds


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


async def publishes(work: Path, url: str, budget: Budget) -> dict[str, Any]:
    """Start to published, shared and unshared, `2 x budget.rounds` fresh daemons each, alternating
    which goes first."""
    inventory = write_inventory(work / "dra.yaml", many_devices(CHIPS))
    samples: dict[bool, list[float]] = {True: [], False: []}
    starts = 2 * budget.rounds
    for i in range(starts):
        for shared in (True, False) if i % 2 else (False, True):
            samples[shared].append(await start_to_published(work, url, inventory, shared=shared))
    median = {shared: statistics.median(values) for shared, values in samples.items()}
    return {
        "starts": starts,
        "dra_published_s": round(median[True], 3),
        "dra_unshared_published_s": round(median[False], 3),
        "dra_published_ratio": round(median[True] / median[False], 2),
    }


async def dra(work: Path, url: str, budget: Budget) -> dict[str, Any]:
    rest = RestClient(url)
    inventory = write_inventory(work / "dra.yaml", many_devices(CHIPS))
    argv = dra_argv(work, work / "kubeconfig", inventory, shared=True)
    async with DraKubeletSimulator(work / "reg", node_name=NODE, api_url=url, scan_interval=0.002) as kubelet:
        with process(argv, work / "dra.log"):
            await wait_for(lambda: node_published(rest, CHIPS - 1), 30, "the shared chips", interval=0.005)
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
    return {
        "chips": CHIPS,
        "shares": SHARES,
        **await publishes(work, url, budget),
        **await dra(work, url, budget),
        **await device_plugin(work),
    }


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
            f"DRA, 1.36; none shared {r['dra_unshared_published_s']:.3f} s, {r['dra_published_ratio']:.2f}x; "
            f"medians of {r['starts']} fresh daemons each, alternating",
            f"<= {t['published_ratio']:g}x none shared",
            at_most(r["dra_published_ratio"], t["published_ratio"]),
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
