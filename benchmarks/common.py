"""What every benchmark needs: RSS, percentiles, polling, fake devices, a fake API server (child
processes and temporary directories come from tests.support.cleanup, stopped and removed however
the run ends)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from npu_plugin.ascend.container_edits import COMMON_NODES
from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import ChipVnpu
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.sim.kubelet import KubeletSimulator
from npu_plugin.sim.rest import SLICES_PATH, RestClient
from tests.support.cleanup import process
from tests.support.fakeapi import RecordedRequest

NODE, DRIVER, RESOURCE = "node-a", "npu.huawei.com", "huawei.com/Ascend910"


@dataclass(frozen=True)
class Budget:
    """How long each benchmark measures: `FULL` for numbers worth recording, `QUICK` to try things
    out."""

    calls: int  # Allocate calls of each kind
    prepares: int  # Prepare/Unprepare cycles
    warmup: int
    settle: float  # seconds between registration and the idle RSS read
    rounds: int  # health faults and recoveries
    idle_window: float  # seconds over which an idle daemon's CPU time and API requests are counted
    # The least time the fleet stays at rest: past the daemon's longest watch (10 minutes), so that
    # every node's watch ends once and its lifetime is measured; 0 measures only `idle_window`,
    # where no watch ends.
    watch_cycle: float
    e2e_pods: int  # pods of each kind that --e2e starts on the real cluster


FULL = Budget(
    calls=2000, prepares=500, warmup=200, settle=2.0, rounds=5, idle_window=120.0, watch_cycle=630.0, e2e_pods=20
)
QUICK = Budget(calls=300, prepares=100, warmup=30, settle=1.0, rounds=2, idle_window=30.0, watch_cycle=0.0, e2e_pods=5)


def serve_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "npu_plugin", "serve", "--backend", "fake", "--log-level", "warning", *args]


def dra_serve_argv(inventory: Path, dev: Path, dirs: Sequence[str]) -> list[str]:
    """A DRA daemon on the fake backend: NPUs from `inventory`, device nodes under `dev`, the directory flags
    `dirs` (see `dra_dirs`)."""
    return serve_argv("--mode", "dra", "--fake-inventory", str(inventory), "--dev-root", str(dev), *dirs)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout}s")
        await asyncio.sleep(interval)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


@contextlib.asynccontextmanager
async def kubelet_at(directory: Path) -> AsyncIterator[KubeletSimulator]:
    kubelet = KubeletSimulator(directory)
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()


def fake_api_argv(work: Path) -> list[str]:
    """The fake API server in its own process, so it does not share the benchmark's GIL."""
    return [
        sys.executable,
        "-m",
        "npu_plugin.sim.fakeapi",
        "--port",
        "0",
        "--node",
        NODE,
        "--kubeconfig",
        str(work / "kubeconfig"),
    ]


