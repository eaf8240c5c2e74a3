"""Device-plugin benchmarks: Allocate latency against a trivial gRPC floor, idle RSS, time to register.

Run through scripts/bench. Nothing here asserts on time: it prints a table and writes JSON, and the
reader compares with the targets (Allocate p50 <= 1.5x floor, p99 <= 2x; idle RSS <= 45 MiB;
registered <= 1 s after start).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from npu_plugin.edits import COMMON_NODES
from npu_plugin.sim.kubelet import KubeletSimulator

RESOURCE = "huawei.com/Ascend910"
ECHO_METHOD = "/bench.Echo/Echo"
TARGETS = {"allocate_p50_ratio": 1.5, "allocate_p99_ratio": 2.0, "idle_rss_mib": 45.0, "registered_s": 1.0}


@dataclass
class Results:
    calls: int
    allocate_p50_us: float
    allocate_p99_us: float
    floor_p50_us: float
    floor_p99_us: float
    allocate_p50_ratio: float
    allocate_p99_ratio: float
    registered_s: float
    idle_rss_mib: float
    rss_after_load_mib: float


def serve_echo(socket_path: str) -> None:
    """The floor: a unary method that returns its request bytes, on its own process and Unix socket."""

    async def main() -> None:
        async def echo(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            return request

        handler = grpc.method_handlers_generic_handler(
            "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
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


@contextlib.contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, stopped by its pid when the block ends."""
    with log.open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout}s")
        await asyncio.sleep(0.005)


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


async def interleaved(
    daemon_socket: Path, echo_socket: Path, calls: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Allocate and echo, alternating which goes first, each over its own channel like the kubelet's."""
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=["Ascend910-2", "Ascend910-3"])])
    payload = request.SerializeToString()
    async with grpc.aio.insecure_channel(f"unix://{daemon_socket}") as plugin, \
            grpc.aio.insecure_channel(f"unix://{echo_socket}") as floor:
        stub = pb_grpc.DevicePluginStub(plugin)
        echo: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = floor.unary_unary(ECHO_METHOD)
        allocations: list[float] = []
        echoes: list[float] = []
        for i in range(warmup + calls):
            if i % 2:
                e = await timed(lambda: echo(payload))
                a = await timed(lambda: stub.Allocate(request))
            else:
                a = await timed(lambda: stub.Allocate(request))
                e = await timed(lambda: echo(payload))
            if i >= warmup:
                allocations.append(a)
                echoes.append(e)
    return allocations, echoes


async def measure(work: Path, calls: int, warmup: int, settle: float) -> Results:
    dev_root, plugin_dir = work / "dev", work / "dp"
    dev_root.mkdir()
    for name in [f"davinci{i}" for i in range(8)] + list(COMMON_NODES):
        (dev_root / name).touch()
    echo_socket = work / "echo.sock"
    serve = [sys.executable, "-m", "npu_plugin", "serve", "--mode", "device-plugin", "--backend", "fake",
             "--fake-profile", "atlas-800t-a2", "--dev-root", str(dev_root), "--device-plugin-path", str(plugin_dir),
             "--log-level", "warning"]
    async with kubelet_at(plugin_dir) as kubelet:
        with process([sys.executable, "-m", "benchmarks.bench", "--serve-echo", str(echo_socket)],
                     work / "echo.log"), \
                process(serve, work / "daemon.log") as daemon:
            started = time.monotonic()
            await wait_for(lambda: bool(kubelet.registrations), 30, "registration")
            registered = kubelet.registrations[0][1] - started
            await wait_for(echo_socket.exists, 30, "echo server")
            await asyncio.sleep(settle)
            idle = rss_mib(daemon.pid)
            allocations, echoes = await interleaved(kubelet.plugin(RESOURCE).endpoint, echo_socket, calls, warmup)
            loaded = rss_mib(daemon.pid)
    a50, a99 = percentile(allocations, 0.5) * 1e6, percentile(allocations, 0.99) * 1e6
    e50, e99 = percentile(echoes, 0.5) * 1e6, percentile(echoes, 0.99) * 1e6
    return Results(
        calls=calls, allocate_p50_us=round(a50, 1), allocate_p99_us=round(a99, 1), floor_p50_us=round(e50, 1),
        floor_p99_us=round(e99, 1), allocate_p50_ratio=round(a50 / e50, 2), allocate_p99_ratio=round(a99 / e99, 2),
        registered_s=round(registered, 3), idle_rss_mib=round(idle, 1), rss_after_load_mib=round(loaded, 1),
    )


def table(results: Results) -> str:
    rows = [
        ("Allocate p50", f"{results.allocate_p50_us:.0f} us", f"floor {results.floor_p50_us:.0f} us",
         f"{results.allocate_p50_ratio:.2f}x (target <= {TARGETS['allocate_p50_ratio']}x)"),
        ("Allocate p99", f"{results.allocate_p99_us:.0f} us", f"floor {results.floor_p99_us:.0f} us",
         f"{results.allocate_p99_ratio:.2f}x (target <= {TARGETS['allocate_p99_ratio']}x)"),
        ("idle RSS", f"{results.idle_rss_mib:.1f} MiB", f"after load {results.rss_after_load_mib:.1f} MiB",
         f"target <= {TARGETS['idle_rss_mib']:.0f} MiB"),
        ("start -> registered", f"{results.registered_s:.3f} s", "", f"target <= {TARGETS['registered_s']:.0f} s"),
    ]
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, width, strict=True)).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"), help="where to write the results")
    parser.add_argument("--calls", type=int, default=2000, help="measured calls of each kind")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between registration and the RSS read")
    parser.add_argument("--serve-echo", metavar="SOCKET", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_echo:
        serve_echo(args.serve_echo)
        return 0
    work = Path(tempfile.mkdtemp(prefix="npu-bench-", dir="/tmp"))
    try:
        results = asyncio.run(measure(work, args.calls, args.warmup, args.settle))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    args.json.write_text(json.dumps({"results": asdict(results), "targets": TARGETS}, indent=2) + "\n")
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
