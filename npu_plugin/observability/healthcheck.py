"""grpc.health.v1 on --healthcheck-port: SERVING while every enabled API is registered and fresh."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterable, Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from npu_plugin.aio.tasks import first_of
from npu_plugin.errors import listen_error
from npu_plugin.inventory.state import samples_fresh

log = logging.getLogger(__name__)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def unmet(
    registered: Mapping[str, bool], last_sample: float, now: float, interval: float, problems: Iterable[str] = ()
) -> list[str]:
    """Pure: what keeps the service from SERVING, empty when nothing does.

    Every enabled API must be registered with the kubelet, and the inventory sampled within
    `inventory.state.FRESHNESS_INTERVALS` health intervals (a poller stuck in a hung driver call
    stops sampling); `problems` are what else a server reports as keeping it from serving (another
    publisher's ResourceSlices on the node).
    """
    reasons = [f"{api} not registered with the kubelet" for api, up in registered.items() if not up]
    reasons += problems
    if not samples_fresh(last_sample, now, interval):
        reasons.append(f"no health sample for {now - last_sample:.1f}s")
    return reasons


def bind_failure(address: str, port: int) -> OSError:
    """Why `address:port` cannot be listened on, from a plain bind of it (gRPC does not tell)."""
    info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    family, kind, _, _, where = info
    with socket.socket(family, kind) as probe:
        try:
            probe.bind(where)
        except OSError as error:
            return error
    return OSError("gRPC could not listen there")


class HealthService:
    """Owns the gRPC health server; `set_registered` is called by the plugins' callbacks."""

    def __init__(self, apis: list[str], last_sample: Callable[[], float], interval: float) -> None:
        self.registered = dict.fromkeys(apis, False)
        self.problems: dict[str, str] = {}
        self._last_sample, self._interval = last_sample, interval
        self._servicer = health_aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._status: health_pb2.HealthCheckResponse.ServingStatus | None = None
        self._changed = asyncio.Event()
        self.port = 0

    def set_registered(self, api: str, registered: bool) -> None:
        self.registered[api] = registered
        self._changed.set()  # a probe must not see SERVING for a poll period after the kubelet is gone

    def set_problem(self, key: str, reason: str | None) -> None:
        """A condition that keeps the daemon from serving (`reason`), or its end (None)."""
        if reason is None:
            self.problems.pop(key, None)
        else:
            self.problems[key] = reason
        self._changed.set()

    async def start(self, address: str, port: int) -> None:
        # The servicer starts out SERVING: the verdict goes in before the first probe can connect.
        await self._evaluate()
        # Without SO_REUSEPORT (gRPC's default turns it on) a port another gRPC server holds is
        # refused, not shared.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        host = f"[{address}]" if ":" in address else address
        try:
            self.port = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # gRPC says only "Failed to bind": a plain bind tells why
            raise listen_error("--healthcheck-port", address, port, bind_failure(address, port)) from None
        await server.start()
        self._server = server
        log.info("gRPC health service listening on %s:%d", address, self.port)

    async def run(self, stop: asyncio.Event) -> None:
        """Re-evaluate on every registration change and every half interval until stopped."""
        while not stop.is_set():
            self._changed.clear()
            await self._evaluate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(first_of(stop.wait(), self._changed.wait()), min(self._interval / 2, 1.0))
        await self._servicer.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(0.5)

    async def _evaluate(self) -> None:
        reasons = unmet(self.registered, self._last_sample(), time.monotonic(), self._interval, self.problems.values())
        status = NOT_SERVING if reasons else SERVING
        if status != self._status:
            self._status = status
            await self._servicer.set("", status)
            name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
            log.info("health: %s%s", name, f" ({'; '.join(reasons)})" if reasons else "")
