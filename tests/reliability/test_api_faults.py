"""API faults while the daemon publishes AND prepares at once: refused connections, 503s, 500s, a
409 storm, a 2 s slow server. Prepare fails per claim (the kubelet retries) or succeeds; nothing
half-done stays behind; publishing retries with back-off; everything converges when the API
recovers.

Then bodies that are not what was asked for (non-JSON answers to the Node GET, the slice LIST and a
claim GET), broken watch streams (garbage, an ERROR event, a cut mid-event, a resourceVersion going
backwards), 429 with Retry-After, and an idle daemon's requests, all counted from the fake API's
log.

test_dra_api_faults covers publishing alone (500s at start, a conflict storm, outages, 0.3 s
latency)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from npu_plugin.kubeapi.informer import WATCH_BACKOFF
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from tests.support.daemon import DaemonProcess, Launcher, wait_until, write_inventory
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    allocate,
    async_wait_until,
    checked_state,
    dra_args,
    pool_settled,
    published_names,
    run_with_kubelet,
    with_health,
)
from tests.support.fake_devices import profile_devices
from tests.support.fakeapi import FakeKubeAPI, RecordedRequest

pytest_plugins = ["tests.support.dra_fixtures"]
A2 = profile_devices("atlas-800t-a2")
EVERYTHING = [f"npu-{i}" for i in range(8)]
WITHOUT_3 = [n for n in EVERYTHING if n != "npu-3"]
CONVERGE = 25.0  # the publisher's back-off reaches 10 s between attempts


@dataclass(frozen=True)
class Fault:
    start: Callable[[FakeKubeAPI], None]
    stop: Callable[[FakeKubeAPI], None]
    prepare_fails_with: str | None  # what a Prepare needing the API reads while the fault lasts
    publishing_reads: str  # the daemon's log line that shows publishing met the fault


def fail_bursts(api: FakeKubeAPI) -> None:
    api.fail_next(3, 500, path_contains="/resourceclaims/")
    api.fail_next(3, 500, path_contains="/resourceslices")


RETRIED = "publishing ResourceSlices failed (attempt 2)"
FAULTS = {
    "refused": Fault(lambda api: api.set_down(True), lambda api: api.set_down(False), "Connection refused", RETRIED),
    "503": Fault(
        lambda api: api.set_down(True, refuse=False), lambda api: api.set_down(False, refuse=False), "HTTP 503", RETRIED
    ),
    "500s": Fault(fail_bursts, lambda api: None, "HTTP 500", RETRIED),
    "409-storm": Fault(lambda api: api.force_conflicts(12), lambda api: None, None, "ResourceSlice update conflicted"),
}


def converged(api: FakeKubeAPI, names: list[str]) -> Callable[[], bool]:
    return lambda: bool(pool_settled(api)) and published_names(api) == names


async def started(kubelet: DraKubeletSimulator, api: FakeKubeAPI) -> tuple[Claim, Claim]:
    """A claim prepared before the fault, and one allocated (not yet prepared) before it."""
    await kubelet.wait_for_plugin(DRIVER)
    await async_wait_until(converged(api, EVERYTHING), CONVERGE, "the first slices")
    held, fresh = await allocate(api, "held"), await allocate(api, "fresh")
    assert (await kubelet.prepare([held]))[held.uid].error == ""
    return held, fresh


async def retry_until_prepared(kubelet: DraKubeletSimulator, claim: Claim) -> list[str]:
    """Prepare as the kubelet retries it; the errors read on the way."""
    errors = []
    for _ in range(50):
        answer = (await kubelet.prepare([claim]))[claim.uid]
        if not answer.error:
            return errors
        errors.append(answer.error)
        await asyncio.sleep(0.1)
    raise AssertionError(f"Prepare never succeeded: {errors[-3:]}")


def alive(daemon: DaemonProcess) -> None:
    assert daemon.process.poll() is None, f"the daemon exited:\n{daemon.log()}"


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_faults_during_publishing_and_prepare(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, fault: Fault
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        held, fresh = await started(kubelet, fake_api)
        fault.start(fake_api)
        write_inventory(workspace.inventory, with_health(A2, {3}))  # publishing starts under the fault
        # A claim prepared before needs no API: answered from the checkpoint.
        assert (await kubelet.prepare([held]))[held.uid].error == ""
        if fault.prepare_fails_with is not None:
            error = (await kubelet.prepare([fresh]))[fresh.uid].error
            assert error.startswith("claim default/fresh: get resourceclaim default/fresh: "), error
            assert fault.prepare_fails_with in error, error
            assert set(checked_state(workspace).claims) == {held.uid}, "a failed Prepare leaves nothing behind"
            assert not workspace.cdi_file(fresh.uid).exists()
        await asyncio.to_thread(daemon.wait_for_log, fault.publishing_reads)
        alive(daemon)
        fault.stop(fake_api)
        for error in await retry_until_prepared(kubelet, fresh):  # the rest of a burst of 500s
            assert fault.prepare_fails_with is not None and fault.prepare_fails_with in error, error
        await async_wait_until(converged(fake_api, WITHOUT_3), CONVERGE, "slices without npu-3")
        assert set(checked_state(workspace).claims) == {held.uid, fresh.uid}

    run_with_kubelet(workspace, fake_api, scenario)
    alive(daemon)


@pytest.mark.slow
def test_a_2s_slow_api_delays_but_never_fails_publishing_or_prepare(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        held, fresh = await started(kubelet, fake_api)
        fake_api.set_latency(2.0)
        write_inventory(workspace.inventory, with_health(A2, {3}))
        waiting = asyncio.ensure_future(kubelet.prepare([fresh]))
        # The slow GET of the fresh claim happens outside the state lock: a prepared claim is not
        # held up.
        assert (await kubelet.prepare([held]))[held.uid].error == ""
        assert not waiting.done()
        assert (await waiting)[fresh.uid].error == ""
        await async_wait_until(converged(fake_api, WITHOUT_3), CONVERGE, "slices without npu-3 from a slow API")
        assert "failed" not in daemon.log()

    run_with_kubelet(workspace, fake_api, scenario)
    alive(daemon)


# ---- bodies that are not what was asked for, broken watches, an idle daemon's requests

LIST = "list /apis/resource.k8s.io/v1/resourceslices"
WATCH = "watch /apis/resource.k8s.io/v1/resourceslices"
SLICE_WRITES = ("create", "update", "delete")


def slice_writes(api: FakeKubeAPI) -> int:
    return sum(r.verb in SLICE_WRITES and "/resourceslices" in r.path for r in api.requests)


def wait_for_published(api: FakeKubeAPI, names: list[str]) -> None:
    wait_until(converged(api, names), CONVERGE, f"slices with {names}")


@pytest.mark.parametrize("what", ["GET /api/v1/nodes/", "GET /apis/resource.k8s.io/v1/resourceslices"])
def test_a_non_json_answer_at_start_is_logged_retried_and_slices_are_published(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, what: str
) -> None:
    fake_api.answer_next(2, what)
    daemon = launch_daemon(*dra_args(workspace))
    wait_for_published(fake_api, EVERYTHING)
    alive(daemon)
    malformed = "HTTP 200: malformed response: not JSON: '<html><body>502 Bad Gateway</body></html>'"
    assert len([line for line in daemon.log().splitlines() if malformed in line]) == 2
    assert "Traceback" not in daemon.log()


def test_a_non_json_claim_fails_that_claim_only(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    daemon = launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        await async_wait_until(converged(fake_api, EVERYTHING), CONVERGE, "the first slices")
        good, bad = await allocate(fake_api, "good"), await allocate(fake_api, "bad")
        fake_api.answer_next(1, "GET /apis/resource.k8s.io/v1/namespaces/default/resourceclaims/bad")
        answers = await kubelet.prepare([good, bad])
        assert answers[good.uid].error == ""
        assert answers[bad.uid].error.startswith(
            "claim default/bad: get resourceclaim default/bad: HTTP 200: malformed response: not JSON"
        ), answers[bad.uid].error
        assert set(checked_state(workspace).claims) == {good.uid}
        assert (await kubelet.prepare([bad]))[bad.uid].error == ""  # the kubelet's retry

    run_with_kubelet(workspace, fake_api, scenario)
    alive(daemon)
    assert "Traceback" not in daemon.log()


def started_idle(fake_api: FakeKubeAPI, launch_daemon: Launcher, workspace: Workspace) -> DaemonProcess:
    """A daemon whose slices are published and whose watch is open, with the request log cleared."""
    daemon = launch_daemon(*dra_args(workspace))
    wait_for_published(fake_api, EVERYTHING)
    wait_until(lambda: fake_api.request_counts().get(WATCH, 0) >= 1, CONVERGE, "the first watch")
    return daemon


def test_an_idle_daemon_only_resumes_its_watch(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """Hours of watch cycles compressed: each watch ends after 0.2 s instead of 5 to 10 minutes."""
    daemon = started_idle(fake_api, launch_daemon, workspace)
    assert fake_api.request_counts()[LIST] == 1
    writes = slice_writes(fake_api)
    fake_api.limit_watches(0.2)
    wait_until(lambda: fake_api.request_counts()[WATCH] >= 10, CONVERGE, "ten watch cycles")
    counts = fake_api.request_counts()
    assert counts[LIST] == 1, counts
    assert slice_writes(fake_api) == writes
    watches = [r for r in fake_api.requests if r.verb == "watch"]
    assert all(r.query["allowWatchBookmarks"] == "true" for r in watches)
    assert all(300 <= int(r.query["timeoutSeconds"]) <= 600 for r in watches)
    resumed = [int(r.query["resourceVersion"]) for r in watches]
    assert resumed == sorted(resumed) and resumed[0] > 0
    alive(daemon)


@pytest.mark.parametrize("fault", ["garbage", "error-event", "reset-mid-event", "version-backwards"])
def test_a_broken_watch_is_logged_once_relisted_and_converges(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, fault: str
) -> None:
    daemon = started_idle(fake_api, launch_daemon, workspace)
    fake_api.break_next_watch(fault)
    fake_api.limit_watches(0.2)  # the open watch ends; the next one breaks
    relists = 1 if fault == "reset-mid-event" else 2  # a cut connection resumes from where it was
    wait_until(lambda: fake_api.request_counts()[WATCH] >= 6, CONVERGE, "watching again")
    counts = fake_api.request_counts()
    assert counts[LIST] == relists, counts
    write_inventory(workspace.inventory, with_health(A2, {3}))
    wait_for_published(fake_api, WITHOUT_3)
    warnings = [line for line in daemon.log().splitlines() if " WARNING " in line and "ResourceSlice" in line]
    assert len(warnings) == 1, warnings
    assert "Traceback" not in daemon.log()
    alive(daemon)


def test_429_with_retry_after_is_honoured(workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher) -> None:
    throttled = b'{"kind": "Status", "code": 429, "message": "Too many requests, please try again later."}'
    fake_api.answer_next(1, "GET /api/v1/nodes/", status=429, body=throttled, headers={"Retry-After": "2"})
    fake_api.answer_next(1, "GET /apis/resource.k8s.io/v1/resourceslices", status=503, body=b"", headers={})
    daemon = launch_daemon(*dra_args(workspace))
    wait_for_published(fake_api, EVERYTHING)
    log = daemon.log()
    assert "reading Node node-a failed (attempt 1), retrying in 2.0s: get node node-a: HTTP 429: Too many" in log
    assert "list resourceslices: HTTP 503" in log
    alive(daemon)


def watch_open_for(api: FakeKubeAPI, seconds: float) -> Callable[[], bool]:
    """The latest watch is still open and has been for `seconds` (so its end is not a watch ending
    at once)."""

    def check() -> bool:
        watches = [r for r in api.requests if r.verb == "watch"]
        return bool(watches) and watches[-1].ended is None and time.monotonic() - watches[-1].started > seconds

    return check


def informer_requests(api: FakeKubeAPI) -> list[RecordedRequest]:
    return sorted((r for r in api.requests if r.verb in ("list", "watch")), key=lambda r: r.started)


def pauses_after(failed: list[RecordedRequest], requests: list[RecordedRequest]) -> list[float]:
    """For each failed watch, the time from its end to the informer's next request."""
    pauses = []
    for watch in failed:
        assert watch.ended is not None
        following = next(r for r in requests if r.started >= watch.ended)
        pauses.append(following.started - watch.ended)
    return pauses