def first_line(log: Path, timeout: float = 30.0) -> str:
    """The URL the fake API server prints once it is serving."""
    deadline = time.monotonic() + timeout
    while not (text := log.read_text()).startswith("http"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the fake API server did not start: {text}")
        time.sleep(0.01)
    return text.splitlines()[0]


@contextlib.contextmanager
def fake_api(work: Path) -> Iterator[str]:
    """A fake API server process with this node; its URL (its kubeconfig is work/kubeconfig)."""
    with process(fake_api_argv(work), work / "fakeapi.log"):
        yield first_line(work / "fakeapi.log")


def dev_root(work: Path, count: int = 8) -> Path:
    """Plain files for /dev/davinci0..N-1 and the common nodes."""
    dev = work / "dev"
    dev.mkdir(exist_ok=True)
    for name in [f"davinci{i}" for i in range(count)] + list(COMMON_NODES):
        (dev / name).touch()
    return dev


def write_inventory(path: Path, devices: list[Device], vnpu: Mapping[int, ChipVnpu] | None = None) -> Path:
    """Replace the inventory file in one rename, so the daemon never reads half of it; `vnpu` adds
    the chips' vNPU blocks."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(yaml.safe_dump(inventory_document(devices, vnpu), sort_keys=False), encoding="utf-8")
    os.replace(temp, path)
    return path


def dra_dirs(work: Path, node: str = NODE, kubeconfig: Path | None = None) -> list[str]:
    """The directory flags of a DRA daemon of `node` living in `work` (its kubeconfig too, unless
    given). The kubelet's directories are created here, as the kubelet does: the daemon waits for
    them. Its PodResources socket is work/pr/kubelet.sock, served only where a benchmark runs a
    simulator there: never the kubelet of the machine running the benchmark."""
    for kubelet_dir in ("reg", "plugins"):
        (work / kubelet_dir).mkdir(parents=True, exist_ok=True)
    return [
        "--node-name",
        node,
        "--kubelet-registrar-directory-path",
        str(work / "reg"),
        "--kubelet-plugins-directory-path",
        str(work / "plugins"),
        "--cdi-root",
        str(work / "cdi"),
        "--state-dir",
        str(work / "state"),
        "--kubeconfig",
        str(kubeconfig or work / "kubeconfig"),
        "--pod-resources-socket",
        str(work / "pr" / "kubelet.sock"),
    ]


def published(rest: RestClient) -> list[str] | None:
    """This node's published device names when the pool is complete (one generation, every slice
    there)."""
    return pool_devices(rest.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})["items"])


def pool_devices(items: list[dict[str, Any]]) -> list[str] | None:
    """The device names of one node's slices when its pool is complete (one generation, every slice
    there)."""
    pool = complete_pool(items)
    return None if pool is None else sorted(pool[1], key=lambda n: int(n.split("-")[1]))


def complete_pool(items: Sequence[Mapping[str, Any]]) -> tuple[int, list[str]] | None:
    """The generation and device names of one node's slices when its pool is complete, else None. A
    slice may hold only counters (no devices)."""
    pools = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in items}
    if len(pools) != 1 or next(iter(pools))[1] != len(items):
        return None
    return next(iter(pools))[0], [d["name"] for s in items for d in s["spec"].get("devices", [])]


def slice_count(rest: RestClient) -> int:
    return len(rest.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={NODE}"})["items"])


@dataclass(frozen=True)
class CpuReading:
    """A process's CPU time (every live thread's, from schedstat: nanoseconds, not 10 ms ticks) and
    its context switches, which count wakeups: a thread that sleeps and wakes switches out once per
    wakeup."""

    seconds: float
    switches: int


def cpu_reading(pid: int) -> CpuReading:
    seconds, switches = 0.0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds += int((task / "schedstat").read_text().split()[0]) / 1e9
            status = (task / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
        switches += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)
    return CpuReading(seconds, switches)


# Verbs (RecordedRequest.verb, upper-cased as tables show them) that change the store.
WRITES = frozenset({"CREATE", "UPDATE", "PATCH", "DELETE", "DELETECOLLECTION"})

HOUR = 3600.0
# How a watch of a node at rest ends by itself: its timeoutSeconds passes, or its client closes it.
# The other ends (the server stopping, ending every watch, an injected fault) are not the daemon's
# doing.
ENDS_AT_REST = ("timeout", "connection lost")


def per_node_hour(requests: list[RecordedRequest], seconds: float, nodes: int = 1) -> dict[str, float]:
    """The requests answered over a window of `seconds`, by verb (upper-case), scaled to one
    node-hour."""
    counted = Counter(r.verb.upper() for r in requests)
    return {name: round(count * HOUR / seconds / nodes, 1) for name, count in sorted(counted.items())}


@dataclass(frozen=True)
class WatchLives:
    """The watches that ended within a window, as the API server saw them: how long each one that
    ended by itself (ENDS_AT_REST) stayed open, every end by why, and how many were still open when
    the window closed."""

    lifetimes: tuple[float, ...]
    ends: Mapping[str, int]
    still_open: int

    @classmethod
    def from_results(cls, stored: Mapping[str, Any]) -> WatchLives:
        """From its `dataclasses.asdict` form in the results."""
        return cls(tuple(stored["lifetimes"]), stored["ends"], stored["still_open"])

    @property
    def per_hour(self) -> float | None:
        """One node's WATCH requests in an hour at rest: a watch is re-opened as it ends, so one per
        lifetime (None when no watch ended by itself in the window)."""
        if not self.lifetimes:
            return None
        return round(HOUR / (sum(self.lifetimes) / len(self.lifetimes)), 1)

    def note(self) -> str:
        """What a requests-at-rest row says about its WATCH rate."""
        ends = ", ".join(f"{why} {count}" for why, count in sorted(self.ends.items())) or "none"
        if not self.lifetimes:
            return f"no watch ended by itself in the window (ended: {ends}; {self.still_open} open): WATCH not measured"
        low, high = min(self.lifetimes), max(self.lifetimes)
        mean = sum(self.lifetimes) / len(self.lifetimes)
        return (
            f"WATCH from {len(self.lifetimes)} watch lifetimes (mean {mean:.0f} s, {low:.0f}-{high:.0f} s; "
            f"ended: {ends}; {self.still_open} open)"
        )


def watch_lives(requests: list[RecordedRequest], since: float, until: float) -> WatchLives:
    """The lives of the watches among `requests` that ended between `since` and `until`
    (time.monotonic())."""
    watches = [r for r in requests if r.verb == "watch" and r.started <= until]
    ended = [r for r in watches if r.ended is not None and since <= r.ended <= until]
    return WatchLives(
        lifetimes=tuple(round(r.ended - r.started, 1) for r in ended if r.ended is not None and r.end in ENDS_AT_REST),
        ends=dict(Counter(r.end for r in ended)),
        still_open=sum(r.ended is None or r.ended > until for r in watches),
    )


def at_rest_per_node_hour(counted: Mapping[str, float], lives: WatchLives) -> dict[str, float] | None:
    """What an at-rest target is judged on: every verb as counted over the window, except WATCH,
    which comes from the watches' lifetimes (a window shorter than a watch cycle counts 0 or a
    multiple of 3600/window by chance, and one of a single cycle counts the first renewal of nodes
    started together, not the steady rate). None when no watch ended by itself in the window."""
    watches = lives.per_hour
    if watches is None:
        return None
    return dict(sorted(({k: v for k, v in counted.items() if k != "WATCH"} | {"WATCH": watches}).items()))
