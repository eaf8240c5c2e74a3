"""grpc.health.v1 on --healthcheck-port: SERVING while every enabled API is registered and fresh."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

log = logging.getLogger(__name__)
FRESHNESS_INTERVALS = 3


def is_serving(registered: dict[str, bool], last_sample: float, now: float, interval: float) -> bool:
    """Pure verdict: every enabled API registered, and a health sample within 3 intervals."""
    return all(registered.values()) and now - last_sample <= FRESHNESS_INTERVALS * interval


class HealthService:
    """Owns the gRPC health server; `registered` is updated by the plugins' callbacks."""

    def __init__(self, apis: list[str], last_sample: Callable[[], float], interval: float) -> None:
        self.registered = dict.fromkeys(apis, False)
        self._last_sample, self._interval = last_sample, interval
        self._servicer = health_aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self.port = 0

    def set_registered(self, api: str, registered: bool) -> None:
        self.registered[api] = registered

    async def start(self, address: str, port: int) -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        host = f"[{address}]" if ":" in address else address
        self.port = server.add_insecure_port(f"{host}:{port}")
        await server.start()
        self._server = server
        log.info("gRPC health service listening on %s:%d", address, self.port)

    async def run(self, stop: asyncio.Event) -> None:
        """Re-evaluate the verdict every half interval until stopped."""
        status = None
        while not stop.is_set():
            serving = is_serving(self.registered, self._last_sample(), time.monotonic(), self._interval)
            new = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            if new != status:
                status = new
                await self._servicer.set("", new)
                log.info("health: %s", health_pb2.HealthCheckResponse.ServingStatus.Name(new))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(self._interval / 2, 1.0))
        await self._servicer.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(0.5)
