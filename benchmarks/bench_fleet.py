"""scripts/bench --fleet N: what a fleet of N DRA nodes costs the API server, and how it comes back.

N daemons in DRA mode (default settings, each on its own fake inventory file, node name and
directories) share one fake API server, run in this process on 127.0.0.1 so its request log can be
read directly. Phases, in order:

1. cold start: every daemon starts at once; the time until every node's pool is published and complete;
2. rest: over `Budget.watch_cycle` seconds (630 s: past the daemons' longest watch, so every node's watch
   ends once; `--quick` uses `Budget.idle_window`, 30 s, where none ends), the requests the API server
   answered, counted by verb, and the lifetime of every watch that ended by itself, as the server saw it
   (from its open to its end, and why it ended); CPU-seconds per node-hour and RSS. The at-rest target is
   judged on the counted verbs with WATCH at one request per measured lifetime: a window of one watch
   cycle counts each node's first renewal only, as nodes started together renew together, so the counted
   WATCH rate (shown beside it) undercounts the steady state. With no watch ended, it is "not measured";
3. outage: one device of every node turns Critical, the API server stops for 30 s and restarts on the
   same port with the same store; the time from its return until every node's slices drop that device
   and until every node watches its slices again, and the peak LIST rate (over any one second) meanwhile;
4. flap: one device of one node turns Critical and back; the writes that causes, and on how many nodes.

The daemons share this machine's cores, so a cold start of many on few cores measures CPU contention
as much as the daemon. Every process started here is stopped by its pid, on error too. Targets: <=
12 requests per node-hour at rest and no write; all pools published <= 10 s after start; every node
correct <= 30 s after the API returns, with at most N/5 LISTs in any second.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common import (
    FULL,
    HOUR,
    WRITES,
    Budget,
    WatchLives,
    at_rest_per_node_hour,
    cpu_reading,
    dev_root,
    dra_dirs,
    dra_serve_argv,
    per_node_hour,
    percentile,
    pool_devices,
    rss_mib,
    watch_lives,
    write_inventory,
)
from benchmarks.report import Row, at_most
from npu_plugin.ascend.device import Health
from tests.support.cleanup import spawn, stop, temporary_directory
from tests.support.fake_devices import many_devices
from tests.support.fakeapi import FakeKubeAPI, RecordedRequest

TARGETS = {
    "requests_per_node_hour": 12.0,
    "writes_per_node_hour": 0.0,
    "cold_start_s": 10.0,
    "recovery_s": 30.0,
    "peak_lists_per_s_per_node": 0.2,
}
DEVICES = 8
OUTAGE_S = 30.0
SETTLE_S = 10.0
TIMEOUT_S = 300.0
POLL_S = 0.1
OUTAGE_DEVICE, FLAP_DEVICE = 7, 1


@dataclass
class Member:
    """One node of the fleet: its daemon and the inventory file it reads."""

    node: str
    inventory: Path
    daemon: subprocess.Popen[bytes]
    started: float  # time.monotonic() when its process was started

    def set_critical(self, physical_ids: set[int]) -> None:
        devices = many_devices(DEVICES)
        write_inventory(
            self.inventory,
            [replace(d, health=Health.CRITICAL) if d.physical_id in physical_ids else d for d in devices],
        )


@dataclass
class FleetResults:
    nodes: int
    cpus: int | None
    cold_start_s: float
    cold_start_node_p50_s: float
    cold_start_node_max_s: float
    rest_window_s: float
    requests_per_node_hour: dict[str, float] | None  # what the target is judged on; None: not measured
    counted_at_rest: dict[str, int]
    counted_per_node_hour: dict[str, float]
    watch_lives: WatchLives
    cpu_s_per_node_hour: float
    cpu_s_per_node_hour_max: float
    rss_mib_mean: float
    outage_s: float
    recovery_s: float
    watching_again_s: float
    peak_lists_per_s: int
    peak_requests_per_s: int
    recovery_requests: dict[str, int]
    flap_writes: int
    flap_writing_nodes: int


def names(critical: set[int]) -> list[str]:
    return [f"npu-{i}" for i in range(DEVICES) if i not in critical]


def pools(api: FakeKubeAPI) -> dict[str, list[str] | None]:
    """Every node's complete pool (device names), None while one is incomplete."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for item in api.objects("ResourceSlice"):
        by_node.setdefault(item["spec"]["nodeName"], []).append(item)
    return {node: pool_devices(items) for node, items in by_node.items()}


