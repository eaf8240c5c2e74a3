"""A fake Kubernetes API server on a real socket, for tests and `npu-plugin simulate`.

It serves Nodes (get/list/watch), cluster-scoped resource.k8s.io/v1 ResourceSlices and namespaced
ResourceClaims (with a status subresource) the way kube-apiserver 1.34 does: resourceVersion
preconditions, generateName, generation, field/label selectors, merge/strategic/JSON patches, watches
with a bounded history (410 Expired past it), and ResourceSlice validation with 422 `Status` answers.
Faults can be injected from Python. Run `python -m npu_plugin.sim.fakeapi --port 0 --kubeconfig PATH`
to get a standalone server that prints its URL and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from npu_plugin.sim._kubeapi.faults import Faults, RawAnswer, RecordedRequest, RequestLog
from npu_plugin.sim._kubeapi.kinds import JSON, NODES, resolve_kind
from npu_plugin.sim._kubeapi.registry import Registry
from npu_plugin.sim._kubeapi.server import Context, Server
from npu_plugin.sim._kubeapi.status import ApiError
from npu_plugin.sim._kubeapi.store import Store

__all__ = ["FakeKubeAPI", "RecordedRequest", "main"]


class FakeKubeAPI:
    """The fake API server. Objects survive `set_down`/restarts; `stop` ends every watch promptly."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_limit: int = 1000,
        require_resource_version: bool = False,
        watch_timeout_seconds: float = 1800.0,
    ) -> None:
        """`require_resource_version`: refuse (422) updates without metadata.resourceVersion, which the
        real server accepts for ResourceSlices and ResourceClaims (`AllowUnconditionalUpdate`)."""
        self._host, self._port = host, port
        self._store = Store(history_limit)
        self._registry = Registry(self._store, require_resource_version=require_resource_version)
        self._faults = Faults()
        self._requests = RequestLog()
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
            context = Context(self._registry, self._faults, self._requests, self._watch_timeout)
            server = Server((self._host, self._port), context)
            self._port = server.server_address[1]
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fakeapi-{self._port}"
            )
            self._server = server
            self._thread.start()

    def stop(self) -> None:
        """Close the listening socket and every connection (open watches end at once); idempotent."""
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
        return f"http://{self._host}:{self.port}"

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> None:
        """A kubeconfig (JSON, which is YAML) pointing at this server over plain http, without credentials."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "preferences": {},
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}],
        }
        Path(path).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    # ---- objects, from Python (each change emits watch events like an API write)
    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> JSON:
        """Create (or replace) a Node; the returned copy carries its metadata.uid."""
        return self._registry.put(NODES, {"metadata": {"name": name, "labels": dict(labels or {})}})

    def objects(self, kind: str) -> list[JSON]:
        """Copies of all stored objects of `kind` (`ResourceSlice`, `resourceclaims`, `Node`, ...)."""
        return self._store.list_objects(resolve_kind(kind), None)[0]

    def get_object(self, kind: str, name: str, namespace: str = "default") -> JSON | None:
        resolved = resolve_kind(kind)
        return self._store.find(resolved, (namespace if resolved.namespaced else "", name))

    def put_object(self, kind: str, obj: Mapping[str, Any]) -> JSON:
        """Create or replace without validation, keeping `status` (so a test can plant an allocated claim).
        `metadata.namespace` defaults to "default" for namespaced kinds; generateName works. A body the
        API server could not even decode (a wrong JSON type, say) raises ValueError."""
        try:
            return self._registry.put(resolve_kind(kind), json.loads(json.dumps(obj)))
        except ApiError as err:
            raise ValueError(err.status["message"]) from err

    def delete_object(self, kind: str, name: str, namespace: str = "default") -> JSON:
        """Delete as a client would (finalizers are honoured); raise KeyError when there is no such object."""
        resolved = resolve_kind(kind)
        try:
            return self._registry.delete(resolved, (namespace if resolved.namespaced else "", name), None)[0]
        except ApiError as err:
            raise KeyError(f"{resolved.kind} {name!r} not found") from err

    @property
    def resource_version(self) -> int:
        return self._store.resource_version

    def compact_history(self) -> None:
        """Drop the watch event history: watches resuming from an older resourceVersion get 410."""
        self._store.compact()

    # ---- faults and observation
    def fail_next(self, n: int, status: int = 500, path_contains: str = "") -> None:
        """Answer the next `n` requests whose path contains `path_contains` with a `status` Status."""
        self._faults.fail_next(n, status, path_contains)

    def set_latency(self, seconds: float) -> None:
        """Delay every request (and each watch's start) by `seconds`."""
        self._faults.latency = seconds

    def limit_watches(self, seconds: float | None) -> None:
        """End every watch after at most `seconds`, whatever timeoutSeconds asked (None: as asked); compresses
        hours of a client's watch cycle into seconds. Open watches end now."""
        self._faults.watch_limit = seconds
        self._end_watches()

    def set_down(self, down: bool, *, refuse: bool = True) -> None:
        """Take the server down: connections refused (`refuse`) or 503 for everything; open watches end."""
        if not refuse:
            self._faults.unavailable = down
            self._end_watches()
        elif down:
            self.stop()
        else:
            self.start()

    def answer_next(
        self,
        n: int,
        path_contains: str,
        *,
        status: int = 200,
        body: bytes = b"<html><body>502 Bad Gateway</body></html>",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next `n` matching requests with exactly this (a body that need not be JSON), e.g. a
        proxy's HTML page, or 429 with `{"Retry-After": "2"}`. `path_contains` is matched against
        "METHOD /path" ("WATCH /path" for a watch), so "GET /api/v1/nodes/" or "WATCH " select a verb."""
        self._faults.answer_next(n, path_contains, RawAnswer(status, body, dict(headers or {})))

    def break_next_watch(self, fault: str) -> None:
        """The next watch breaks once its initial events are sent: "garbage" (a line that is not JSON),
        "error-event" (an ERROR event carrying 410 Expired), "reset-mid-event" (half an event, then the
        connection is cut) or "version-backwards" (a bookmark with a resourceVersion older than any seen)."""
        self._faults.break_next_watch(fault)

    def request_counts(self) -> dict[str, int]:
        """How many requests were answered, by "VERB path" with the verb as the API server's audit log
        names it (get, list, watch, create, update, patch, delete, deletecollection), e.g.
        `{"list /apis/resource.k8s.io/v1/resourceslices": 1}`."""
        return dict(Counter(f"{r.verb} {r.path}" for r in self._requests.snapshot()))

    def force_conflicts(self, n: int) -> None:
        """The next `n` updates (PUT or PATCH) fail with 409 Conflict."""
        self._faults.force_conflicts(n)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the answered requests, oldest first."""
        return self._requests.snapshot()

    def clear_requests(self) -> None:
        self._requests.clear()

    def _end_watches(self) -> None:
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
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with FakeKubeAPI(args.host, args.port) as api:
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
