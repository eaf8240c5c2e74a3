"""API requests per event on Kubernetes 1.37: a DRA daemon with `--claim-status` (fake backend,
atlas-800t-a2, `--health-interval 0.2`) against the fake API server and the DRA kubelet simulator.

- per Prepare and per Unprepare: every request the daemon makes for one claim (the claim read, the
  status apply; the removal at Unprepare);
- per health change: the requests after a device turns unhealthy or healthy again (one slice write;
  the first change also asks once whether the server keeps taints, counted apart);
- at rest: nothing but the slice watch.

`run(results)` adds an "api_cost" entry to `results`. Targets: 2 requests per Prepare (claim GET, one
PATCH), 1 per Unprepare, 1 per health change, 0 at rest besides the watch.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.bench_vnpu import api_at, planted
from benchmarks.common import (
    DRIVER,
    FULL,
    NODE,
    Budget,
    complete_pool,
    dev_root,
    dra_dirs,
    process,
    serve_argv,
    wait_for,
    write_inventory,
)
from benchmarks.report import Row, at_most
from npu_plugin.ascend.device import Health
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.support.fakeapi import FakeKubeAPI, RecordedRequest

TARGETS = {"per_prepare": 2.0, "per_unprepare": 1.0, "per_health_change": 1.0, "at_rest": 0.0}
FAULTY = 3


def daemon_argv(work: Path) -> list[str]:
    inventory = str(work / "inventory.yaml")
    return serve_argv(
        "--mode", "dra", "--fake-inventory", inventory, "--dev-root", str(dev_root(work)), "--claim-status",
        "--health-interval", "0.2", "--health-failure-threshold", "1", "--health-recovery-threshold", "1",
        *dra_dirs(work),
    )  # fmt: skip


def counted(requests: Sequence[RecordedRequest]) -> int:
    """Requests other than the slice watch (which stays open)."""
    return sum(1 for r in requests if r.verb != "watch")


def tainted(api: FakeKubeAPI, name: str) -> bool:
    return any(
        d["name"] == name and d.get("taints")
        for s in api.objects("ResourceSlice")
        for d in s["spec"].get("devices") or []
    )


def has_status(api: FakeKubeAPI, name: str) -> bool:
    claim = api.get_object("ResourceClaim", name) or {}
    return bool((claim.get("status") or {}).get("devices"))


async def measure(work: Path, budget: Budget) -> dict[str, Any]:
    devices = profile_inventory("atlas-800t-a2").devices
    path = write_inventory(work / "inventory.yaml", devices)
    name = f"npu-{FAULTY}"
    with api_at(work, 37, True) as api:
        async with DraKubeletSimulator(work / "reg", node_name=NODE, api_url=api.url, scan_interval=0.002) as kubelet:
            with process(daemon_argv(work), work / "daemon.log"):
                await wait_for(lambda: complete_pool(api.objects("ResourceSlice")) is not None, 30, "slices", 0.005)
                await wait_for(lambda: kubelet.plugins.get(DRIVER), 30, "registration")
                await asyncio.sleep(budget.settle)
                before = len(api.requests)
                await asyncio.sleep(budget.settle * 5)
                at_rest = counted(api.requests[before:])
                prepares, unprepares = [], []
                for i in range(budget.rounds * 5):
                    claim = planted(api, f"c{i}", f"npu-{i % 8}")
                    before = len(api.requests)
                    if (await kubelet.prepare([claim]))[claim.uid].error:
                        raise RuntimeError("Prepare failed")
                    await wait_for(lambda c=claim: has_status(api, c.name), 10, "the claim status", 0.005)
                    await asyncio.sleep(0.05)
                    prepares.append(counted(api.requests[before:]))
                    before = len(api.requests)
                    await kubelet.unprepare([claim])
                    await wait_for(lambda c=claim: not has_status(api, c.name), 10, "the status removed", 0.005)
                    await asyncio.sleep(0.05)
                    unprepares.append(counted(api.requests[before:]))
                changes, first = [], 0
                for round_ in range(budget.rounds + 1):
                    for health, wanted in ((Health.CRITICAL, True), (Health.OK, False)):
                        before = len(api.requests)
                        faulty = [replace(d, health=health) if d.physical_id == FAULTY else d for d in devices]
                        write_inventory(path, faulty)
                        await wait_for(lambda w=wanted: tainted(api, name) is w, 10, "the slice re-written", 0.005)
                        await asyncio.sleep(0.6)  # past the publisher's coalescing pause
                        count = counted(api.requests[before:])
                        if round_ == 0 and wanted:
                            first = count
                        else:
                            changes.append(count)
    return {
        "window_s": budget.settle * 5,
        "at_rest": at_rest,
        "per_prepare": max(prepares),
        "per_unprepare": max(unprepares),
        "per_health_change": max(changes),
        "first_health_change": first,
    }


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    return [
        Row(
            "API requests per Prepare (--claim-status)",
            f"{r['per_prepare']}",
            "the claim GET and one status PATCH",
            f"<= {t['per_prepare']:g}",
            at_most(r["per_prepare"], t["per_prepare"]),
        ),
        Row(
            "API requests per Unprepare (--claim-status)",
            f"{r['per_unprepare']}",
            "the status removal",
            f"<= {t['per_unprepare']:g}",
            at_most(r["per_unprepare"], t["per_unprepare"]),
        ),
        Row(
            "API requests per health change (taints)",
            f"{r['per_health_change']}",
            f"first change {r['first_health_change']} (asks once whether taints are kept)",
            f"<= {t['per_health_change']:g}",
            at_most(r["per_health_change"], t["per_health_change"]),
        ),
        Row(
            "API requests at rest besides the watch",
            f"{r['at_rest']}",
            f"over {r['window_s']:g} s",
            f"<= {t['at_rest']:g}",
            at_most(r["at_rest"], t["at_rest"]),
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure and store the counts and targets under results["api_cost"]."""
    work = Path(tempfile.mkdtemp(prefix="npu-bench-cost-", dir="/tmp"))
    try:
        measured = asyncio.run(measure(work, budget))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["api_cost"] = {"results": measured, "targets": TARGETS}


if __name__ == "__main__":
    collected: dict[str, Any] = {}
    run(collected)
    print(json.dumps(collected, indent=2))
