"""The slice informer and the publisher's reconcile against an in-memory KubeApi: requests are
counted."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from npu_plugin.aio.backoff import BackoffPolicy
from npu_plugin.dra.publisher import SlicePublisher
from npu_plugin.errors import KubeApiError
from npu_plugin.inventory.state import Inventory, Owner
from npu_plugin.kubeapi.informer import WATCH_BACKOFF, Informer
from npu_plugin.kubeapi.protocol import SliceEvent, StoredSlice
from tests.support.fake_devices import profile_devices
from tests.support.kube_fake import InMemoryKube

NODE, DRIVER = "node-a", "npu.huawei.com"


def slice_informer(api: InMemoryKube, **options: Any) -> Informer[StoredSlice]:
    """The publisher's informer of this node's slices, with the test's pacing."""
    return Informer(
        "ResourceSlices",
        lambda: api.list_slices(NODE, DRIVER),
        lambda version, timeout: api.watch_slices(NODE, DRIVER, version, timeout),
        **options,
    )


QUICK = BackoffPolicy(initial=0.001, maximum=0.002)
WRITES = ("create_slice", "replace_slice", "delete_slice")


@dataclass
class Running:
    api: InMemoryKube
    informer: Informer[StoredSlice]
    changes: threading.Semaphore
    publisher: SlicePublisher

    def caught_up(self) -> bool:
        """Wait until the informer has seen everything the server committed."""
        return _wait(lambda: self.informer.resource_version == str(self.api.slices_version()))

    def writes(self) -> int:
        return sum(self.api.calls[call] for call in WRITES)


def _wait(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll a condition; the timeout only bounds a failing test."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    return predicate()


@pytest.fixture
def running() -> Iterator[Running]:
    api = InMemoryKube()
    api.add_node(NODE)
    inventory = Inventory(profile_devices("atlas-800t-a2"), failure_threshold=1, recovery_threshold=1, owners=Owner.DRA)
    changes = threading.Semaphore(0)
    publisher = SlicePublisher(api, inventory, driver=DRIVER, node_name=NODE, unhealthy_policy="remove")
    informer = slice_informer(api, on_change=changes.release, policy=QUICK)
    publisher.informer = informer
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), name="test-informer")
    thread.start()
    try:
        assert informer.synced.wait(10)
        yield Running(api, informer, changes, publisher)
    finally:
        stop.set()
        api.close()
        thread.join(10)


def test_one_list_then_watches_resumed_from_the_last_resource_version(running: Running) -> None:
    for watches in range(2, 5):
        assert running.api.wait_for_watchers(watches - 1)
        running.api.end_watches()
        assert running.api.wait_for_watchers(watches)
    assert running.api.calls["list_slices"] == 1


def test_the_first_reconcile_writes_and_an_unchanged_resync_sends_nothing(running: Running) -> None:
    assert running.publisher.reconcile() is True
    assert running.writes() == 1
    assert running.caught_up()
    calls = sum(running.api.calls.values())
    for _ in range(5):  # what every periodic resync does
        assert running.publisher.reconcile() is False
    assert sum(running.api.calls.values()) == calls


def test_our_own_write_coming_back_through_the_watch_is_not_a_change(running: Running) -> None:
    running.publisher.reconcile()
    assert running.caught_up()
    while running.changes.acquire(blocking=False):
        pass  # the LIST's notification
    assert running.publisher.reconcile() is False
    assert not running.changes.acquire(blocking=False)


def test_a_slice_deleted_by_someone_else_is_republished(running: Running) -> None:
    running.publisher.reconcile()
    assert running.caught_up()
    (only,) = running.api.slices()
    running.api.remove_slice(only["metadata"]["name"])
    assert running.changes.acquire(timeout=10)
    assert running.caught_up()
    assert running.informer.snapshot() == []
    assert running.publisher.reconcile() is True
    assert running.api.calls["create_slice"] == 2
    assert len(running.api.slices()) == 1


def test_a_delete_crossing_our_create_is_not_undone_by_the_create_s_late_answer(running: Running) -> None:
    """The kubelet wipes the node's slices at its start: the watch may deliver our create and that
    delete before the create's answer comes back, and recording the answer then must not bring the
    deleted slice back into the cache (nothing would ever publish it again)."""
    answer = running.api.create_slice(
        {"metadata": {"generateName": f"{NODE}-"}, "spec": {"nodeName": NODE, "driver": DRIVER}}
    )
    running.api.remove_slice(answer["metadata"]["name"])
    assert running.caught_up()
    running.informer.record(answer, answer["metadata"]["name"])
    assert running.informer.snapshot() == []
    assert running.publisher.reconcile() is True
    assert len(running.api.slices()) == 1


