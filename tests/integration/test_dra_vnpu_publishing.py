"""vNPU slices a DRA daemon publishes through the fake API server: the layout its version asks for,
the gate probe, the read-back of every write and the fallback without counters, with no write storm
(from the request log)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.vnpu import VnpuChips, VnpuMode
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra import publisher as publisher_module
from npu_plugin.dra.publisher import SlicePublisher
from npu_plugin.errors import VnpuError
from npu_plugin.host.boot import read_boot_id
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from npu_plugin.inventory.vnpu_plans import ChipPlan, served_chips, serving, with_known_templates
from npu_plugin.kubeapi.client import KubeClient, connect
from npu_plugin.kubeapi.protocol import ResourceSlice, StoredSlice
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.integration.test_device_plugin_vnpu import replace_vnpus, state_reads
from tests.support.daemon import DaemonProcess, Launcher, wait_until
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    async_wait_until,
    dra_args,
    node_slices,
    plant_claim,
    published_names,
    result,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
WRITES = ("create", "update", "delete")


def vnpu_args(workspace: Workspace) -> list[str]:
    args = dra_args(workspace, "--vnpu", "dynamic", "--fake-vnpu-state", str(workspace.root / "hw.json"))
    at = args.index("--fake-inventory")
    args[at : at + 2] = ["--fake-profile", "atlas-800t-a2"]
    return args


def slice_writes(api: FakeKubeAPI) -> list[str]:
    """The slice writes that stored something (a dry-run probe stores nothing)."""
    return [
        f"{r.verb} {r.path}"
        for r in api.requests
        if r.verb in WRITES and "resourceslices" in r.path and "dryRun" not in r.query
    ]


def probes(api: FakeKubeAPI) -> int:
    return sum(1 for r in api.requests if r.query.get("dryRun") == "All")


def dynamic_available(daemon: DaemonProcess) -> float | None:
    """`npu_plugin_vnpu_dynamic_available` of a daemon started with `--metrics-port 0`; None before
    it serves."""
    found = re.search(r"metrics listening on (http://127\.0\.0\.1:\d+/metrics)", daemon.log())
    if found is None:
        return None
    with urllib.request.urlopen(found.group(1), timeout=5) as answer:
        text = answer.read().decode()
    sample = re.search(r"^npu_plugin_vnpu_dynamic_available (\S+)$", text, re.M)
    return None if sample is None else float(sample.group(1))


METRICS = ("--metrics-port", "0", "--bind-address", "127.0.0.1")


def layout(api: FakeKubeAPI) -> list[tuple[int, int]]:
    """(counter sets, devices) per stored slice of this node, counter slices first."""
    shape = [(len(s["spec"].get("sharedCounters", [])), len(s["spec"].get("devices", []))) for s in node_slices(api)]
    return sorted(shape, reverse=True)


def test_kubernetes_1_36_gets_the_split_layout_with_the_gate_on_by_default(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:  # A9
    fake_api.set_kubernetes_version(36)
    daemon = launch_daemon(*vnpu_args(workspace), *METRICS)
    wait_until(lambda: layout(fake_api) == [(8, 0), (0, 56)], 10, "a counter slice and a device slice")
    wait_until(lambda: dynamic_available(daemon) == 1, 10, "npu_plugin_vnpu_dynamic_available 1")
    for s in node_slices(fake_api):
        assert "devices" not in s["spec"] or "sharedCounters" not in s["spec"]
        assert s["spec"]["pool"]["resourceSliceCount"] == 2
    assert probes(fake_api) == 1


def test_kubernetes_1_34_with_the_gate_on_gets_one_slice_per_chip(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(34, partitionable_devices=True)
    launch_daemon(*vnpu_args(workspace))
    wait_until(lambda: layout(fake_api) == [(1, 7)] * 8, 10, "eight combined slices")


def test_with_the_gate_off_whole_npus_are_published_once_and_a_warning_names_the_gate(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:  # A8
    fake_api.set_kubernetes_version(35, partitionable_devices=False)
    daemon = launch_daemon(*vnpu_args(workspace), *METRICS, "--log-level", "info")
    wait_until(lambda: layout(fake_api) == [(0, 8)], 5, "eight whole NPUs")
    assert dynamic_available(daemon) == 0
    names = [d["name"] for s in node_slices(fake_api) for d in s["spec"]["devices"]]
    assert names == [f"npu-{i}" for i in range(8)]
    assert all("consumesCounters" not in d for s in node_slices(fake_api) for d in s["spec"]["devices"])
    daemon.wait_for_log("published 1 ResourceSlice(s)")
    writes = slice_writes(fake_api)
    # Each reconcile would rewrite if the stored slices never matched: expire the watch (410), so
    # the informer lists again and the publisher reconciles, then look for writes a while. A minute
    # of every periodic cause: test_with_the_gate_off_what_a_minute_at_rest_brings_rewrites_no_slice.
    lists = requests_of(fake_api, "list", "/apis/resource")
    fake_api.break_next_watch("error-event")
    fake_api.end_watches()  # the open one: the informer resumes, and that watch expires
    wait_for_requests(fake_api, "list", "/apis/resource", lists + 1, 10)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and slice_writes(fake_api) == writes:
        time.sleep(0.05)
    assert slice_writes(fake_api) == writes == ["create /apis/resource.k8s.io/v1/resourceslices"]
    assert probes(fake_api) == 1
    assert daemon.log().count("DRAPartitionableDevices is off") == 1


def requests_of(api: FakeKubeAPI, verb: str, path: str) -> int:
    return sum(1 for r in api.requests if r.verb == verb and r.path.startswith(path))


def wait_for_requests(api: FakeKubeAPI, verb: str, path: str, count: int, timeout: float) -> None:
    what = f"{count} {verb} requests of {path}"
    wait_until(lambda: requests_of(api, verb, path) >= count, timeout, what, interval=0.2)


@pytest.mark.slow
def test_with_the_gate_off_what_a_minute_at_rest_brings_rewrites_no_slice(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:  # A8: no write storm
    """After the first publish, nothing the daemon does periodically rewrites a slice, for at least
    as many rounds of each periodic cause as a minute at the defaults brings:

    - health samples (`--health-interval`, 5 s: 12 a minute): 0.1 s here, dozens while the test runs;
    - watch restarts (a watch asks for 300-600 s, so none in a minute): the fake API ends every watch after
      0.25 s, so the test sees a dozen, and five watches end in 410 Expired, which makes the informer list
      again and the publisher reconcile;
    - resyncs (30 s: 2 a minute, each re-reading the vNPUs and reconciling): no flag sets this period, so the
      daemon runs with it at 1 s (as the in-process tests below set it) and the test sees two;
    - the gate probe (600 s: none in a minute after the one at start): not due; the test checks there was one.
    """
    fake_api.set_kubernetes_version(35, partitionable_devices=False)
    fake_api.limit_watches(0.25)
    daemon = launch_daemon(
        *vnpu_args(workspace), "--log-level", "debug", constants={f"{publisher_module.__name__}.RESYNC_SECONDS": 1.0}
    )
    wait_until(lambda: layout(fake_api) == [(0, 8)], 10, "eight whole NPUs")
    writes = slice_writes(fake_api)
    assert writes == ["create /apis/resource.k8s.io/v1/resourceslices"]
    lists = requests_of(fake_api, "list", "/apis/resource")
    for expiry in range(1, 6):
        fake_api.break_next_watch("error-event")
        wait_for_requests(fake_api, "list", "/apis/resource", lists + expiry, 10)
    wait_until(lambda: daemon.log().count("resync: comparing") >= 2, 20, "two resyncs", interval=0.2)
    wait_for_requests(fake_api, "watch", "/apis/resource", 12, 20)
    assert slice_writes(fake_api) == writes
    assert probes(fake_api) == 1


@pytest.mark.parametrize(
    ("profile", "chips", "static", "product"),
    [
        ("atlas-300i-duo", 4, {"vnpuId": 116, "template": "vir02"}, "Atlas 300I Duo"),
        ("atlas-800-9000", 8, {"vnpuId": 116, "template": "vir04"}, "Ascend 910 (910A)"),
    ],
    ids=["300i-duo", "910a"],
)
def test_products_with_static_vnpus_only_publish_no_counters_and_no_candidates_and_say_why(
    workspace: Workspace,
    fake_api: FakeKubeAPI,
    launch_daemon: Launcher,
    *,
    profile: str,
    chips: int,
    static: dict[str, Any],
    product: str,
) -> None:  # A7, served: the API server would take counters (1.36), yet these chips are never split on demand
    fake_api.set_kubernetes_version(36)
    (workspace.root / "hw.json").write_text(json.dumps({"bootId": read_boot_id(), "vnpus": {"1": [static]}}))
    args = vnpu_args(workspace)
    args[args.index("--fake-profile") + 1] = profile
    daemon = launch_daemon(*args, "--log-level", "info")
    expected = ["npu-0", "npu-1-vnpu-116", *(f"npu-{i}" for i in range(2, chips))]
    wait_until(lambda: published_names(fake_api) == expected, 10, "whole NPUs and the static vNPU")
    daemon.wait_for_log("published 1 ResourceSlice(s)")
    stored = node_slices(fake_api)
    assert all("sharedCounters" not in s["spec"] for s in stored)
    assert all("consumesCounters" not in d for s in stored for d in s["spec"]["devices"])
    [line] = [line for line in daemon.log().splitlines() if "no vNPUs on demand" in line]
    assert product in line and line.endswith("supports static vNPUs only"), line
    assert ", ".join(f"npu-{i} (" for i in range(chips)) == ", ".join(re.findall(r"npu-\d+ \(", line))
    # Nothing to lay out with counters: neither the version nor the gate is asked.
    assert probes(fake_api) == 0 and requests_of(fake_api, "get", "/version") == 0
    assert "DRAPartitionableDevices" not in daemon.log()


def test_static_vnpus_an_administrator_makes_or_destroys_reach_the_slices_within_two_health_intervals(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    """Counted in the daemon's reads of the simulated hardware, not in seconds (see
    test_device_plugin_vnpu's A27): the vNPUs are re-read once per health interval, opening the
    state file once per chip. Two such reads after the first publication let the rebuilds the start
    may have left pending read first. Between the write and the slices showing it: the read under
    way at the write (at most 7 more opens), the next one, which finds the change, and the read of
    the slices' rebuild it triggers (8 each), plus the fake backend's one check of the changed file:
    at most 3 x 8."""
    chips = len(profile_inventory("atlas-800t-a2").devices)
    state = workspace.root / "hw.json"
    state.write_text(json.dumps({"bootId": read_boot_id(), "vnpus": {}}))
    args = vnpu_args(workspace)
    args[args.index("--vnpu") + 1] = "static"
    args[args.index("--health-interval") + 1] = "1"
    daemon = launch_daemon(*args)
    whole = [f"npu-{i}" for i in range(chips)]
    wait_until(lambda: published_names(fake_api) == whole, 10, "the whole NPUs")
    with state_reads(state) as reads:
        reads.wait_for_reads(2 * chips)
        replace_vnpus(state, {1: [{"vnpuId": 116, "template": "vir05_1c_16g"}]})
        split = ["npu-0", "npu-1-vnpu-116", *whole[2:]]
        wait_until(lambda: published_names(fake_api) == split, 10, "npu-1-vnpu-116 in place of npu-1")
        reads.mark()
        opens = reads.between_replacement_and_marker()
    assert 1 <= opens <= 3 * chips, f"{opens} opens of the state file: more than 3 reads of {chips} chips"
    replace_vnpus(state, {1: []})
    wait_until(lambda: published_names(fake_api) == whole, 10, "npu-1 whole again")
    writes = slice_writes(fake_api)
    with state_reads(state) as reads:
        reads.wait_for_reads(3 * chips)
    assert slice_writes(fake_api) == writes, "reads that find nothing new write nothing"
    assert "Traceback" not in daemon.log()


# ---- the read-back, in process: an API server whose dry run does not drop the gated fields


class DryRunKeepsCounters(KubeClient):
    """A dry run that answers the body as sent: the probe says "on", the real writes then lose their
    counters."""

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        if dry_run:
            return {"metadata": {"name": "probe"}, "spec": body["spec"]}
        return super().create_slice(body)


def dynamic_chips() -> VnpuChips:
    inventory = profile_inventory("atlas-800t-a2")
    plans = {}
    for device in inventory.devices:
        chip, _ = with_known_templates(inventory.vnpu[device.physical_id])
        plans[device.physical_id] = ChipPlan(chip, *serving(chip, VnpuMode.DYNAMIC, None))
    return served_chips(plans)


def publish_until(
    api: FakeKubeAPI, tmp_path: Path, client: KubeClient, done: Any, chips: Callable[[], VnpuChips] = dynamic_chips
) -> list[bool]:
    """Run a publisher with the 910B3 profile's chips (as `chips` reads them) until `done()`; the
    dynamic-available reports."""
    available: list[bool] = []
    inventory = Inventory(
        profile_inventory("atlas-800t-a2").devices, failure_threshold=1, recovery_threshold=1, owners=Owner.DRA
    )
    publisher = SlicePublisher(
        client,
        inventory,
        driver=DRIVER,
        node_name=NODE,
        unhealthy_policy=UnhealthyPolicy.REMOVE,
        vnpu=chips,
        on_dynamic_available=available.append,
    )

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(publisher.run(stop))
        while not done():
            await asyncio.sleep(0.02)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(run(), 20))
    return available


def test_a_write_that_loses_its_counters_switches_to_whole_npus_with_one_more_write(
    fake_api: FakeKubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_api.set_kubernetes_version(35, partitionable_devices=False)
    fake_api.write_kubeconfig(tmp_path / "kc")
    client = DryRunKeepsCounters(connect(tmp_path / "kc"))
    settled = threading.Event()

    def done() -> bool:
        if layout(fake_api) == [(0, 8)]:
            if settled.is_set():
                return True
            settled.set()
        return False

    available = publish_until(fake_api, tmp_path, client, done)
    client.close()
    verbs = [w.split()[0] for w in slice_writes(fake_api)]
    assert verbs == ["create", "update"]  # the counter slice, stripped; then the same slice rewritten whole
    assert available[0] is True and available[-1] is False
    assert next(r.message for r in caplog.records if "DRAPartitionableDevices" in r.message).startswith(
        "DRAPartitionableDevices is off on the API server (a published slice lost its counters)"
    )


def test_the_gate_is_probed_once_the_first_chip_is_split_on_demand(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.2)
    fake_api.set_kubernetes_version(36)
    fake_api.write_kubeconfig(tmp_path / "kc")
    client = KubeClient(connect(tmp_path / "kc"))
    split = dynamic_chips()
    whole = VnpuChips(split.chips)  # no chip split on demand (static-only products, others' vNPUs everywhere)
    asked: list[tuple[int, int]] = []  # probes and version reads made before each read of the chips

    def chips() -> VnpuChips:
        asked.append((probes(fake_api), requests_of(fake_api, "get", "/version")))
        return split if len(asked) > 3 else whole

    available = publish_until(fake_api, tmp_path, client, lambda: layout(fake_api) == [(8, 0), (0, 56)], chips)
    client.close()
    assert asked[:4] == [(0, 0)] * 4  # three resyncs without a chip split on demand ask nothing
    assert probes(fake_api) == 1
    assert available[:3] == [False] * 3 and available[-1] is True


def test_the_version_is_read_again_only_after_the_api_server_restarts_not_at_every_resync(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fleet cost: the version changes only with a restart, which cuts the slice watch short
    monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.05)
    fake_api.set_kubernetes_version(36)
    fake_api.write_kubeconfig(tmp_path / "kc")
    client = KubeClient(connect(tmp_path / "kc"))
    reads: list[int] = []  # version reads made before each read of the chips (one per reconcile)

    def chips() -> VnpuChips:
        reads.append(requests_of(fake_api, "get", "/version"))
        if len(reads) == 40:  # some resyncs at rest, then a restart (the same version)
            fake_api.set_kubernetes_version(36)
        return dynamic_chips()

    publish_until(fake_api, tmp_path, client, lambda: len(reads) >= 60 and reads[-1] == 2, chips)
    client.close()
    assert reads[1:40] == [1] * 39, "resyncs at rest read no version"
    assert probes(fake_api) == 1  # at start; the restart brought no new version


def test_an_upgrade_to_1_35_rewrites_every_slice_in_the_split_layout_at_the_next_resync(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # A11
    monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.2)
    fake_api.set_kubernetes_version(34, partitionable_devices=True)
    fake_api.write_kubeconfig(tmp_path / "kc")
    client = KubeClient(connect(tmp_path / "kc"))
    generations: list[int] = []

    def done() -> bool:
        shape = layout(fake_api)
        if shape == [(1, 7)] * 8 and not generations:
            generations.append(node_slices(fake_api)[0]["spec"]["pool"]["generation"])
            fake_api.set_kubernetes_version(35, partitionable_devices=True)
        return bool(generations) and shape == [(8, 0), (0, 56)]

    publish_until(fake_api, tmp_path, client, done)
    client.close()
    stored = node_slices(fake_api)
    assert {s["spec"]["pool"]["generation"] for s in stored} == {generations[0] + 1}
    assert all(not ("devices" in s["spec"] and "sharedCounters" in s["spec"]) for s in stored)


def test_a_chip_running_a_vnpu_is_hidden_when_the_gate_goes_off_until_its_claim_is_unprepared(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:  # A10
    fake_api.set_kubernetes_version(35, partitionable_devices=True)
    claim = plant_claim(fake_api, "small", None, [result("npu-0-vir05-1c-16g-0", "vnpu")])
    everything = [f"npu-{i}" for i in range(8)]

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        daemon = launch_daemon(*vnpu_args(workspace))
        await kubelet.wait_for(lambda: any(a.registered for a in kubelet.attempts), timeout=20)
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        await async_wait_until(lambda: layout(fake_api) == [(8, 0), (0, 56)], 10, "the split layout")
        daemon.kill()
        fake_api.set_kubernetes_version(35, partitionable_devices=False)
        before = sum(a.registered for a in kubelet.attempts)
        launch_daemon(*vnpu_args(workspace))
        await kubelet.wait_for(lambda: sum(a.registered for a in kubelet.attempts) > before, timeout=20)
        # One slice without counters (the old counter slice is deleted in the same burst), npu-0
        # left out.
        await async_wait_until(lambda: layout(fake_api) == [(0, 7)], 10, "one slice of whole NPUs")
        assert published_names(fake_api) == everything[1:]
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
        await async_wait_until(lambda: published_names(fake_api) == everything, 5, "npu-0 back")

    run_with_kubelet(workspace, fake_api, scenario)


class NoDryRun(KubeClient):
    """An API server that ignores dryRun: the probe is really stored, and must be deleted and never
    reused."""

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        return super().create_slice(body)


def test_without_dry_run_the_probe_is_deleted_and_the_pool_is_published_beside_it(
    fake_api: FakeKubeAPI, tmp_path: Path
) -> None:
    fake_api.set_kubernetes_version(35, partitionable_devices=True)
    fake_api.write_kubeconfig(tmp_path / "kc")
    client = NoDryRun(connect(tmp_path / "kc"))
    publish_until(fake_api, tmp_path, client, lambda: layout(fake_api) == [(8, 0), (0, 56)])
    client.close()
    pools = {s["spec"]["pool"]["name"] for s in fake_api.objects("ResourceSlice")}
    assert pools == {NODE}
    probes = [r for r in fake_api.requests if r.verb == "create" and r.body["spec"]["pool"]["name"] != NODE]
    deleted = [r for r in fake_api.requests if r.verb == "delete"]
    assert len(probes) == len(deleted) == 1


def test_vnpu_off_publishes_the_same_slices_and_touches_no_vnpu_state(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:  # A1, serving
    fake_api.set_kubernetes_version(36)  # even with DRAPartitionableDevices on
    plain = vnpu_args(workspace)[: -len(("--vnpu", "dynamic", "--fake-vnpu-state", "hw.json"))]
    assert "--vnpu" not in plain
    daemon = launch_daemon(*plain)
    wait_until(lambda: published_names(fake_api) == [f"npu-{i}" for i in range(8)], 10, "eight whole NPUs")
    daemon.wait_for_log("published 1 ResourceSlice(s)")
    before = [s["spec"] for s in node_slices(fake_api)]
    daemon.kill()
    writes, watches = slice_writes(fake_api), sum(1 for r in fake_api.requests if r.verb == "watch")
    launch_daemon(*plain, "--vnpu", "off", "--fake-vnpu-state", str(workspace.root / "hw.json"))
    wait_until(lambda: sum(1 for r in fake_api.requests if r.verb == "watch") > watches, 10, "the new daemon's watch")
    deadline = time.monotonic() + 2  # its first reconcile compares the stored slices with its own
    while time.monotonic() < deadline and slice_writes(fake_api) == writes:
        time.sleep(0.05)
    assert [s["spec"] for s in node_slices(fake_api)] == before
    assert slice_writes(fake_api) == writes
    assert probes(fake_api) == 0
    assert not (workspace.root / "hw.json").exists()
    assert not list(workspace.dev.glob("vdavinci*"))


def test_a_vnpu_read_that_fails_is_one_line_retried_and_publishing_goes_on(
    fake_api: FakeKubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A corrupt vNPU state (or any backend failure) while the slices are built: one warning naming
    it, no traceback, the same back-off as a failed write, and the slices once the read works."""
    fake_api.set_kubernetes_version(36)
    fake_api.write_kubeconfig(tmp_path / "kc")
    client = KubeClient(connect(tmp_path / "kc"))
    reads = 0

    def chips() -> VnpuChips:
        nonlocal reads
        reads += 1
        if reads <= 2:
            raise VnpuError(0, "fake vNPU state /x/hw.json is corrupt: Expecting value: line 1 column 2")
        return dynamic_chips()

    publish_until(fake_api, tmp_path, client, lambda: bool(slice_writes(fake_api)), chips)
    client.close()
    failures = [r for r in caplog.records if "is corrupt" in r.getMessage()]
    assert failures and all(r.exc_info is None for r in failures), failures
    assert failures[0].getMessage().startswith("publishing ResourceSlices failed (attempt 1), retrying in ")
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
