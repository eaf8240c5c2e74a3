"""The HTTP handler at full fidelity: PATCH, field and label selectors, fault injection, a request log."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field

from npu_plugin.sim._kubeapi.fields import Matcher
from npu_plugin.sim._kubeapi.routes import Route
from npu_plugin.sim._kubeapi.server import Context, Handler
from npu_plugin.sim._kubeapi.status import ApiError, conflict, status_object
from tests.fakeapi import patch as patches
from tests.fakeapi.faults import Faults, RawAnswer, RecordedRequest, RequestLog
from tests.fakeapi.fielderrors import invalid_of, required
from tests.fakeapi.registry import FullRegistry
from tests.fakeapi.selectors import parse


@dataclass
class FullContext(Context):
    faults: Faults = field(default_factory=Faults)
    requests: RequestLog = field(default_factory=RequestLog)


class FullHandler(Handler):
    @property
    def _context(self) -> FullContext:
        context = self.server.context
        assert isinstance(context, FullContext)
        return context

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    # ---- refinements
    def before_dispatch(self) -> bool:
        faults, closing = self._context.faults, self._context.closing
        if closing.wait(faults.latency):
            raise ApiError(status_object(503, "the server is shutting down"))
        if faults.unavailable:
            raise ApiError(status_object(503, "the server is currently unable to handle the request"))
        if (code := faults.take_failure(self._path)) is not None:
            raise ApiError(status_object(code, f"injected failure ({code})"))
        if (answer := faults.take_answer(self._method, self._path, self.is_watch)) is not None:
            self._send_raw(answer)
            return False
        return True

    def record(self, status: int) -> None:
        request = RecordedRequest(
            self._method,
            self._path,
            dict(self._query),
            status,
            self._body,
            authorization=self.headers.get("Authorization"),
            client=self._client_name(),
        )
        self._context.requests.append(request)

    def _client_name(self) -> str | None:
        if not isinstance(self.connection, ssl.SSLSocket):
            return None
        subject = (self.connection.getpeercert() or {}).get("subject", ())
        return next((value for field in subject for key, value in field if key == "commonName"), None)

    def matcher(self, route: Route) -> Matcher:
        return parse(route.kind, self._query.get("fieldSelector", ""), self._query.get("labelSelector", "")).matches

    def before_update(self, route: Route) -> None:
        if self._context.faults.take_conflict():
            raise conflict(route.kind, route.key[1])

    def watch_limit(self) -> float | None:
        return self._context.faults.watch_limit

    def interrupt_watch(self, route: Route) -> bool:
        """One of faults.WATCH_FAULTS, then the end of the stream (or of the connection)."""
        fault = self._context.faults.take_watch_fault()
        if fault is None:
            return False
        if fault == "garbage":
            self.write_chunk(b"<html><body>502 Bad Gateway</body></html>\n")
        elif fault == "error-event":
            self.write_event("ERROR", status_object(410, "too old resource version: 1 (2)", reason="Expired"))
        elif fault == "version-backwards":
            self.write_event("BOOKMARK", {"kind": route.kind.kind, "metadata": {"resourceVersion": "1"}})
        else:  # reset-mid-event: half an event, then the connection is cut
            self.write_chunk(b'{"type": "MODIFIED", "object": {"metadata": {"na')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return True
        self.wfile.write(b"0\r\n\r\n")
        return True

    # ---- PATCH
    def _item_patch(self, route: Route) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type not in patches.SUPPORTED:
            raise patches.unsupported_media_type(content_type)
        if content_type == patches.APPLY and not self._query.get("fieldManager"):
            missing = required("fieldManager", "is required for apply patch")
            raise invalid_of("PatchOptions", "meta.k8s.io", "", [missing])
        self.before_update(route)
        registry = self._context.registry
        assert isinstance(registry, FullRegistry)
        obj, warnings = registry.patch(
            route.kind,
            route.key,
            self._body,
            content_type=content_type,
            field_validation=self._field_validation,
            subresource=route.subresource,
        )
        self._send_json(200, obj, warnings)

    def _send_raw(self, answer: RawAnswer) -> None:
        self.record(answer.status)
        self.send_response(answer.status)
        for name, value in {"Content-Type": "text/html", **answer.headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)
