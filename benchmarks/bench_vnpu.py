"""vNPU benchmarks: a DRA daemon with `--vnpu dynamic` (fake backend, its simulated hardware in the
work dir) on a 16-die node, against the fake API server and the DRA kubelet simulator.

- start to a complete pool with every chip and every template published (Kubernetes 1.36, partitionable
  devices on), and a health change on one chip re-published, with --health-interval 0.2;
- Prepare of a dynamic vNPU (the driver creates it) against a whole-NPU Prepare, interleaved in the same run,
  each followed by its Unprepare so the capacity frees;
- slice writes at rest with the DRAPartitionableDevices gate off (Kubernetes 1.35): no write storm when
  the API server drops the counters the daemon publishes.

`run(results)` adds a "vnpu" entry to `results`. Nothing here asserts on time. Targets: published
and re-published <= 1 s; vNPU Prepare p99 <= 3x whole-NPU Prepare p99; <= 2 slice writes per minute
at rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DRIVER,
    FULL,
    NODE,
    Budget,
    complete_pool,
    dev_root,
    dra_dirs,
    percentile,
    serve_argv,
    timed,
    wait_for,
    write_inventory,
)
from benchmarks.report import Row, at_most
from npu_plugin.ascend.device import Device, Health
from npu_plugin.ascend.vnpu import ChipVnpu, default_id_range
from npu_plugin.backends.fake.profiles import FakeHost, profile_inventory
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from tests.support.cleanup import process, temporary_directory
from tests.support.fakeapi import FakeKubeAPI, RecordedRequest

TARGETS = {"published_s": 1.0, "republished_s": 1.0, "prepare_p99_ratio": 3.0, "slice_writes_per_minute": 2.0}
DIES = 16
FAULTY_CHIP = 3
WHOLE, VNPU = "npu-1", "npu-0-vir05-1c-16g-0"
SLICE_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def node(dies: int) -> FakeHost:
    """`dies` 910B3 dies shaped as the atlas-800t-a2 profile's: one die per card, its vNPU templates
    and totals, every chip able to create vNPUs on demand."""
    profile = profile_inventory("atlas-800t-a2")
    shape, chip = profile.devices[0], profile.vnpu[0]
    devices = [
        replace(
            shape,
            physical_id=i,
            logic_id=i,
            card_id=i,
            numa_node=i // 8,
            pci_bus_id=f"0000:{i + 1:02x}:00.0",
            topology_group=f"ring-{i // 8}",
        )
        for i in range(dies)
    ]
    chips = {i: replace(chip, physical_id=i, id_range=default_id_range(i, shape.device_type)) for i in range(dies)}
    return FakeHost(devices, chips)


def with_health(devices: Sequence[Device], physical_id: int, health: Health) -> list[Device]:
    """The devices with one device's health changed."""
    return [replace(d, health=health) if d.physical_id == physical_id else d for d in devices]


def expected_names(inventory: FakeHost) -> set[str]:
    """The names that show every chip and every template of it published: `npu-N` and the first
    device of each template, `npu-N-<template with dashes>-0`."""
    names = set()
    for device in inventory.devices:
        whole = f"npu-{device.physical_id}"
        names.add(whole)
        names.update(f"{whole}-{t.name.replace('_', '-')}-0" for t in inventory.vnpu[device.physical_id].templates)
    return names


def slice_writes(requests: Sequence[RecordedRequest]) -> int:
    """Requests that wrote a ResourceSlice (create, replace, patch, delete)."""
    return sum(1 for r in requests if r.method in SLICE_WRITE_METHODS and "/resourceslices" in r.path)


def p99_ratio(vnpu: list[float], whole: list[float]) -> float:
    return round(percentile(vnpu, 0.99) / percentile(whole, 0.99), 2)


def daemon_argv(work: Path, *extra: str) -> list[str]:
    return serve_argv(
        "--mode",
        "dra",
        "--vnpu",
        "dynamic",
        "--fake-inventory",
        str(work / "inventory.yaml"),
        "--fake-vnpu-state",
        str(work / "hw.json"),
        "--dev-root",
        str(dev_root(work, DIES)),
        *dra_dirs(work),
        *extra,
    )


@contextlib.contextmanager
def api_at(work: Path, minor: int, partitionable: bool) -> Iterator[FakeKubeAPI]:
    """A fake API server of Kubernetes 1.`minor` with this node and its kubeconfig in `work`,
    stopped at the end."""
    api = FakeKubeAPI(kubernetes_minor=minor, partitionable_devices=partitionable)
    with api:  # entered apart: __enter__ is typed as the simulators' smaller server
        api.add_node(NODE)
        api.write_kubeconfig(work / "kubeconfig")
        yield api


def pool(api: FakeKubeAPI) -> tuple[int, set[str]] | None:
    """This node's generation and device names when its pool is complete."""
    if (complete := complete_pool(api.objects("ResourceSlice"))) is None:
        return None
    return complete[0], set(complete[1])


async def republished(api: FakeKubeAPI, path: Path, devices: list[Device], chips: Mapping[int, ChipVnpu]) -> float:
    """Seconds from an inventory rewrite to a complete pool of a later generation."""
    before = pool(api)
    generation = -1 if before is None else before[0]
    started = time.monotonic()
    write_inventory(path, devices, chips)

    def newer() -> bool:
        now = pool(api)
        return now is not None and now[0] > generation

    await wait_for(newer, 30, "a re-published pool", 0.005)
    return time.monotonic() - started


def planted(api: FakeKubeAPI, name: str, device: str) -> Claim:
    """A claim allocated to `device` of this node, as the scheduler would leave it."""
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": device}
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    return Claim("default", name, api.put_object("ResourceClaim", body)["metadata"]["uid"])


