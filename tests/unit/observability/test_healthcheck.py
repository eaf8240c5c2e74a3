"""The gRPC health verdict: the pure rule table-driven, and the service over a real 127.0.0.1
port."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npu_plugin.inventory.state import FRESHNESS_INTERVALS
from npu_plugin.observability.healthcheck import HealthService, unmet

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DP, DRA = "device-plugin", "dra"
UP, DOWN = True, False


@pytest.mark.parametrize(
    ("registered", "age", "interval", "reasons"),
    [
        ({DP: UP}, 0.0, 5.0, []),
        ({DP: DOWN}, 0.0, 5.0, ["device-plugin not registered with the kubelet"]),
        ({DRA: UP}, 14.9, 5.0, []),
        ({DRA: UP}, 15.0, 5.0, []),  # exactly three intervals is still fresh
        ({DRA: UP}, 15.1, 5.0, ["no health sample for 15.1s"]),
        ({DRA: UP}, 0.31, 0.1, ["no health sample for 0.3s"]),
        ({DRA: UP}, -1.0, 5.0, []),  # a sample stamped after `now` was read is fresh
        ({DP: UP, DRA: UP}, 1.0, 5.0, []),
        ({DP: UP, DRA: DOWN}, 1.0, 5.0, ["dra not registered with the kubelet"]),
        ({DP: DOWN, DRA: UP}, 1.0, 5.0, ["device-plugin not registered with the kubelet"]),
        (
            {DP: DOWN, DRA: DOWN},
            60.0,
            5.0,
            [
                "device-plugin not registered with the kubelet",
                "dra not registered with the kubelet",
                "no health sample for 60.0s",
            ],
        ),
        ({DP: UP}, 80.0, 30.0, []),  # a long --health-interval tolerates a long gap
    ],
)
def test_verdict(registered: dict[str, bool], age: float, interval: float, reasons: list[str]) -> None:
    now = 1000.0
    assert unmet(registered, now - age, now, interval) == reasons


def test_freshness_is_three_intervals() -> None:
    assert FRESHNESS_INTERVALS == 3


# --- the service over gRPC ---

INTERVAL = 0.2  # the verdict is re-evaluated every 0.1 s


class Clock:
    """The inventory's last sample time as the service reads it: an hour ahead (fresh however slow
    the machine) or an hour behind (stale), so no assertion depends on how fast anything runs."""

    def __init__(self) -> None:
        self.stale = False

    def __call__(self) -> float:
        return time.monotonic() + (-3600 if self.stale else 3600)


@contextlib.asynccontextmanager
async def running(apis: list[str], clock: Clock) -> AsyncIterator[tuple[HealthService, asyncio.Event]]:
    service = HealthService(apis, clock, INTERVAL)
    await service.start("127.0.0.1", 0)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        yield service, stop
    finally:
        stop.set()
        await task


async def statuses_until(
    stream: grpc.aio.UnaryStreamCall[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse],
    seen: list[int],
    wanted: int,
) -> None:
    async for response in stream:
        seen.append(response.status)
        if response.status == wanted:
            return


def test_not_serving_before_the_first_registration_then_serving() -> None:
    async def scenario() -> None:
        clock = Clock()
        service = HealthService([DP], clock, INTERVAL)
        await service.start("127.0.0.1", 0)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            # Not yet running: the library's initial SERVING must never be visible.
            assert (await stub.Check(health_pb2.HealthCheckRequest())).status == NOT_SERVING
            stop = asyncio.Event()
            task = asyncio.create_task(service.run(stop))
            service.set_registered(DP, True)
            seen: list[int] = []
            await asyncio.wait_for(statuses_until(stub.Watch(health_pb2.HealthCheckRequest()), seen, SERVING), 10)
            assert seen[-1] == SERVING
            stop.set()
            await task

    asyncio.run(scenario())


def test_watch_follows_registration_and_staleness_and_shutdown() -> None:
    async def scenario() -> None:
        clock = Clock()
        async with (
            running([DP, DRA], clock) as (service, stop),
            grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel,
        ):
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest())
            seen: list[int] = []

            async def expect(status: int) -> None:
                await asyncio.wait_for(statuses_until(watch, seen, status), 10)
                assert (await stub.Check(health_pb2.HealthCheckRequest())).status == status

            await expect(NOT_SERVING)
            service.set_registered(DP, True)
            await asyncio.sleep(3 * INTERVAL)
            assert (await stub.Check(health_pb2.HealthCheckRequest())).status == NOT_SERVING, "dra not registered"
            service.set_registered(DRA, True)
            await expect(SERVING)
            clock.stale = True
            await expect(NOT_SERVING)
            clock.stale = False
            await expect(SERVING)
            service.set_registered(DRA, False)
            await expect(NOT_SERVING)
            service.set_registered(DRA, True)
            await expect(SERVING)
            stop.set()
            # Shutting down: watchers hear NOT_SERVING before the server goes.
            await asyncio.wait_for(statuses_until(watch, seen, NOT_SERVING), 10)
            assert seen == [NOT_SERVING, SERVING, NOT_SERVING, SERVING, NOT_SERVING, SERVING, NOT_SERVING]
            watch.cancel()

    asyncio.run(scenario())


def test_an_unknown_service_name_is_not_found() -> None:
    async def scenario() -> None:
        async with (
            running([DP], Clock()) as (service, _stop),
            grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel,
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="other"))
            assert raised.value.code() is grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())
