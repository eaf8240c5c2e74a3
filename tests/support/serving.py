"""One both-mode daemon serving for a whole test module (no kubelet: the tests call its sockets
directly)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from npu_plugin.dra.checkpoint import Checkpoint
from npu_plugin.sim.podresources import PodResourcesSimulator
from tests.support.both import RESOURCE, both_args
from tests.support.daemon import DaemonProcess, Daemons, wait_until
from tests.support.dra import Workspace, checked_state, fake_api_with_node, temporary_workspace
from tests.support.fakeapi import FakeKubeAPI

DP_SOCKET = "dp/npu-plugin-Ascend910.sock"


@dataclass
class Served:
    workspace: Workspace
    api: FakeKubeAPI
    daemon: DaemonProcess

    def channel(self, socket: Path) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{socket}")

    @property
    def dp_socket(self) -> Path:
        return self.workspace.root / DP_SOCKET

    def check(self) -> Checkpoint:
        """Still running, and nothing bad on disk; the checkpoint."""
        assert self.daemon.process.poll() is None, f"the daemon exited:\n{self.daemon.log()}"
        return checked_state(self.workspace)


@contextlib.contextmanager
def pod_resources(socket: Path) -> Iterator[PodResourcesSimulator]:
    """The kubelet's PodResources endpoint, served from a loop of its own (these tests are
    synchronous)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="pod-resources", daemon=True)
    thread.start()
    simulator = PodResourcesSimulator(socket, RESOURCE)
    try:
        asyncio.run_coroutine_threadsafe(simulator.start(), loop).result(10)
        yield simulator
    finally:
        asyncio.run_coroutine_threadsafe(simulator.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def serving(log_dir: Path) -> Iterator[Served]:
    """A both-mode daemon (device plugin on 0-3, DRA on 4-7) with its fake API server and a
    PodResources endpoint holding nothing (so the partition applies at once); the daemon is killed
    by its pid."""
    daemons = Daemons(log_dir)
    with (
        fake_api_with_node() as api,
        temporary_workspace(api) as workspace,
        pod_resources(workspace.root / "pr" / "kubelet.sock"),
    ):
        try:
            daemon = daemons(*both_args(workspace))
            sockets = [workspace.root / DP_SOCKET, workspace.dra_socket(), workspace.registration_socket()]
            wait_until(lambda: all(s.exists() for s in sockets), 20, "the daemon's three sockets")
            # Settled: its slice watch is open. A module-scoped daemon still opening connections
            # would start the fake API's handler threads inside the first test, which the leak check
            # then reports.
            wait_until(lambda: any(r.verb == "watch" for r in api.requests), 20, "the daemon's slice watch")
            yield Served(workspace, api, daemon)
        finally:
            daemons.kill_all()
