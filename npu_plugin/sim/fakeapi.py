"""A small fake Kubernetes API server on a real socket, for `npu-plugin simulate` and benchmarks.

It serves Nodes (get/list/watch), cluster-scoped resource.k8s.io/v1 ResourceSlices and namespaced
ResourceClaims (with a status subresource) the way kube-apiserver does where the daemon and the
simulators rely on it: resourceVersion preconditions, generateName, generation, equality field
selectors, watches with a bounded history (410 Expired past it) and bookmarks, `dryRun=All` creates,
chunked lists (`limit`, `continue`, `remainingItemCount`; 410 Expired once compacted), `GET /apis`,
and, for `npu-plugin plan` to read, Pods, DaemonSets, PodDisruptionBudgets, ResourceQuotas,
DeviceClasses and ResourceClaimTemplates (stored as given, not validated),
and the Kubernetes version (1.34 by default, or 1.35, 1.36) with its DRAPartitionableDevices gate:
while the gate is off, slice writes lose their counters as kube-apiserver's strategy drops them.
Validation, schema decoding, patches, label selectors, fault injection and a request log are
test-only: `tests.support.fakeapi` extends this server with them. Run `python -m
npu_plugin.sim.fakeapi --port 0 --kubeconfig PATH` to get a standalone server that prints its URL
and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from npu_plugin.sim._fakeapi.cluster import SUPPORTED_MINORS, Cluster
from npu_plugin.sim._fakeapi.kinds import JSON, NODES, resolve_kind
from npu_plugin.sim._fakeapi.registry import Registry
from npu_plugin.sim._fakeapi.server import Context, Handler, Server
from npu_plugin.sim._fakeapi.status import ApiError
from npu_plugin.sim._fakeapi.store import Store

__all__ = ["FakeKubeAPI", "main"]


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _serve(server: Server) -> None:
    """Serve with the stop signals blocked in this thread and in the handler threads it starts (they inherit
    its mask), so the kernel gives them to the main thread. A signal another thread takes is handled only at
    the main thread's next bytecode: never, while it waits in a long blocking call."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    server.serve_forever(poll_interval=0.05)


