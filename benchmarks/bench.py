"""Device-plugin benchmarks: Allocate latency against a trivial gRPC floor, idle RSS, time to
register, and what --metrics-port costs Allocate.

`run(results)` adds a "device_plugin" entry to `results`; scripts/bench prints it with the rest.
Nothing here asserts on time. There are two floors, each a trivial unary call over a Unix socket in
a process of its own: an asyncio server like the daemon's and a synchronous grpcio server (thread
pool). Targets: Allocate p50 <= 1.5x the asyncio floor, p99 <= 2x; p50 <= 1.3x the synchronous
floor, p99 <= 1.5x; idle RSS <= 45 MiB; registered <= 1 s after start; Allocate with --metrics-port
0 within 1.1x (p50) and 1.25x (p99, noisier) of the same daemon without it — two daemons served side
by side and called interleaved, in the same run — plus the noise-free cost of recording one Allocate
in the metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import timeit
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from benchmarks.common import (
    FULL,
    RESOURCE,
    Budget,
    dev_root,
    kubelet_at,
    percentile,
    rss_mib,
    serve_argv,
    timed,
    wait_for,
)
from benchmarks.report import Row, at_most
from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.sim.kubelet import KubeletSimulator
from tests.support.cleanup import process, temporary_directory

ECHO_METHOD = "/bench.Echo/Echo"
TARGETS = {
    "allocate_p50_ratio": 1.5,
    "allocate_p99_ratio": 2.0,
    "allocate_p50_sync_ratio": 1.3,
    "allocate_p99_sync_ratio": 1.5,
    "idle_rss_mib": 45.0,
    "registered_s": 1.0,
    "metrics_p50_ratio": 1.1,
    "metrics_p99_ratio": 1.25,
}
# The daemon measured against the floor, and its twin with Prometheus metrics on.
PLAIN, METRICS, FLOOR, SYNC_FLOOR = "plain", "metrics", "floor", "sync floor"
PROFILE = ("--fake-profile", "atlas-800t-a2")


@dataclass
class Results:
    calls: int
    allocate_p50_us: float
    allocate_p99_us: float
    floor_p50_us: float
    floor_p99_us: float
    allocate_p50_ratio: float
    allocate_p99_ratio: float
    sync_floor_p50_us: float
    sync_floor_p99_us: float
    allocate_p50_sync_ratio: float
    allocate_p99_sync_ratio: float
    registered_s: float
    idle_rss_mib: float
    rss_after_load_mib: float
    metrics_allocate_p50_us: float
    metrics_allocate_p99_us: float
    metrics_p50_ratio: float
    metrics_p99_ratio: float
    metrics_idle_rss_mib: float
    metrics_allocations_counted: int
    metrics_record_us: float


def echo_handler(echo: Callable[..., Any]) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler("bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})


def serve_sync_echo(socket_path: str) -> None:
    """The synchronous floor: the echo on a plain grpcio server and its thread pool."""
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((echo_handler(lambda request, _context: request),))
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    stop.wait()
    server.stop(None)


def serve_echo(socket_path: str) -> None:
    """The asyncio floor: a unary method that returns its request bytes, on its own process and Unix
    socket."""

    async def main() -> None:
        async def echo(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            return request

        handler = echo_handler(echo)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix://{socket_path}")
        await server.start()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(None)

    asyncio.run(main())


async def interleaved(
    daemon_sockets: dict[str, Path], echo_sockets: dict[str, Path], calls: int, warmup: int
) -> dict[str, list[float]]:
    """Allocate on every daemon and echo on each floor, rotating which goes first, each over its own
    channel like the kubelet's; the measured seconds by name (daemon and floor names)."""
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=["Ascend910-2", "Ascend910-3"])]
    )
    async with contextlib.AsyncExitStack() as stack:
        call: dict[str, Callable[[], Awaitable[Any]]] = {}
        for name, path in daemon_sockets.items():
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(f"unix://{path}"))
            call[name] = partial(pb_grpc.DevicePluginStub(channel).Allocate, request)
        for name, path in echo_sockets.items():
            floor = await stack.enter_async_context(grpc.aio.insecure_channel(f"unix://{path}"))
            # The socket file appears at bind, a moment before the server listens: connect first.
            await asyncio.wait_for(floor.channel_ready(), 30)
            echo: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = floor.unary_unary(ECHO_METHOD)
            call[name] = partial(echo, request.SerializeToString())
        names = list(call)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for i in range(warmup + calls):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                seconds = await timed(call[name])
                if i >= warmup:
                    samples[name].append(seconds)
    return samples