def wait_until_correct(
    api: FakeKubeAPI, nodes: list[str], want: Callable[[str], list[str]], on_poll: Callable[[], None] = lambda: None
) -> dict[str, float]:
    """When (time.monotonic()) each node's pool became `want(node)`; TimeoutError after
    TIMEOUT_S."""
    started, done = time.monotonic(), dict[str, float]()
    while len(done) < len(nodes):
        on_poll()
        current = pools(api)
        for node in nodes:
            if node not in done and current.get(node) == want(node):
                done[node] = time.monotonic()
        if time.monotonic() - started > TIMEOUT_S:
            late = sorted(set(nodes) - done.keys())
            raise TimeoutError(f"{len(late)} node(s) not correct within {TIMEOUT_S:g} s: {', '.join(late[:5])}")
        time.sleep(POLL_S)
    return done


def verbs(requests: list[RecordedRequest]) -> Counter[str]:
    return Counter(r.verb.upper() for r in requests)


class RequestRate:
    """The most LISTs, and the most requests of any verb, the API server answered within any one
    second, from request-log samples."""

    def __init__(self, api: FakeKubeAPI) -> None:
        self._api = api
        self._lists: list[tuple[float, int]] = []
        self._all: list[tuple[float, int]] = []

    def sample(self) -> None:
        now, requests = time.monotonic(), self._api.requests
        self._lists.append((now, sum(1 for r in requests if r.verb.upper() == "LIST")))
        self._all.append((now, len(requests)))

    def peak_lists(self) -> int:
        return peak_per_second(self._lists)

    def peak_requests(self) -> int:
        return peak_per_second(self._all)


def peak_per_second(samples: list[tuple[float, int]]) -> int:
    """The largest growth of a running count within one second, from (seconds, count so far) samples
    in time order; a sample less than a second after the first counts from zero."""
    best = 0
    for end, count in samples:
        before = [c for t, c in samples if t <= end - 1.0]
        best = max(best, count - (before[-1] if before else 0))
    return best


@contextlib.contextmanager
def fleet(work: Path, api: FakeKubeAPI, size: int) -> Iterator[list[Member]]:
    """`size` DRA daemons, started at once; every one is stopped by its pid when the block ends."""
    kubeconfig = work / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    members: list[Member] = []
    try:
        for index in range(size):
            node = f"node-{index:03d}"
            home = work / node
            home.mkdir()
            inventory = write_inventory(home / "inventory.yaml", many_devices(DEVICES))
            argv = dra_serve_argv(inventory, dev_root(home, DEVICES), dra_dirs(home, node, kubeconfig))
            started = time.monotonic()
            daemon = spawn(argv, home / "daemon.log")
            members.append(Member(node, inventory, daemon, started))
        yield members
    finally:
        stop([m.daemon for m in members])


@dataclass
class Rest:
    counted: Counter[str]  # in the window, every verb
    counted_per_node_hour: dict[str, float]
    watch_lives: WatchLives
    cpu_s_per_hour: list[float]
    rss_mib: list[float]


def at_rest(api: FakeKubeAPI, members: list[Member], window: float) -> Rest:
    """Requests, watch lifetimes, CPU and RSS of the settled fleet over `window` seconds."""
    time.sleep(SETTLE_S)
    start, opened = len(api.requests), time.monotonic()
    before = [cpu_reading(m.daemon.pid).seconds for m in members]
    time.sleep(window)
    after = [cpu_reading(m.daemon.pid).seconds for m in members]
    closed = time.monotonic()
    requests = api.requests
    return Rest(
        verbs(requests[start:]),
        per_node_hour(requests[start:], window, len(members)),
        watch_lives(requests, opened, closed),
        [(a - b) * HOUR / window for a, b in zip(after, before, strict=True)],
        [rss_mib(m.daemon.pid) for m in members],
    )