class FakeKubeAPI:
    """The fake API server. Objects survive `set_down`/restarts; `stop` ends every watch
    promptly."""

    handler: type[Handler] = Handler

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_limit: int = 1000,
        watch_timeout_seconds: float = 1800.0,
        kubernetes_minor: int = 34,
        partitionable_devices: bool | None = None,
        device_taints: bool | None = None,
        consumable_capacity: bool | None = None,
    ) -> None:
        """`partitionable_devices`, `device_taints` and `consumable_capacity`: the
        DRAPartitionableDevices, DRADeviceTaints and DRAConsumableCapacity gates; None is the
        version's default (on from 1.36)."""
        self._host, self._port = host, port
        self._cluster = Cluster(kubernetes_minor, partitionable_devices, device_taints, consumable_capacity)
        self._store = Store(history_limit)
        self._registry = self._make_registry(self._store)
        self._watch_timeout = watch_timeout_seconds
        self._lifecycle = threading.Lock()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle
    def start(self) -> None:
        """Bind and serve in a background thread; after a `set_down`, rebinds the same port."""
        with self._lifecycle:
            if self._server is not None:
                return
            server = self._make_server()
            self._port = server.server_address[1]
            self._thread = threading.Thread(target=_serve, args=(server,), name=f"fakeapi-{self._port}")
            self._server = server
            self._thread.start()

    def _make_registry(self, store: Store) -> Registry:
        return Registry(store, self._cluster)

    def _make_server(self) -> Server:
        return Server((self._host, self._port), self._make_context(), self.handler)

    def _make_context(self) -> Context:
        return Context(self._registry, self._watch_timeout)

    def stop(self) -> None:
        """Close the listening socket and every connection (open watches end at once);
        idempotent."""
        with self._lifecycle:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.context.closing.set()
        self._store.wake()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        thread.join()

    def __enter__(self) -> FakeKubeAPI:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._port == 0:
            raise RuntimeError("FakeKubeAPI has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self._host}:{self.port}"

    @property
    def scheme(self) -> str:
        return "http"

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str | None = None) -> None:
        """A kubeconfig (JSON, which is YAML) pointing at this server over plain http, without
        credentials or with a bearer `token`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "preferences": {},
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token} if token else {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}],
        }
        Path(path).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    # ---- objects, from Python (each change emits watch events like an API write)
    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> JSON:
        """Create (or replace) a Node; the returned copy carries its metadata.uid."""
        return self._registry.put(NODES, {"metadata": {"name": name, "labels": dict(labels or {})}})

    def objects(self, kind: str) -> list[JSON]:
        """Copies of all stored objects of `kind` (`ResourceSlice`, `resourceclaims`, `Node`,
        ...)."""
        return self._store.list_objects(resolve_kind(kind), None)[0]

    def get_object(self, kind: str, name: str, namespace: str = "default") -> JSON | None:
        resolved = resolve_kind(kind)
        return self._store.find(resolved, (namespace if resolved.namespaced else "", name))

    def put_object(self, kind: str, obj: Mapping[str, Any]) -> JSON:
        """Create or replace without validation, keeping `status` (so a test can plant an allocated
        claim). `metadata.namespace` defaults to "default" for namespaced kinds; generateName works.
        A body the API server could not even decode (a wrong JSON type, say) raises ValueError."""
        try:
            return self._registry.put(resolve_kind(kind), json.loads(json.dumps(obj)))
        except ApiError as err:
            raise ValueError(err.status["message"]) from err

    def delete_object(self, kind: str, name: str, namespace: str = "default") -> JSON:
        """Delete as a client would (finalizers are honoured); raise KeyError when there is no such
        object."""
        resolved = resolve_kind(kind)
        try:
            return self._registry.delete(resolved, (namespace if resolved.namespaced else "", name), None)[0]
        except ApiError as err:
            raise KeyError(f"{resolved.kind} {name!r} not found") from err

    # ---- the cluster's version and gate (changes apply to the next request)
    def set_kubernetes_version(
        self,
        minor: int,
        partitionable_devices: bool | None = None,
        device_taints: bool | None = None,
        consumable_capacity: bool | None = None,
    ) -> None:
        """Serve as Kubernetes 1.<minor> (34 to 37), the gates as given or the version's default. A
        running server restarts on the same port, as an upgrade (or a feature gate changed) restarts
        kube-apiserver: open connections and watches end."""
        checked = Cluster(minor, partitionable_devices, device_taints, consumable_capacity)
        running = self._server is not None
        if running:
            self.stop()
        self._cluster.minor, self._cluster.partitionable_gate = checked.minor, checked.partitionable_gate
        self._cluster.device_taints_gate = checked.device_taints_gate
        self._cluster.consumable_capacity_gate = checked.consumable_capacity_gate
        if running:
            self.start()

    @property
    def partitionable_devices(self) -> bool:
        return self._cluster.partitionable_devices

    @property
    def consumable_capacity(self) -> bool:
        return self._cluster.consumable_capacity

    @property
    def resource_version(self) -> int:
        return self._store.resource_version

    def compact_history(self) -> None:
        """Drop the watch event history: watches resuming from an older resourceVersion get 410."""
        self._store.compact()

    def end_watches(self) -> None:
        """End every open watch, as a restarting API server does."""
        with self._lifecycle:
            server = self._server
        if server is not None:
            server.context.watch_epoch += 1
            self._store.wake()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; print the URL on the first stdout line."""
    parser = argparse.ArgumentParser(
        prog="python -m npu_plugin.sim.fakeapi", description="Serve a fake Kubernetes API server until SIGTERM."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("--node", action="append", default=[], help="create this Node (repeatable)")
    parser.add_argument(
        "--kubernetes-version",
        choices=[f"1.{minor}" for minor in SUPPORTED_MINORS],
        default="1.34",
        help="the version served at /version, which decides the DRAPartitionableDevices default and validation",
    )
    parser.add_argument(
        "--feature-gates",
        choices=["DRAPartitionableDevices=true", "DRAPartitionableDevices=false"],
        help="DRAPartitionableDevices on or off (default: off before 1.36, on from 1.36)",
    )
    args = parser.parse_args(argv)
    gate = None if args.feature_gates is None else args.feature_gates.endswith("=true")
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    minor = int(args.kubernetes_version.split(".")[1])
    with FakeKubeAPI(args.host, args.port, kubernetes_minor=minor, partitionable_devices=gate) as api:
        for node in args.node:
            api.add_node(node)
        if args.kubeconfig:
            api.write_kubeconfig(args.kubeconfig)
        print(api.url, flush=True)
        while not stopping.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
