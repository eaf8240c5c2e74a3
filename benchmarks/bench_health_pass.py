"""The cost of one health pass (`Backend.sample()` for every device) on each backend, and what it
adds to an idle hour at the default --health-interval of 5 s.

The backends are the real ones against the fakes the tests use: the fake backend on a profile and on
an inventory file, `npu-smi` as the fixture-driven shell script (behind a wrapper that counts its
runs), and DCMI through ctypes into the fake libdcmi.so compiled from tests/fakedcmi (skipped
without gcc). CPU time counts this process and its children (npu-smi runs), so a pass's fork and
exec are in it. Target: one backend call per pass for all devices (one npu-smi run), never one per
device.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import FULL, Budget, percentile, write_inventory
from benchmarks.report import Row, at_most
from npu_plugin.backends.base import Backend
from npu_plugin.backends.dcmi.backend import DcmiBackend
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.backends.npusmi.backend import NpuSmiBackend
from tests.support.cleanup import temporary_directory
from tests.support.fake_devices import many_devices

TARGETS = {"npu_smi_runs_per_pass": 1}
DEFAULT_INTERVAL = 5.0
# Counts each run in a file beside it, then runs the fixture-driven fake.
COUNTING_NPU_SMI = """#!/bin/sh
echo run >> "$(dirname "$0")/runs"
exec "$(dirname "$0")/fixture/npu-smi" "$@"
"""


@dataclass
class Pass:
    backend: str
    devices: int
    passes: int
    wall_p50_ms: float
    cpu_ms: float  # mean CPU time of one pass, this process and its children
    cpu_s_per_hour: float  # at the default interval
    calls_per_pass: float | None  # backend processes started per pass (npu-smi only)


def cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def passes(name: str, backend: Backend, count: int, calls: Callable[[], int] | None = None) -> Pass:
    devices = len(backend.discover())
    backend.sample()  # warm: imports, first-call caches
    started_calls = calls() if calls else 0
    walls = []
    cpu_before = cpu_seconds()
    for _ in range(count):
        started = time.perf_counter()
        backend.sample()
        walls.append(time.perf_counter() - started)
    cpu = (cpu_seconds() - cpu_before) / count
    return Pass(
        backend=name,
        devices=devices,
        passes=count,
        wall_p50_ms=round(percentile(walls, 0.5) * 1e3, 3),
        cpu_ms=round(cpu * 1e3, 3),
        cpu_s_per_hour=round(cpu * 3600 / DEFAULT_INTERVAL, 2),
        calls_per_pass=None if calls is None else round((calls() - started_calls) / count, 2),
    )


def npu_smi(work: Path, count: int) -> Pass:
    from tests.support.fake_hardware import fake_npu_smi, script

    fake_npu_smi(work / "fixture", "910b3-x8.info.txt", "910b3-x8.mapping.txt", "910b3-x8.topo.txt")
    wrapper = script(work / "npu-smi", COUNTING_NPU_SMI)
    runs = work / "runs"

    def run_count() -> int:
        return len(runs.read_text().splitlines()) if runs.exists() else 0

    return passes("npu-smi (fixture script)", NpuSmiBackend(str(wrapper)), count, run_count)


def dcmi(work: Path, count: int) -> Pass | None:
    from tests.integration.test_dcmi_backend import atlas_800t_a2
    from tests.support.fake_hardware import CONFIG_ENV, CompilerMissingError, build

    try:
        library = build(work / "dcmi")
    except CompilerMissingError:
        return None
    config = work / "fake-dcmi.conf"
    atlas_800t_a2().write(config)
    os.environ[CONFIG_ENV] = str(config)
    backend = DcmiBackend(str(library))
    try:
        return passes("DCMI (fake libdcmi.so)", backend, count)
    finally:
        backend.close()
        del os.environ[CONFIG_ENV]


def measure(work: Path, count: int) -> list[Pass]:
    inventory = write_inventory(work / "inventory.yaml", many_devices(8))
    measured = [
        passes("fake (--fake-profile)", FakeBackend(profile="atlas-800t-a2"), count),
        passes("fake (--fake-inventory)", FakeBackend(inventory_path=inventory), count),
        npu_smi(work, count),
    ]
    if (result := dcmi(work, count)) is not None:
        measured.append(result)
    return measured


def rows(section: dict[str, Any]) -> list[Row]:
    t = section["targets"]
    result = []
    for r in section["results"]:
        context = f"{r['devices']} devices, CPU {r['cpu_ms']:.3f} ms/pass = {r['cpu_s_per_hour']:g} CPU-s/h at 5 s"
        calls = r["calls_per_pass"]
        result.append(
            Row(
                f"health pass, {r['backend']}",
                f"{r['wall_p50_ms']:.3f} ms",
                context + ("" if calls is None else f", {calls:g} npu-smi run(s)/pass"),
                "" if calls is None else f"<= {t['npu_smi_runs_per_pass']} run/pass",
                None if calls is None else at_most(calls, t["npu_smi_runs_per_pass"]),
            )
        )
    return result


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Time health passes on every backend and store them under results["health_pass"]."""
    with temporary_directory("npu-bench-pass-") as work:
        measured = measure(work, max(50, budget.calls // 10))
    results["health_pass"] = {"results": [asdict(m) for m in measured], "targets": TARGETS}
