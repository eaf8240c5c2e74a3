"""What the daemon may touch: 0600 sockets in 0750 directories, claim references that never become
paths outside --cdi-root, and no file written anywhere but the directories it was given."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from npu_plugin._proto import dra_v1_pb2, dra_v1_pb2_grpc
from npu_plugin.sim.dra_kubelet import Claim, DraKubeletSimulator
from tests.support.both import RESOURCE, both_args, node, registered
from tests.support.daemon import DaemonProcess, Launcher, wait_until
from tests.support.dra import (
    DRIVER,
    NODE,
    Workspace,
    allocate,
    dra_args,
    plant_claim,
    result,
    run_with_kubelet,
)
from tests.support.fakeapi import FakeKubeAPI
from tests.support.serving import DP_SOCKET, pod_resources

pytest_plugins = ["tests.support.dra_fixtures"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# ---- permissions


@pytest.mark.parametrize("kubelet_dirs", ["present", "absent"])
def test_sockets_are_0600_in_0750_directories_and_kubelet_directories_are_the_kubelets(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, kubelet_dirs: str
) -> None:
    dp = workspace.root / "dp"
    kubelet_owned = [workspace.reg, workspace.plugins, dp]
    shutil.rmtree(workspace.state)  # --state-dir is always the daemon's to create
    for folder in kubelet_owned:
        shutil.rmtree(folder, ignore_errors=True)
        if kubelet_dirs == "present":
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)
    sockets = [workspace.root / DP_SOCKET, workspace.dra_socket(), workspace.registration_socket()]
    with pod_resources(workspace.root / "pr" / "kubelet.sock"):
        daemon = launch_daemon(*both_args(workspace))
        if kubelet_dirs == "absent":
            # No kubelet yet: serve waits for its directories and makes none of them.
            daemon.wait_for_log("waiting for the kubelet to create")
            assert not any(folder.exists() for folder in kubelet_owned), "serve made the kubelet's directories"
            for folder in kubelet_owned:
                folder.mkdir(mode=0o755)
                folder.chmod(0o755)
        wait_until(lambda: all(s.exists() for s in sockets), 20, "the three sockets")
        claim = plant_claim(fake_api, "c", None, [result("npu-4")])
        wait_until(lambda: prepared(workspace, claim), 20, "a prepared claim")

    assert {s.name: mode(s) for s in sockets} == {s.name: 0o600 for s in sockets}
    created = [workspace.plugins / DRIVER, workspace.state]
    assert {str(d): mode(d) for d in created} == {str(d): 0o750 for d in created}, "0750 whatever the umask"
    assert {str(d): mode(d) for d in kubelet_owned} == {str(d): 0o755 for d in kubelet_owned}
    assert mode(workspace.checkpoint) == 0o600
    assert mode(workspace.cdi_file(claim.uid)) == 0o644, "the container runtime reads CDI specs"
    assert daemon.process.poll() is None


def prepared(workspace: Workspace, claim: Claim) -> bool:
    """Prepare through the DRA socket (both mode settles its partition first, so the first tries may
    fail)."""
    with grpc.insecure_channel(f"unix://{workspace.dra_socket()}") as channel:
        request = dra_v1_pb2.NodePrepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace=claim.namespace, name=claim.name, uid=claim.uid)]
        )
        answer = dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=10)
    return answer.claims[claim.uid].error == ""


# ---- claim references


UID = "0badc0de-0000-4000-8000-000000000000"
TRAVERSALS = [
    Claim("default", "x", "../../../victim"),
    Claim("default", "x", "a/b"),
    Claim("default", "x", ".."),
    Claim("default", "x", f"{UID}\n"),
    Claim("default", "x", f"{UID}/../../../victim"),
    Claim("default", "../../../victim", UID),
    Claim("../kube-system", "x", UID),
    Claim("default", "x/../y", UID),
    Claim("default", "x\n", UID),
    Claim("default", "%2e%2e", UID),
]


def test_claim_references_never_become_paths_or_urls(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    # Were a UID used unchecked, `npu.huawei.com-claim_../../../victim.json` would resolve through
    # this folder to <root>/victim.json: the folder is there so that a missing check shows as a
    # written or deleted file.
    (workspace.cdi / f"{DRIVER}-claim_..").mkdir()
    victim = workspace.root / "victim.json"
    victim.write_text("keep")
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        await kubelet.wait_for_plugin(DRIVER)
        before = tree(workspace.root)
        for version in ("v1", "v1beta1"):
            prepared = await kubelet.prepare(TRAVERSALS, version=version)
            unprepared = await kubelet.unprepare(TRAVERSALS, version=version)
            for claim in TRAVERSALS:
                assert "invalid claim" in prepared[claim.uid].error and not prepared[claim.uid].devices, claim
                assert "invalid claim" in unprepared[claim.uid], claim
        assert tree(workspace.root) == before
        assert victim.read_text() == "keep"
        assert not [r.path for r in fake_api.requests if "/resourceclaims" in r.path], "no reference reached a URL"

    run_with_kubelet(workspace, fake_api, scenario)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


# ---- the whole file system


# Left out of the walk, and why. Everything else on the root file system must be unchanged.
PSEUDO = ("/proc", "/sys", "/dev", "/run")  # the kernel's and the running services' views, not files we write
CACHES = ("__pycache__", ".pytest_cache", ".hypothesis")  # CPython's bytecode (written next to any module whose
# cache is missing or stale when it is imported: the daemon's, the venv's, the standard library's),
# and the test runner's own caches in the checkout.


def excluded(own: tuple[Path, ...]) -> Callable[[str], bool]:
    """Paths the walk skips: the list above, and this test's own directories (checked on their
    own)."""
    own_dirs = tuple(str(p) for p in own)

    def skip(path: str) -> bool:
        return (
            path in PSEUDO
            or path.rsplit(os.sep, 1)[-1] in CACHES
            or any(path == d or path.startswith(d + os.sep) for d in own_dirs)
        )

    return skip


def walk(skip: Callable[[str], bool]) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every path on the root file system; other mounts (tmpfs, overlays of other
    tools) are recorded but not entered: nothing of ours lives on them in this test."""
    device = os.lstat("/").st_dev
    found: dict[str, tuple[int, int]] = {}
    folders = ["/"]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:  # unreadable, or gone since it was listed
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if skip(entry.path):
                continue
            found[entry.path] = (info.st_size, info.st_mtime_ns)
            if stat.S_ISDIR(info.st_mode) and info.st_dev == device:
                folders.append(entry.path)
    return found


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def on_their_own(noise: list[str]) -> Callable[[str], bool]:
    """Paths that change on their own (a CI runner's logs, a journal): those that changed between
    two walks before the daemon started, and what appears in their directories. They are named on
    failure."""
    moving = set(noise)

    def moved(path: str) -> bool:
        return path in moving or path.rsplit(os.sep, 1)[0] in moving

    return moved


