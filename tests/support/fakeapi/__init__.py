"""The fake Kubernetes API server at full fidelity, for tests and benchmarks only (not in the
wheel).

It extends the small server `npu-plugin simulate` uses (`npu_plugin.sim.fakeapi`) with what only
tests need: ResourceSlice validation with 422 `Status` answers worded as kube-apiserver words them,
per version, schema decoding (unknown and duplicate fields, wrong types), merge/strategic/JSON/apply
patches, field and label selectors, fault injection (RBAC's 403 for a verb on a resource
included) and a request log.
"""

from __future__ import annotations

import ssl
from collections import Counter
from collections.abc import Mapping

from npu_plugin.sim import fakeapi
from npu_plugin.sim._fakeapi.registry import Registry
from npu_plugin.sim._fakeapi.server import Context, Server
from npu_plugin.sim._fakeapi.store import Store
from tests.support.fakeapi.authz import Caller
from tests.support.fakeapi.faults import Faults, RawAnswer, RecordedRequest, RequestLog, most_at_once
from tests.support.fakeapi.registry import FullRegistry
from tests.support.fakeapi.server import FullContext, FullHandler

__all__ = ["FakeKubeAPI", "RecordedRequest"]


class FakeKubeAPI(fakeapi.FakeKubeAPI):
    """Objects survive `set_down`/restarts; `stop` ends every watch promptly."""

    handler = FullHandler

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_limit: int = 1000,
        require_resource_version: bool = False,
        watch_timeout_seconds: float = 1800.0,
        kubernetes_minor: int = 34,
        partitionable_devices: bool | None = None,
        device_taints: bool | None = None,
        consumable_capacity: bool | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`require_resource_version`: refuse (422) updates without metadata.resourceVersion, which
        the real server accepts for ResourceSlices and ResourceClaims (`AllowUnconditionalUpdate`).
        `tls`: serve https with this server-side context (which may ask for client certificates)."""
        self._require_rv = require_resource_version
        self._tls = tls
        self._faults = Faults()
        self._requests = RequestLog()
        super().__init__(
            host,
            port,
            history_limit=history_limit,
            watch_timeout_seconds=watch_timeout_seconds,
            kubernetes_minor=kubernetes_minor,
            partitionable_devices=partitionable_devices,
            device_taints=device_taints,
            consumable_capacity=consumable_capacity,
        )

    def _make_registry(self, store: Store) -> Registry:
        return FullRegistry(store, self._cluster, require_resource_version=self._require_rv)

    def _make_context(self) -> Context:
        return FullContext(self._registry, self._watch_timeout, faults=self._faults, requests=self._requests)

    def _make_server(self) -> Server:
        server = super()._make_server()
        if self._tls is not None:
            # The handshake happens in the connection's own thread, at its first read.
            server.socket = self._tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        return server

    @property
    def scheme(self) -> str:
        return "http" if self._tls is None else "https"

    # ---- authorization
    def authorize_as(self, caller: Caller | None) -> None:
        """Check every request that carries `caller`'s token as RBAC would (and, from 1.36, the
        per-driver claim status check); None: allow everything (the default)."""
        assert isinstance(self._registry, FullRegistry)
        self._registry.authorizer.caller = caller

    # ---- faults
    def fail_next(self, n: int, status: int = 500, path_contains: str = "") -> None:
        """Answer the next `n` requests whose path contains `path_contains` with a `status`
        Status."""
        self._faults.fail_next(n, status, path_contains)

    def answer_next(
        self,
        n: int,
        path_contains: str,
        *,
        status: int = 200,
        body: bytes = b"<html><body>502 Bad Gateway</body></html>",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Answer the next `n` matching requests with exactly this (a body that need not be JSON),
        e.g. a proxy's HTML page, or 429 with `{"Retry-After": "2"}`. `path_contains` is matched
        against "METHOD /path" ("WATCH /path" for a watch), so "GET /api/v1/nodes/" or "WATCH "
        select a verb."""
        self._faults.answer_next(n, path_contains, RawAnswer(status, body, dict(headers or {})))

    def break_next_watch(self, fault: str) -> None:
        """The next watch breaks once its initial events are sent: "garbage" (a line that is not
        JSON), "error-event" (an ERROR event carrying 410 Expired), "reset-mid-event" (half an
        event, then the connection is cut) or "version-backwards" (a bookmark with a resourceVersion
        older than any seen)."""
        self._faults.break_next_watch(fault)

    def limit_watches(self, seconds: float | None) -> None:
        """End every watch after at most `seconds`, whatever timeoutSeconds asked (None: as asked);
        compresses hours of a client's watch cycle into seconds. Open watches end now."""
        self._faults.watch_limit = seconds
        self.end_watches()

    def hold(self, path_contains: str, seconds: float) -> None:
        """Hold every request matching `path_contains` (as `answer_next` matches) `seconds` before
        answering it, e.g. "GET /apis/resource.k8s.io/v1/resourceslices" holds every slice LIST; 0
        stops holding them."""
        self._faults.hold(path_contains, seconds)

    def set_latency(self, seconds: float) -> None:
        """Delay every request (and each watch's start) by `seconds`."""
        self._faults.latency = seconds

    def set_down(self, down: bool, *, refuse: bool = True) -> None:
        """Take the server down: connections refused (`refuse`) or 503 for everything; open watches
        end."""
        if not refuse:
            self._faults.unavailable = down
            self.end_watches()
        elif down:
            self.stop()
        else:
            self.start()

    def forbid(self, verb: str, resource: str) -> None:
        """From now on answer `verb` (as `request_counts` names verbs) on `resource` (a plural,
        `pods`) with the 403 Status RBAC gives a service account lacking it."""
        self._faults.forbid(verb, resource)

    def force_conflicts(self, n: int) -> None:
        """The next `n` updates (PUT or PATCH) fail with 409 Conflict."""
        self._faults.force_conflicts(n)

    # ---- the request log
    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the answered requests, oldest first."""
        return self._requests.snapshot()

    def request_counts(self) -> dict[str, int]:
        """How many requests were answered, by "verb path" with the verb as the API server's audit
        log names it (get, list, watch, create, update, patch, delete, deletecollection), e.g.
        `{"list /apis/resource.k8s.io/v1/resourceslices": 1}`."""
        return dict(Counter(f"{r.verb} {r.path}" for r in self._requests.snapshot()))

    def most_in_flight(self, verb: str, node: str | None = None) -> int:
        """The most requests of `verb` (as `request_counts` names verbs), of `node`'s field selector
        when given, that the server was answering at one moment, since the log was cleared."""
        return most_at_once(r for r in self.requests if r.verb == verb and (node is None or r.node == node))

    def clear_requests(self) -> None:
        self._requests.clear()