GONE = json.dumps({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
BURST = ["garbage", "error-event", "reset-mid-event", "version-backwards"]  # after a 410 at the watch's start
ROUNDING = 0.05  # the log shows pauses to a tenth of a second


def test_watches_breaking_one_after_another_back_off_with_growing_pauses_then_converge(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """Five watches in a row fail, one of each kind (a 410, garbage, an ERROR event, a cut
    mid-event, a resourceVersion going backwards): each failure is logged once with the pause the
    daemon chose, each pause falls in the next doubled step of the watch back-off and the daemon
    really waits it (from the fake API's request times), so the burst costs 5 watches and 4 LISTs (a
    cut resumes without one), not a tight loop; then one watch stays open and the slices converge
    without another LIST or WATCH."""
    daemon = started_idle(fake_api, launch_daemon, workspace)
    wait_until(watch_open_for(fake_api, 1.5), CONVERGE, "a watch open for over a second")
    fake_api.answer_next(1, "WATCH ", status=410, body=GONE.encode(), headers={"Content-Type": "application/json"})
    for fault in BURST:
        fake_api.break_next_watch(fault)
    fake_api.clear_requests()
    fake_api.end_watches()
    wait_until(lambda: fake_api.request_counts().get(WATCH, 0) == 6, 60, "the sixth watch after the burst")
    assert fake_api.request_counts() == {LIST: 4, WATCH: 6}

    warnings = [line for line in daemon.log().splitlines() if " WARNING " in line and "ResourceSlice" in line]
    chosen = [float(re.findall(r" in (\d+\.\d)s", line)[0]) for line in warnings]
    assert len(chosen) == 5, warnings
    for failures, pause in enumerate(chosen, start=1):
        step = min(WATCH_BACKOFF.maximum, WATCH_BACKOFF.initial * 2 ** (failures - 1))
        assert step / 2 - ROUNDING <= pause <= step + ROUNDING, (failures, pause, warnings)
    requests = informer_requests(fake_api)
    failed = [r for r in requests if r.verb == "watch"][:5]
    assert [r.end for r in failed] == ["", *BURST], "the 410 is an answer, the rest broken streams"
    for waited, pause in zip(pauses_after(failed, requests), chosen, strict=True):
        assert waited >= pause - ROUNDING, (waited, pause)

    write_inventory(workspace.inventory, with_health(A2, {3}))
    wait_for_published(fake_api, WITHOUT_3)
    assert fake_api.request_counts()[LIST] == 4 and fake_api.request_counts()[WATCH] == 6
    assert "Traceback" not in daemon.log()
    alive(daemon)


SLICE_LIST = "GET /apis/resource.k8s.io/v1/resourceslices"
LIST_HELD_S = 1.0  # well under the daemon's 10 s request timeout: the LIST is slow, not abandoned


def expire(api: FakeKubeAPI) -> None:
    """A change the daemon's watch does not show (a new Node), then compaction: its watch gets
    410."""
    api.add_node(f"other-{api.resource_version}")
    api.compact_history()
    api.end_watches()


def relist(api: FakeKubeAPI) -> None:
    """Expire the daemon's resourceVersion and wait for its LIST."""
    lists = api.request_counts().get(LIST, 0)
    expire(api)
    wait_until(lambda: api.request_counts().get(LIST, 0) > lists, CONVERGE, "a LIST after the 410")


def test_never_more_than_one_list_in_flight_while_relisting_again_and_again(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """Every slice LIST takes a second to answer while the daemon is driven to relist: 410s on
    resuming, a device changing during the held LIST, an ERROR event, the API server restarting
    while a LIST is held. The fake API's record of when each LIST arrived and was answered shows at
    most one of this node's LISTs in flight at any moment."""
    fake_api.hold(SLICE_LIST, LIST_HELD_S)
    daemon = started_idle(fake_api, launch_daemon, workspace)
    # Each round starts once the watch has been open a while, so that the back-off starts again from
    # its first step (a watch ended at once counts as a failure) and the rounds stay short.
    settled = watch_open_for(fake_api, 1.5)
    for unhealthy in ({3}, set(), {3}):
        wait_until(settled, CONVERGE, "a settled watch")
        relist(fake_api)
        write_inventory(workspace.inventory, with_health(A2, unhealthy))  # a write while a LIST may be held
    wait_until(settled, CONVERGE, "a settled watch")
    fake_api.break_next_watch("error-event")
    relist(fake_api)
    wait_until(settled, CONVERGE, "a settled watch")
    lists, relisting = fake_api.request_counts()[LIST], daemon.log().count("relisting in")
    expire(fake_api)
    wait_until(lambda: daemon.log().count("relisting in") > relisting, CONVERGE, "the daemon relisting")
    time.sleep(WATCH_BACKOFF.initial)  # the longest first pause: the relist is held now, or about to be
    fake_api.set_down(True)
    fake_api.set_down(False)
    wait_until(lambda: fake_api.request_counts()[LIST] > lists + 1, CONVERGE, "LISTs after the restart")
    wait_for_published(fake_api, WITHOUT_3)

    assert fake_api.request_counts()[LIST] >= 7
    assert fake_api.most_in_flight("list", NODE) == 1
    assert "Traceback" not in daemon.log()
    alive(daemon)