async def dra_cycle(
    workspace: Workspace, api: FakeKubeAPI, launch: Callable[[], DaemonProcess], name: str
) -> DaemonProcess:
    async with DraKubeletSimulator(workspace.reg, node_name=NODE, api_url=api.url) as kubelet:
        daemon = launch()
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(api, name)
        assert (await kubelet.prepare([claim]))[claim.uid].error == ""
        assert await kubelet.unprepare([claim]) == {claim.uid: ""}
    return daemon


async def both_cycle(
    workspace: Workspace, api: FakeKubeAPI, launch: Callable[[], DaemonProcess], name: str
) -> DaemonProcess:
    async with node(workspace, api) as sim:
        daemon = launch()
        await registered(sim, daemon)
        assert (await sim.kubelet.allocate(RESOURCE, ["Ascend910-1"])).envs["ASCEND_VISIBLE_DEVICES"] == "1"
        claim = await allocate(api, name)
        assert (await sim.dra.prepare([claim]))[claim.uid].error == ""
        assert await sim.dra.unprepare([claim]) == {claim.uid: ""}
    return daemon


CYCLES = {"dra": (dra_args, dra_cycle), "both": (both_args, both_cycle)}


@pytest.mark.slow
@pytest.mark.alone
def test_no_file_is_written_outside_the_given_directories(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, tmp_path: Path
) -> None:
    """A whole life in each mode — start, register, publish, Allocate, Prepare, Unprepare, stop; DRA,
    then both in the same directories — changes nothing on the root file system outside this test's
    directories, and inside them nothing outside the daemon's flags. A walk of the whole root file
    system is this test's cost: the lives share the walks, each checked against the walk just before
    it."""
    scratch = workspace.root / "tmp"  # the daemon's TMPDIR: Python's tempfile (and so libraries) write here
    scratch.mkdir()
    skip = excluded((workspace.root, tmp_path))
    own = tree(workspace.root)

    def lives(run: str) -> dict[str, list[str]]:
        """What each life wrote outside this test's directories, less what changes on its own."""
        control = walk(skip)
        before = walk(skip)
        moved = on_their_own(changed(control, before))
        written: dict[str, list[str]] = {}
        for served, (args, cycle) in CYCLES.items():
            daemon = asyncio.run(
                cycle(
                    workspace,
                    fake_api,
                    lambda args=args: launch_daemon(*args(workspace), env={"TMPDIR": str(scratch)}),
                    f"{served}-{run}",
                )
            )
            assert daemon.signal(signal.SIGTERM, timeout=10)[0] == 0
            after = walk(skip)
            written[served] = [p for p in changed(before, after) if not moved(p)]
            before = after
        return written

    written = lives("first")
    if any(written.values()):
        # Another process on the machine may have written once meanwhile; the daemon writes in every
        # life.
        again = lives("second")
        written = {served: sorted(set(paths) & set(again[served])) for served, paths in written.items()}
    assert written == {"dra": [], "both": []}
    flags = [workspace.reg, workspace.plugins, workspace.cdi, workspace.state, workspace.root / "dp"]
    simulators = [workspace.root / "pr"]  # the PodResources socket the test serves
    outside = [
        p for p in changed(own, tree(workspace.root)) if not any(Path(p).is_relative_to(d) for d in flags + simulators)
    ]
    assert outside == []
    assert list(scratch.iterdir()) == []