@dataclass
class Served:
    """One daemon registered with its own kubelet simulator."""

    process: subprocess.Popen[bytes]
    kubelet: KubeletSimulator
    registered_s: float

    @property
    def socket(self) -> Path:
        return self.kubelet.plugin(RESOURCE).endpoint

    def rss(self) -> float:
        return rss_mib(self.process.pid)


@contextlib.asynccontextmanager
async def served(work: Path, name: str, *extra: str, source: Sequence[str] = PROFILE) -> AsyncIterator[Served]:
    """A device-plugin daemon on `source` (fake backend flags) registered with its own kubelet
    simulator."""
    plugin_dir = work / name
    argv = serve_argv(
        "--mode",
        "device-plugin",
        *source,
        "--dev-root",
        str(work / "dev"),
        "--device-plugin-path",
        str(plugin_dir),
        *extra,
    )
    async with kubelet_at(plugin_dir) as kubelet:
        with process(argv, work / f"{name}.log") as daemon:
            started = time.monotonic()
            await wait_for(lambda: bool(kubelet.registrations), 30, f"registration of the {name} daemon")
            yield Served(daemon, kubelet, kubelet.registrations[0][1] - started)


@contextlib.contextmanager
def echo_server(work: Path, floor: str = FLOOR) -> Iterator[Path]:
    """A floor's server (FLOOR or SYNC_FLOOR), in a process of its own like the daemon; its
    socket."""
    name = floor.replace(" ", "-")
    socket_path = work / f"{name}.sock"
    option = "--serve-echo" if floor == FLOOR else "--serve-sync-echo"
    with process([sys.executable, "-m", "benchmarks.bench", option, str(socket_path)], work / f"{name}.log"):
        yield socket_path


