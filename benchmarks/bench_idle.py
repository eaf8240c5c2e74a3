"""Idle cost of each mode: CPU-seconds per hour, wakeups per second, RSS, ListAndWatch messages and
API requests at rest, of a daemon with default settings (--health-interval 5) on the fake backend.

The three daemons run side by side, each with its own kubelet simulators and (dra, both) its own
fake API server in this process. Once they have registered and published, and settled, their CPU
time (every thread's, from schedstat), context switches (one per wakeup), ListAndWatch messages and
the API requests their fake server answered are counted over `Budget.idle_window` seconds (CPU
scaled to an hour). A watch lives 5 to 10 minutes, longer than the window, so no watch ends in it
and its WATCH rate is not measured here (the row says so, with the lifetimes of any watch that did
end); `scripts/bench --fleet` measures it from every node's watch lifetime over a full watch cycle.
Targets: <= 5 CPU-s/h in every mode; no LIST and no write at rest; no ListAndWatch message while
nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    FULL,
    HOUR,
    NODE,
    RESOURCE,
    WRITES,
    Budget,
    CpuReading,
    WatchLives,
    cpu_reading,
    dev_root,
    dra_dirs,
    kubelet_at,
    rss_mib,
    serve_argv,
    wait_for,
    watch_lives,
)
from benchmarks.report import Row, at_most
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from npu_plugin.sim.kubelet import KubeletSimulator
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support.cleanup import process, temporary_directory
from tests.support.fakeapi import FakeKubeAPI, RecordedRequest

TARGETS = {"cpu_s_per_hour": 5.0, "lists_at_rest": 0, "writes_at_rest": 0, "messages": 0}
MODES = ("device-plugin", "dra", "both")


@dataclass
class Subject:
    """One idle daemon and what it talks to."""

    mode: str
    daemon: subprocess.Popen[bytes]
    kubelet: KubeletSimulator | None
    api: FakeKubeAPI | None

    def messages(self) -> int:
        """ListAndWatch messages the kubelet simulator has received on the current stream."""
        plugin = None if self.kubelet is None else self.kubelet.plugins.get(RESOURCE)
        return 0 if plugin is None else plugin.updates

    def requests(self) -> list[RecordedRequest]:
        """Every request this daemon's API server answered, since start."""
        return [] if self.api is None else self.api.requests


@dataclass
class Idle:
    mode: str
    window_s: float
    cpu_s_per_hour: float
    wakeups_per_s: float
    rss_mib: float
    messages: int
    counted: dict[str, int]  # the requests answered over the window, by verb
    watch_lives: WatchLives


async def start(stack: contextlib.AsyncExitStack, work: Path, mode: str) -> Subject:
    """A daemon of `mode` in `work`, registered (and published), with the simulators it needs."""
    work.mkdir()
    argv = ["--mode", mode, "--fake-profile", "atlas-800t-a2", "--dev-root", str(dev_root(work))]
    kubelet = api = None
    if mode != "dra":
        kubelet = await stack.enter_async_context(kubelet_at(work / "dp"))
        argv += ["--device-plugin-path", str(work / "dp")]
    if mode != "device-plugin":
        api = FakeKubeAPI()  # entered apart: __enter__ is typed as the simulators' smaller server
        stack.enter_context(api)
        api.add_node(NODE)
        api.write_kubeconfig(work / "kubeconfig")
        dra = DraKubeletSimulator(work / "reg", node_name=NODE, api_url=api.url, scan_interval=0.5)
        await stack.enter_async_context(dra)
        argv += dra_dirs(work)
    if mode == "both":
        pod_resources = PodResourcesSimulator(work / "pr" / "kubelet.sock", RESOURCE)
        await pod_resources.start()
        stack.push_async_callback(pod_resources.stop)
        argv += ["--dra-devices", "4-7"]  # its PodResources socket is the one of dra_dirs
    daemon = stack.enter_context(process(serve_argv(*argv), work / "daemon.log"))
    subject = Subject(mode, daemon, kubelet, api)
    if kubelet is not None:
        await kubelet.wait_until(lambda: subject.messages() > 0, 30, f"ListAndWatch of the {mode} daemon")
    if api is not None:
        await wait_for(lambda: api.objects("ResourceSlice"), 30, f"a ResourceSlice of the {mode} daemon", 0.05)
    return subject