async def prepares(kubelet: DraKubeletSimulator, claims: dict[str, Claim], count: int) -> dict[str, list[float]]:
    """Prepare then Unprepare of each claim, alternating which goes first."""
    samples: dict[str, list[float]] = {kind: [] for kind in claims}

    async def prepare(claim: Claim) -> None:
        if error := (await kubelet.prepare([claim]))[claim.uid].error:
            raise RuntimeError(f"Prepare of {claim.name} failed: {error}")

    for i in range(count):
        for kind in sorted(claims, reverse=bool(i % 2)):
            samples[kind].append(await timed(partial(prepare, claims[kind])))
            await kubelet.unprepare([claims[kind]])
    return samples


async def measure_partitionable(work: Path, budget: Budget) -> dict[str, Any]:
    inventory = node(DIES)
    write_inventory(work / "inventory.yaml", inventory.devices, inventory.vnpu)
    expected = expected_names(inventory)
    with api_at(work, 36, True) as api:
        async with DraKubeletSimulator(work / "reg", node_name=NODE, api_url=api.url, scan_interval=0.002) as kubelet:
            with process(daemon_argv(work, "--health-interval", "0.2"), work / "daemon.log"):
                started = time.monotonic()
                await wait_for(lambda: (p := pool(api)) is not None and expected <= p[1], 30, "every template", 0.005)
                published = time.monotonic() - started
                await wait_for(lambda: kubelet.plugins.get(DRIVER), 30, "registration")
                await asyncio.sleep(budget.settle)
                changes = []
                for _ in range(budget.rounds):
                    faulty = with_health(inventory.devices, FAULTY_CHIP, Health.CRITICAL)
                    changes.append(await republished(api, work / "inventory.yaml", faulty, inventory.vnpu))
                    changes.append(await republished(api, work / "inventory.yaml", inventory.devices, inventory.vnpu))
                claims = {"vnpu": planted(api, "vnpu", VNPU), "whole": planted(api, "whole", WHOLE)}
                warmup = budget.warmup // 4
                samples = await prepares(kubelet, claims, warmup + budget.prepares)
                devices = len((pool(api) or (0, set()))[1])
    vnpu, whole = samples["vnpu"][warmup:], samples["whole"][warmup:]
    return {
        "devices": devices,
        "published_s": round(published, 3),
        "republished_max_s": round(max(changes), 3),
        "republished_p50_s": round(percentile(changes, 0.5), 3),
        "calls": budget.prepares,
        "vnpu_p50_ms": round(percentile(vnpu, 0.5) * 1e3, 2),
        "vnpu_p99_ms": round(percentile(vnpu, 0.99) * 1e3, 2),
        "whole_p50_ms": round(percentile(whole, 0.5) * 1e3, 2),
        "whole_p99_ms": round(percentile(whole, 0.99) * 1e3, 2),
        "prepare_p99_ratio": p99_ratio(vnpu, whole),
    }


async def measure_gate_off(work: Path, budget: Budget) -> dict[str, Any]:
    inventory = node(DIES)
    write_inventory(work / "inventory.yaml", inventory.devices, inventory.vnpu)
    with api_at(work, 35, False) as api:
        async with DraKubeletSimulator(work / "reg", node_name=NODE, api_url=api.url, scan_interval=0.5):
            with process(daemon_argv(work), work / "daemon.log"):
                await wait_for(lambda: pool(api) is not None, 30, "a ResourceSlice", 0.05)
                await asyncio.sleep(budget.settle)
                before = len(api.requests)
                await asyncio.sleep(budget.idle_window)
                writes = slice_writes(api.requests[before:])
    return {
        "window_s": budget.idle_window,
        "slice_writes": writes,
        "slice_writes_per_minute": round(writes * 60 / budget.idle_window, 2),
    }


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    return [
        Row(
            f"start -> every template published ({DIES} dies)",
            f"{r['published_s']:.3f} s",
            f"{r['devices']} devices",
            f"<= {t['published_s']:g} s",
            at_most(r["published_s"], t["published_s"]),
        ),
        Row(
            "health change -> re-published",
            f"{r['republished_max_s']:.3f} s max",
            f"p50 {r['republished_p50_s']:.3f} s",
            f"<= {t['republished_s']:g} s",
            at_most(r["republished_max_s"], t["republished_s"]),
        ),
        Row(
            "dynamic vNPU Prepare p99",
            f"{r['vnpu_p99_ms']:.2f} ms",
            f"whole NPU {r['whole_p99_ms']:.2f} ms, {r['prepare_p99_ratio']:.2f}x (p50 {r['vnpu_p50_ms']:.2f}"
            f" / {r['whole_p50_ms']:.2f} ms)",
            f"<= {t['prepare_p99_ratio']:g}x whole NPU",
            at_most(r["prepare_p99_ratio"], t["prepare_p99_ratio"]),
        ),
        Row(
            "slice writes at rest, gate off (1.35)",
            f"{r['slice_writes_per_minute']:g} /min",
            f"{r['slice_writes']} in {r['window_s']:g} s",
            f"<= {t['slice_writes_per_minute']:g} /min",
            at_most(r["slice_writes_per_minute"], t["slice_writes_per_minute"]),
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure --vnpu dynamic and store the numbers and targets under results["vnpu"]."""
    with temporary_directory("npu-bench-vnpu-") as work:
        (work / "on").mkdir()
        (work / "off").mkdir()
        measured = asyncio.run(measure_partitionable(work / "on", budget))
        measured |= asyncio.run(measure_gate_off(work / "off", budget))
    results["vnpu"] = {"results": measured, "targets": TARGETS}


if __name__ == "__main__":
    collected: dict[str, Any] = {}
    run(collected)
    print(json.dumps(collected, indent=2))