def free_port() -> int:
    # The daemon logs the port it chose only at info level, and info logging would slow every
    # Allocate.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def allocations_counted(port: int) -> int:
    """npu_plugin_allocations_total of the metrics daemon: proof that its Allocates really
    recorded."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r"^npu_plugin_allocations_total (\S+)$", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no npu_plugin_allocations_total in:\n{text}")
    return int(float(match.group(1)))


async def measure(work: Path, calls: int, warmup: int, settle: float) -> Results:
    dev_root(work)
    port = free_port()
    # One after the other, so neither start competes with the other for the CPU.
    async with (
        served(work, PLAIN) as plain,
        served(work, METRICS, "--metrics-port", str(port), "--bind-address", "127.0.0.1") as metrics,
    ):
        with echo_server(work, FLOOR) as floor, echo_server(work, SYNC_FLOOR) as sync_floor:
            echo_sockets = {FLOOR: floor, SYNC_FLOOR: sync_floor}
            await wait_for(lambda: all(path.exists() for path in echo_sockets.values()), 30, "echo servers")
            await asyncio.sleep(settle)
            idle = {PLAIN: plain.rss(), METRICS: metrics.rss()}
            samples = await interleaved({PLAIN: plain.socket, METRICS: metrics.socket}, echo_sockets, calls, warmup)
            loaded = plain.rss()
            counted = await asyncio.to_thread(allocations_counted, port)
    return results(samples, plain.registered_s, idle, loaded, counted)


def results(
    samples: dict[str, list[float]], registered: float, idle: dict[str, float], loaded: float, counted: int
) -> Results:
    p50 = {name: percentile(values, 0.5) * 1e6 for name, values in samples.items()}
    p99 = {name: percentile(values, 0.99) * 1e6 for name, values in samples.items()}
    return Results(
        calls=len(samples[PLAIN]),
        allocate_p50_us=round(p50[PLAIN], 1),
        allocate_p99_us=round(p99[PLAIN], 1),
        floor_p50_us=round(p50[FLOOR], 1),
        floor_p99_us=round(p99[FLOOR], 1),
        allocate_p50_ratio=round(p50[PLAIN] / p50[FLOOR], 2),
        allocate_p99_ratio=round(p99[PLAIN] / p99[FLOOR], 2),
        sync_floor_p50_us=round(p50[SYNC_FLOOR], 1),
        sync_floor_p99_us=round(p99[SYNC_FLOOR], 1),
        allocate_p50_sync_ratio=round(p50[PLAIN] / p50[SYNC_FLOOR], 2),
        allocate_p99_sync_ratio=round(p99[PLAIN] / p99[SYNC_FLOOR], 2),
        registered_s=round(registered, 3),
        idle_rss_mib=round(idle[PLAIN], 1),
        rss_after_load_mib=round(loaded, 1),
        metrics_allocate_p50_us=round(p50[METRICS], 1),
        metrics_allocate_p99_us=round(p99[METRICS], 1),
        metrics_p50_ratio=round(p50[METRICS] / p50[PLAIN], 2),
        metrics_p99_ratio=round(p99[METRICS] / p99[PLAIN], 2),
        metrics_idle_rss_mib=round(idle[METRICS], 1),
        metrics_allocations_counted=counted,
        metrics_record_us=round(record_cost_us(), 2),
    )


def record_cost_us(rounds: int = 100_000) -> float:
    """What metrics add to one Allocate, free of the noise between two processes: one
    record_allocate."""
    from npu_plugin.observability.metrics import Metrics

    metrics = Metrics()
    return timeit.timeit(lambda: metrics.record_allocate(0.0003, 1), number=rounds) / rounds * 1e6


def rows(section: dict[str, Any]) -> list[Row]:
    r, t = section["results"], section["targets"]
    return [
        Row(
            "Allocate p50",
            f"{r['allocate_p50_us']:.0f} us",
            f"floor {r['floor_p50_us']:.0f} us, {r['allocate_p50_ratio']:.2f}x",
            f"<= {t['allocate_p50_ratio']}x floor",
            at_most(r["allocate_p50_ratio"], t["allocate_p50_ratio"]),
        ),
        Row(
            "Allocate p99",
            f"{r['allocate_p99_us']:.0f} us",
            f"floor {r['floor_p99_us']:.0f} us, {r['allocate_p99_ratio']:.2f}x",
            f"<= {t['allocate_p99_ratio']}x floor",
            at_most(r["allocate_p99_ratio"], t["allocate_p99_ratio"]),
        ),
        Row(
            "Allocate p50 / sync floor",
            f"{r['allocate_p50_sync_ratio']:.2f}x",
            f"sync grpcio floor {r['sync_floor_p50_us']:.0f} us",
            f"<= {t['allocate_p50_sync_ratio']}x",
            at_most(r["allocate_p50_sync_ratio"], t["allocate_p50_sync_ratio"]),
        ),
        Row(
            "Allocate p99 / sync floor",
            f"{r['allocate_p99_sync_ratio']:.2f}x",
            f"sync grpcio floor {r['sync_floor_p99_us']:.0f} us",
            f"<= {t['allocate_p99_sync_ratio']}x",
            at_most(r["allocate_p99_sync_ratio"], t["allocate_p99_sync_ratio"]),
        ),
        Row(
            "start -> registered",
            f"{r['registered_s']:.3f} s",
            "",
            f"<= {t['registered_s']:g} s",
            at_most(r["registered_s"], t["registered_s"]),
        ),
        Row(
            "idle RSS",
            f"{r['idle_rss_mib']:.1f} MiB",
            f"after load {r['rss_after_load_mib']:.1f} MiB",
            f"<= {t['idle_rss_mib']:g} MiB",
            at_most(r["idle_rss_mib"], t["idle_rss_mib"]),
        ),
        Row(
            "Allocate p50, --metrics-port on",
            f"{r['metrics_allocate_p50_us']:.0f} us",
            f"off {r['allocate_p50_us']:.0f} us, {r['metrics_p50_ratio']:.2f}x",
            f"<= {t['metrics_p50_ratio']}x off",
            at_most(r["metrics_p50_ratio"], t["metrics_p50_ratio"]),
        ),
        Row(
            "Allocate p99, --metrics-port on",
            f"{r['metrics_allocate_p99_us']:.0f} us",
            f"off {r['allocate_p99_us']:.0f} us, {r['metrics_p99_ratio']:.2f}x",
            f"<= {t['metrics_p99_ratio']}x off",
            at_most(r["metrics_p99_ratio"], t["metrics_p99_ratio"]),
        ),
        Row(
            "idle RSS, --metrics-port on",
            f"{r['metrics_idle_rss_mib']:.1f} MiB",
            f"{r['metrics_allocations_counted']} allocations counted",
        ),
        Row(
            "recording one Allocate in metrics",
            f"{r['metrics_record_us']:.2f} us",
            f"{r['metrics_record_us'] / r['allocate_p50_us']:.2%} of Allocate p50",
        ),
    ]


def run(results: dict[str, Any], budget: Budget = FULL) -> None:
    """Measure device-plugin mode and store the numbers and targets under
    results["device_plugin"]."""
    with temporary_directory("npu-bench-") as work:
        measured = asyncio.run(measure(work, budget.calls, budget.warmup, budget.settle))
    results["device_plugin"] = {"results": asdict(measured), "targets": TARGETS}


def main(argv: list[str] | None = None) -> int:
    """Only the floors' echo servers start here; scripts/bench runs everything (benchmarks.run)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench")
    floors = parser.add_mutually_exclusive_group(required=True)
    floors.add_argument("--serve-echo", metavar="SOCKET")
    floors.add_argument("--serve-sync-echo", metavar="SOCKET")
    args = parser.parse_args(argv)
    if args.serve_echo:
        serve_echo(args.serve_echo)
    else:
        serve_sync_echo(args.serve_sync_echo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
