"""The one back-off policy: exponential, capped, jittered, honouring Retry-After; the retry loop on
it; and task supervision."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine

import pytest

from npu_plugin.aio.backoff import RETRY_AFTER_LIMIT, Backoff, BackoffPolicy, retry_forever
from npu_plugin.aio.tasks import supervised

POLICY = BackoffPolicy(initial=1.0, maximum=8.0)


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [(1, 0.5, 1.0), (2, 1.0, 2.0), (3, 2.0, 4.0), (4, 4.0, 8.0), (5, 4.0, 8.0), (60, 4.0, 8.0), (5000, 4.0, 8.0)],
)
def test_each_pause_is_in_the_upper_half_of_its_capped_exponential_step(failures: int, low: float, high: float) -> None:
    assert POLICY.delay(failures, draw=lambda: 0.0) == low
    assert POLICY.delay(failures, draw=lambda: 1.0) == high


def test_jitter_spreads_a_fleet() -> None:
    pauses = {round(POLICY.delay(4), 3) for _ in range(200)}
    assert len(pauses) > 50
    assert all(4.0 <= pause <= 8.0 for pause in pauses)


@pytest.mark.parametrize(
    ("retry_after", "expected"), [(None, 0.5), (0.1, 0.5), (30.0, 30.0), (10_000.0, RETRY_AFTER_LIMIT)]
)
def test_the_servers_retry_after_is_a_floor_within_a_limit(retry_after: float | None, expected: float) -> None:
    assert POLICY.delay(1, retry_after, draw=lambda: 0.0) == expected


def test_a_success_starts_the_steps_again() -> None:
    backoff = Backoff(BackoffPolicy(initial=1.0, maximum=100.0))
    assert [backoff.failed() <= 1.0, backoff.failed() > 1.0, backoff.failures] == [True, True, 2]
    backoff.succeeded()
    assert backoff.failed() <= 1.0


def test_a_supervised_task_that_fails_is_logged_and_run_again(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise RuntimeError(f"failure {len(runs)}")

    log = logging.getLogger("test.supervised")
    with caplog.at_level(logging.ERROR, logger="test.supervised"):
        asyncio.run(supervised(flaky, what="the flaky task", log=log, policy=BackoffPolicy(0.001, 0.002)))
    assert runs == [0, 1, 2]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("the flaky task stopped on an unexpected error, restarting in")
    assert "RuntimeError('failure 1')" in messages[0]
    assert caplog.records[0].exc_info is not None


class BusyError(Exception):
    """A failure worth retrying; `retry_after` as a 429's Retry-After gives it."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("busy")
        self.retry_after = retry_after


def test_retry_forever_retries_the_named_failures_logging_each_and_returns_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise BusyError()
        return "done"

    log = logging.getLogger("test.retry")
    with caplog.at_level(logging.WARNING, logger="test.retry"):
        result = asyncio.run(
            retry_forever(attempt, what="the call", log=log, retry_on=(BusyError,), policy=BackoffPolicy(0.001, 0.002))
        )
    assert (result, calls) == ("done", [0, 1, 2])
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(", retrying in")[0] for m in messages] == [
        "the call failed (attempt 1)",
        "the call failed (attempt 2)",
    ]
    assert all(m.endswith(": busy") for m in messages)
    assert [getattr(r, "error", None) for r in caplog.records] == ["busy", "busy"]


def test_retry_forever_pauses_at_least_the_servers_retry_after(caplog: pytest.LogCaptureFixture) -> None:
    failures = [BusyError(retry_after=0.05)]

    async def attempt() -> None:
        if failures:
            raise failures.pop()

    log = logging.getLogger("test.retry")
    with caplog.at_level(logging.WARNING, logger="test.retry"):
        asyncio.run(
            retry_forever(attempt, what="the call", log=log, retry_on=(BusyError,), policy=BackoffPolicy(0.001, 0.002))
        )
    assert [r.args[2] for r in caplog.records if isinstance(r.args, tuple)] == [0.05]


def test_retry_forever_awaits_what_a_plain_callable_returns() -> None:
    calls: list[int] = []

    async def attempt() -> int:
        calls.append(len(calls))
        if len(calls) < 2:
            raise BusyError()
        return len(calls)

    def start() -> Coroutine[None, None, int]:  # not itself a coroutine function, as the daemon's lambdas
        return attempt()

    log = logging.getLogger("test.retry")
    result = asyncio.run(
        retry_forever(start, what="the call", log=log, retry_on=(BusyError,), policy=BackoffPolicy(0.001, 0.002))
    )
    assert (result, calls) == (2, [0, 1])


def test_retry_forever_lets_any_other_failure_through_at_once() -> None:
    calls: list[int] = []

    async def attempt() -> None:
        calls.append(len(calls))
        raise ValueError("not a retry")

    log = logging.getLogger("test.retry")
    with pytest.raises(ValueError, match="not a retry"):
        asyncio.run(retry_forever(attempt, what="the call", log=log, retry_on=(BusyError,)))
    assert calls == [0]


def test_cancelling_retry_forever_ends_its_pause_at_once() -> None:
    async def scenario() -> list[int]:
        calls: list[int] = []

        async def attempt() -> None:
            calls.append(len(calls))
            raise BusyError(retry_after=3600.0)

        log = logging.getLogger("test.retry")
        task = asyncio.create_task(retry_forever(attempt, what="the call", log=log, retry_on=(BusyError,)))
        while not calls:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return calls

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == [0]


def test_retry_forever_can_log_the_first_failure_and_the_recovery_and_count_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A kubelet that is not there yet: one warning, not one per back-off step; a different failure is news."""
    failures = [BusyError(), BusyError(), BusyError(), ValueError("refused"), ValueError("refused")]

    async def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    log = logging.getLogger("test.retry")
    with caplog.at_level(logging.DEBUG, logger="test.retry"):
        result = asyncio.run(
            retry_forever(
                attempt,
                what="the call",
                log=log,
                retry_on=(BusyError, ValueError),
                policy=BackoffPolicy(0.001, 0.002),
                repeat_level=logging.DEBUG,
            )
        )
    assert result == "done"
    seen = [(r.levelname, r.getMessage().split(", retrying in")[0]) for r in caplog.records]
    assert seen == [
        ("WARNING", "the call failed (attempt 1)"),
        ("DEBUG", "the call failed (attempt 2)"),
        ("DEBUG", "the call failed (attempt 3)"),
        ("WARNING", "the call failed (attempt 4)"),
        ("DEBUG", "the call failed (attempt 5)"),
        ("INFO", "the call succeeded after 5 failed attempts"),
    ]