@dataclass
class Before:
    """What a subject had done when the window opened."""

    cpu: CpuReading
    messages: int
    requests: int  # how many requests its API server had answered


def idle(subject: Subject, before: Before, after: CpuReading, window: float, closed: float) -> Idle:
    scale = HOUR / window
    requests = subject.requests()
    in_window = requests[before.requests :]
    return Idle(
        mode=subject.mode,
        window_s=window,
        cpu_s_per_hour=round((after.seconds - before.cpu.seconds) * scale, 2),
        wakeups_per_s=round((after.switches - before.cpu.switches) / window, 1),
        rss_mib=round(rss_mib(subject.daemon.pid), 1),
        messages=subject.messages() - before.messages,
        counted=dict(sorted(Counter(r.verb.upper() for r in in_window).items())),
        watch_lives=watch_lives(requests, closed - window, closed),
    )


async def measure(work: Path, window: float, settle: float) -> list[Idle]:
    async with contextlib.AsyncExitStack() as stack:
        subjects = [await start(stack, work / mode, mode) for mode in MODES]
        # Past start-up: the first health samples, the slice publisher's coalescing, the handover.
        await asyncio.sleep(settle)
        before = [Before(cpu_reading(s.daemon.pid), s.messages(), len(s.requests())) for s in subjects]
        await asyncio.sleep(window)
        after = [cpu_reading(s.daemon.pid) for s in subjects]
        closed = time.monotonic()
        return [idle(s, b, a, window, closed) for s, b, a in zip(subjects, before, after, strict=True)]


def rows(section: dict[str, Any]) -> list[Row]:
    t = section["targets"]
    result = []
    for r in section["results"]:
        mode, window = r["mode"], f"over {r['window_s']:g} s"
        result.append(
            Row(
                f"idle CPU, {mode}",
                f"{r['cpu_s_per_hour']:.2f} CPU-s/h",
                f"{r['wakeups_per_s']:.1f} wakeups/s, RSS {r['rss_mib']:.1f} MiB, {window}",
                f"<= {t['cpu_s_per_hour']:g} CPU-s/h",
                at_most(r["cpu_s_per_hour"], t["cpu_s_per_hour"]),
            )
        )
        if mode != "dra":
            result.append(
                Row(
                    f"ListAndWatch messages at rest, {mode}",
                    str(r["messages"]),
                    window,
                    f"<= {t['messages']}",
                    at_most(r["messages"], t["messages"]),
                )
            )
        if mode != "device-plugin":
            counted = r["counted"]
            lists, writes = counted.get("LIST", 0), sum(n for verb, n in counted.items() if verb in WRITES)
            lives = WatchLives(
                tuple(r["watch_lives"]["lifetimes"]), r["watch_lives"]["ends"], r["watch_lives"]["still_open"]
            )
            result.append(
                Row(
                    f"API requests at rest, {mode}",
                    ", ".join(f"{verb} {n}" for verb, n in counted.items()) or "none",
                    f"{window}; {lives.note()}; per node-hour: scripts/bench --fleet",
                    "no LIST, 0 writes",
                    lists == t["lists_at_rest"] and writes == t["writes_at_rest"],
                )
            )
    return result


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure every mode at rest and store the numbers and targets under results["idle"]."""
    with temporary_directory("npu-bench-idle-") as work:
        measured = asyncio.run(measure(work, budget.idle_window, settle=5.0))
    results["idle"] = {"results": [asdict(m) for m in measured], "targets": TARGETS}