def test_an_expired_resource_version_relists_once(running: Running) -> None:
    running.publisher.reconcile()
    assert running.caught_up()
    running.api.compact()
    assert _wait(lambda: running.api.calls["list_slices"] == 2)
    assert running.api.wait_for_watchers(3)
    assert running.api.calls["list_slices"] == 2
    assert running.publisher.reconcile() is False


@pytest.mark.parametrize(
    "fault",
    [
        KubeApiError("watch resourceslices", 200, "malformed response: not JSON: '<html>'"),
        KubeApiError("watch resourceslices", 410, "too old resource version"),
        RuntimeError("a bug in the watch"),
    ],
    ids=["garbage", "gone", "unexpected"],
)
def test_an_untrustworthy_stream_is_logged_once_and_relisted(
    running: Running, fault: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    assert running.api.wait_for_watchers(1)
    running.api.fail_next("watch_slices", fault)
    with caplog.at_level(logging.WARNING, logger="npu_plugin.kubeapi.informer"):
        running.api.end_watches()
        assert _wait(lambda: running.api.calls["list_slices"] == 2)
        assert running.api.wait_for_watchers(3)
    assert running.api.calls["list_slices"] == 2
    assert len([r for r in caplog.records if r.name == "npu_plugin.kubeapi.informer"]) == 1


def test_a_broken_connection_resumes_the_watch_without_a_list(running: Running) -> None:
    assert running.api.wait_for_watchers(1)
    running.api.fail_next("watch_slices", KubeApiError("watch resourceslices", 0, "connection reset"))
    running.api.end_watches()
    assert running.api.wait_for_watchers(3)
    assert running.api.calls["list_slices"] == 1


def test_a_resource_version_going_backwards_relists(running: Running) -> None:
    running.publisher.reconcile()
    assert running.caught_up()
    running.api.inject_event(SliceEvent("BOOKMARK", "1", None))
    assert _wait(lambda: running.api.calls["list_slices"] == 2)
    assert running.caught_up()


# ---- the pauses after consecutive failures, chosen with injected jitter draws and recorded, not
# slept


class RecordedPauses(threading.Event):
    """The informer's stop event, on which it also pauses: each pause is recorded and returns at
    once."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None:
            return super().wait()
        self.pauses.append(timeout)
        return self.is_set()


@contextlib.contextmanager
def paused_informer(
    api: InMemoryKube, draw: Callable[[], float], clock: Callable[[], float] = time.monotonic
) -> Iterator[tuple[Informer[StoredSlice], RecordedPauses]]:
    """An informer with the daemon's watch back-off, whose jitter comes from `draw`."""
    informer = slice_informer(api, on_change=lambda: None, draw=draw, clock=clock)
    stop = RecordedPauses()
    thread = threading.Thread(target=informer.run, args=(stop,), name="test-informer")
    thread.start()
    try:
        yield informer, stop
    finally:
        stop.set()
        api.close()
        thread.join(10)


def with_a_slice() -> tuple[InMemoryKube, str]:
    api = InMemoryKube()
    stored = api.create_slice({"metadata": {"generateName": f"{NODE}-"}, "spec": {"nodeName": NODE, "driver": DRIVER}})
    return api, stored["metadata"]["name"]


WATCH = "watch resourceslices"
# One of each way a watch breaks, in a row, as kube.KubeClient reports them; True where it relists.
BROKEN_WATCHES: list[tuple[KubeApiError | SliceEvent, bool]] = [
    (KubeApiError(WATCH, 200, "malformed response: not JSON: '<html><body>502 Bad Gateway'"), True),
    (KubeApiError(WATCH, 410, "too old resource version: 1 (2)"), True),  # an ERROR event, or a 410 answer
    (KubeApiError(WATCH, 0, "the connection ended in the middle of an event"), False),
    (SliceEvent("BOOKMARK", "1", None), True),  # the resourceVersion goes backwards
    (KubeApiError(WATCH, 503, "the server is currently unable to handle the request"), False),
]
DRAWS = [0.0, 1.0, 0.5, 0.25, 0.75]
# WATCH_BACKOFF's steps double from 0.5 s; each pause is drawn from the upper half of its step.
PAUSES = [0.25, 1.0, 1.5, 2.5, 7.0]


def test_watches_breaking_one_after_another_pause_longer_each_time_logged_once_then_converge(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, name = with_a_slice()
    api.fail_next("watch_slices", *(fault for fault, _ in BROKEN_WATCHES))
    with (
        caplog.at_level(logging.INFO, logger="npu_plugin.kubeapi.informer"),
        paused_informer(api, itertools.chain(DRAWS, itertools.repeat(0.5)).__next__) as (informer, stop),
    ):
        assert api.wait_for_watchers(len(BROKEN_WATCHES) + 1)
        assert stop.pauses == PAUSES
        assert [step * (0.5 + 0.5 * d) for step, d in zip([0.5, 1, 2, 4, 8], DRAWS, strict=True)] == PAUSES
        assert WATCH_BACKOFF.initial == 0.5
        assert api.calls["list_slices"] == 1 + sum(relists for _, relists in BROKEN_WATCHES)
        records = [r for r in caplog.records if r.name == "npu_plugin.kubeapi.informer"]
        assert len(records) == len(BROKEN_WATCHES)
        assert [f"in {pause:.1f}s" in r.getMessage() for r, pause in zip(records, PAUSES, strict=True)] == [True] * 5
        # Converged: the cache is the server's, from where the server is.
        assert _wait(lambda: informer.resource_version == str(api.slices_version()))
        assert [s["metadata"]["name"] for s in informer.snapshot()] == [name]
        assert informer.failures == len(BROKEN_WATCHES)
        # A watch that delivers and ends normally starts the steps again.
        api.remove_slice(name)
        assert _wait(lambda: informer.snapshot() == [])
        api.fail_next("watch_slices", BROKEN_WATCHES[0][0])
        api.end_watches()
        assert api.wait_for_watchers(len(BROKEN_WATCHES) + 3)
        assert stop.pauses == [*PAUSES, 0.375]


def test_a_server_breaking_every_watch_is_never_a_tight_loop() -> None:
    """The least the daemon ever waits (every draw 0): doubling pauses from 0.25 s up to half the 30
    s cap, so twelve broken watches cost 12 LISTs and 13 WATCHes over at least 105 s."""
    api, _ = with_a_slice()
    api.fail_next("watch_slices", *[BROKEN_WATCHES[0][0]] * 12)
    with paused_informer(api, lambda: 0.0) as (_, stop):
        assert api.wait_for_watchers(13)
        assert stop.pauses == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0, 15.0, 15.0, 15.0]
        assert sum(stop.pauses) >= 105
        assert api.calls["list_slices"] == 13


def test_watches_ending_at_once_pause_longer_each_time() -> None:
    """A server that closes every watch at once (nothing delivered, no time passed on the clock)
    backs off as for any failure (every draw 1: the most the daemon waits)."""
    api, _ = with_a_slice()
    api.end_watches_at_once(7)
    with paused_informer(api, lambda: 1.0, clock=lambda: 0.0) as (_, stop):
        assert api.wait_for_watchers(8)
        assert stop.pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
        assert api.calls["list_slices"] == 1, "a watch ending at once resumes, without a LIST"


def test_a_429_or_503_pauses_at_least_the_servers_retry_after_then_resumes_without_a_list() -> None:
    """The server's Retry-After outweighs a shorter back-off step, on the LIST and on the watch
    alike; a throttled watch resumes from where it was."""
    api, name = with_a_slice()
    api.fail_next("list_slices", KubeApiError("list resourceslices", 429, "Too many requests", retry_after=7.0))
    api.fail_next(
        "watch_slices",
        KubeApiError(WATCH, 503, "the server is currently unable to handle the request", retry_after=3.0),
        KubeApiError(WATCH, 429, "Too many requests", retry_after=2.0),
    )
    with paused_informer(api, lambda: 0.0) as (informer, stop):
        assert api.wait_for_watchers(3)
        assert stop.pauses == [7.0, 3.0, 2.0]  # the steps alone would be 0.25, 0.5 and 1.0
        assert api.calls["list_slices"] == 2, "one LIST refused, one answered; the watches resumed"
        assert [s["metadata"]["name"] for s in informer.snapshot()] == [name]


def test_a_watch_cut_short_or_failing_is_an_interruption_and_one_ending_on_time_is_not() -> None:
    """What an API server restart does to the watch, which tells the publisher to read the version
    again."""
    api, now = InMemoryKube(), [0.0]
    informer = slice_informer(api, on_change=lambda: None, policy=QUICK, clock=lambda: now[0])
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), name="test-informer")
    thread.start()
    try:
        assert api.wait_for_watchers(1)
        now[0] += 600.0  # as long as any watch asks: the server ended it on time
        api.end_watches()
        assert api.wait_for_watchers(2)
        assert informer.interruptions == 0
        now[0] += 100.0  # well before the shortest timeout asked (300 s): cut short
        api.end_watches()
        assert api.wait_for_watchers(3)
        assert informer.interruptions == 1
        api.fail_next("watch_slices", KubeApiError("watch resourceslices", 0, "connection reset"))
        api.end_watches()
        assert _wait(lambda: informer.interruptions == 3)  # a watch ending at once, then the one that failed
    finally:
        stop.set()
        api.close()
        thread.join(10)
