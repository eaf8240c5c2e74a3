"""How long a Prepare may wait on the driver: until shortly before the kubelet gives up on the call.

The kubelet gives NodePrepareResources a gRPC deadline (45 s today). A driver call still running at
the deadline would turn the whole batch into DeadlineExceeded; answering a little before it gives
the claim a clear error of its own instead, and the rest of the batch its answers.
"""

from __future__ import annotations

# A call without a deadline (a client of our own) still gets its answer in bounded time.
DEFAULT_SECONDS = 30.0
# Left before the deadline to record the outcome, release the state lock and send the answer.
MARGIN_SECONDS = 2.0
# A driver call started late in a batch still gets this long: no create is started only to be given
# up at once.
MIN_WAIT_SECONDS = 1.0


def answer_by(time_remaining: float | None, now: float) -> float:
    """The monotonic time by which a Prepare that started `now` answers, given the gRPC call's time
    remaining (None: no deadline)."""
    if time_remaining is None:
        return now + DEFAULT_SECONDS
    return now + max(time_remaining - MARGIN_SECONDS, 0.0)


def wait_left(deadline: float, now: float) -> float:
    """How long a driver call started `now` may take before its claim is answered without it."""
    return max(deadline - now, MIN_WAIT_SECONDS)