@dataclass
class Recovery:
    correct_s: float  # from the API server's return until every node's slices are correct
    watching_s: float  # ... until every node watches its slices again
    lists_per_s: int  # the most LISTs within any one second, until both
    requests_per_s: int  # the most requests of any verb within any one second, until both
    requests: Counter[str]


def outage(api: FakeKubeAPI, members: list[Member]) -> Recovery:
    """A device of every node fails while the API server is away for OUTAGE_S; how the fleet comes
    back."""
    for member in members:
        member.set_critical({OUTAGE_DEVICE})
    api.set_down(True)
    time.sleep(OUTAGE_S)
    api.clear_requests()
    rate = RequestRate(api)
    api.set_down(False)
    returned = time.monotonic()
    nodes = [m.node for m in members]
    recovered = wait_until_correct(api, nodes, lambda _node: names({OUTAGE_DEVICE}), rate.sample)
    while not set(nodes) <= {r.node for r in api.requests if r.verb == "watch"}:
        if time.monotonic() - returned > TIMEOUT_S:
            raise TimeoutError(f"not every node watches its slices again within {TIMEOUT_S:g} s")
        rate.sample()
        time.sleep(POLL_S)
    watching = time.monotonic() - returned
    time.sleep(2.0)  # stragglers: requests that follow still count
    rate.sample()
    return Recovery(
        max(recovered.values()) - returned, watching, rate.peak_lists(), rate.peak_requests(), verbs(api.requests)
    )


def flap(api: FakeKubeAPI, member: Member) -> tuple[int, int]:
    """One device of one node turns Critical and back: the writes, and how many nodes wrote."""
    time.sleep(SETTLE_S)
    api.clear_requests()
    member.set_critical({OUTAGE_DEVICE, FLAP_DEVICE})
    wait_until_correct(api, [member.node], lambda _node: names({OUTAGE_DEVICE, FLAP_DEVICE}))
    member.set_critical({OUTAGE_DEVICE})
    wait_until_correct(api, [member.node], lambda _node: names({OUTAGE_DEVICE}))
    time.sleep(2.0)  # our own writes coming back through the watch must not cause more
    writes = [r for r in api.requests if r.verb.upper() in WRITES]
    writers = {r.body.get("spec", {}).get("nodeName") for r in writes if isinstance(r.body, dict)}
    return len(writes), len(writers - {None})


def measure(work: Path, size: int, window: float) -> FleetResults:
    nodes = [f"node-{index:03d}" for index in range(size)]
    api = FakeKubeAPI()  # entered apart: __enter__ is typed as the simulators' smaller server
    with api:
        for node in nodes:
            api.add_node(node)
        started = time.monotonic()
        with fleet(work, api, size) as members:
            published = wait_until_correct(api, nodes, lambda _node: names(set()))
            cold_start = max(published.values()) - started
            # Each node from its own process start: starting N processes takes a while on few cores.
            per_node = [published[m.node] - m.started for m in members]
            rest = at_rest(api, members, window)
            recovery = outage(api, members)
            writes, writers = flap(api, members[0])
    return FleetResults(
        nodes=size,
        cpus=os.cpu_count(),
        cold_start_s=round(cold_start, 2),
        cold_start_node_p50_s=round(percentile(per_node, 0.5), 2),
        cold_start_node_max_s=round(max(per_node), 2),
        rest_window_s=window,
        requests_per_node_hour=at_rest_per_node_hour(rest.counted_per_node_hour, rest.watch_lives),
        counted_at_rest=dict(sorted(rest.counted.items())),
        counted_per_node_hour=rest.counted_per_node_hour,
        watch_lives=rest.watch_lives,
        cpu_s_per_node_hour=round(sum(rest.cpu_s_per_hour) / size, 2),
        cpu_s_per_node_hour_max=round(max(rest.cpu_s_per_hour), 2),
        rss_mib_mean=round(sum(rest.rss_mib) / size, 1),
        outage_s=OUTAGE_S,
        recovery_s=round(recovery.correct_s, 2),
        watching_again_s=round(recovery.watching_s, 2),
        peak_lists_per_s=recovery.lists_per_s,
        peak_requests_per_s=recovery.requests_per_s,
        recovery_requests=dict(sorted(recovery.requests.items())),
        flap_writes=writes,
        flap_writing_nodes=writers,
    )


