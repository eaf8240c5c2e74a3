"""The slice informer and the publisher's reconcile against an in-memory KubeApi: requests are counted."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from npu_plugin.backoff import BackoffPolicy
from npu_plugin.dra.informer import SliceInformer
from npu_plugin.dra.publisher import SlicePublisher
from npu_plugin.errors import KubeApiError
from npu_plugin.inventory import Inventory, Owner
from npu_plugin.kubeapi import SliceEvent
from npu_plugin.profiles import profile_devices
from tests.support.kube_fake import InMemoryKube

NODE, DRIVER = "node-a", "npu.huawei.com"
QUICK = BackoffPolicy(initial=0.001, maximum=0.002)
WRITES = ("create_slice", "replace_slice", "delete_slice")


@dataclass
class Running:
    api: InMemoryKube
    informer: SliceInformer
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
    informer = SliceInformer(api, node=NODE, driver=DRIVER, on_change=changes.release, policy=QUICK)
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
    with caplog.at_level(logging.WARNING, logger="npu_plugin.dra.informer"):
        running.api.end_watches()
        assert _wait(lambda: running.api.calls["list_slices"] == 2)
        assert running.api.wait_for_watchers(3)
    assert running.api.calls["list_slices"] == 2
    assert len([r for r in caplog.records if r.name == "npu_plugin.dra.informer"]) == 1


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


def test_a_watch_that_ends_at_once_backs_off(running: Running) -> None:
    assert running.api.wait_for_watchers(1)
    running.api.end_watches_at_once(True)
    running.api.end_watches()
    assert _wait(lambda: running.informer.failures >= 3)
    running.api.end_watches_at_once(False)