def counted(requests: dict[str, int]) -> str:
    return "counted: " + (", ".join(f"{name} {count}" for name, count in requests.items()) or "none")


def by_verb(rates: dict[str, float]) -> str:
    return ", ".join(f"{name} {rate:g}" for name, rate in rates.items()) or "none"


def rest_row(r: dict[str, Any], t: dict[str, Any]) -> Row:
    """Requests at rest: judged on the counted verbs with WATCH from the watches' lifetimes; the
    counted WATCH rate is shown beside it."""
    lives = WatchLives.from_results(r["watch_lives"])
    counted_rates, judged = r["counted_per_node_hour"], r["requests_per_node_hour"]
    window = f"over {r['rest_window_s']:g} s, {counted(r['counted_at_rest'])} ({by_verb(counted_rates)} per node-hour)"
    target = f"<= {t['requests_per_node_hour']:g}, 0 writes"
    if judged is None:
        return Row("API requests at rest per node-hour", "not measured", f"{window}; {lives.note()}", target)
    writes = sum(count for name, count in judged.items() if name in WRITES)
    total = sum(judged.values())
    return Row(
        "API requests at rest per node-hour",
        f"{total:g}",
        f"{by_verb(judged)}; {window}; {lives.note()}",
        target,
        at_most(total, t["requests_per_node_hour"]) and writes == 0,
    )


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    n = r["nodes"]
    peak_limit = n * t["peak_lists_per_s_per_node"]
    return [
        Row(
            "cold start -> every pool published",
            f"{r['cold_start_s']:.2f} s",
            f"{n} daemons on {r['cpus']} cores; each from its own start: p50 {r['cold_start_node_p50_s']:.2f} s, "
            f"max {r['cold_start_node_max_s']:.2f} s",
            f"<= {t['cold_start_s']:g} s",
            at_most(r["cold_start_s"], t["cold_start_s"]),
        ),
        rest_row(r, t),
        Row(
            "CPU at rest per node-hour",
            f"{r['cpu_s_per_node_hour']:.2f} CPU-s/h",
            f"max {r['cpu_s_per_node_hour_max']:.2f}; RSS mean {r['rss_mib_mean']:.1f} MiB; --fake-inventory",
        ),
        Row(
            f"API back after {r['outage_s']:g} s -> every node correct",
            f"{r['recovery_s']:.2f} s",
            ", ".join(f"{name} {count}" for name, count in r["recovery_requests"].items()),
            f"<= {t['recovery_s']:g} s",
            at_most(r["recovery_s"], t["recovery_s"]),
        ),
        Row(
            "peak LIST rate during recovery",
            f"{r['peak_lists_per_s']}/s",
            f"most LISTs answered within any one second; all verbs peak {r['peak_requests_per_s']}/s; "
            f"every node watching again after {r['watching_again_s']:.2f} s",
            f"<= {peak_limit:g}/s (N/5)",
            at_most(r["peak_lists_per_s"], peak_limit),
        ),
        Row(
            "writes when one device flaps",
            str(r["flap_writes"]),
            f"fault and recovery on one node; {r['flap_writing_nodes']} node(s) wrote",
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL, size: int = 50) -> None:
    """Measure a fleet of `size` nodes and store the numbers and targets under results["fleet"]."""
    with temporary_directory("npu-bench-fleet-") as work:
        measured = measure(work, size, max(budget.idle_window, budget.watch_cycle))
    results["fleet"] = {"results": asdict(measured), "targets": TARGETS}
