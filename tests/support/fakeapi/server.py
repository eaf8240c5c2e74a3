"""The HTTP handler at full fidelity: PATCH, field and label selectors, fault injection, a request
log with each request's arrival and end, and why each watch ended."""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass, field

from npu_plugin.sim._fakeapi.fields import Matcher
from npu_plugin.sim._fakeapi.kinds import JSON
from npu_plugin.sim._fakeapi.routes import Route, parse_route
from npu_plugin.sim._fakeapi.server import Context, Handler
from npu_plugin.sim._fakeapi.status import ApiError, conflict, status_object
from tests.support.fakeapi import patch as patches
from tests.support.fakeapi.authz import check_request
from tests.support.fakeapi.faults import (
    Faults,
    RawAnswer,
    RecordedRequest,
    RequestLog,
    forbidden,
    request_line,
    verb_of,
)
from tests.support.fakeapi.fielderrors import invalid_of, required
from tests.support.fakeapi.registry import FullRegistry
from tests.support.fakeapi.selectors import parse

# Who a forbidden request was made as, in the 403's message.
FORBIDDEN_USER = "system:serviceaccount:npu-plugin:npu-plugin-plan"
# Why a watch ended (RecordedRequest.end): its client's timeoutSeconds passed; the cap of
# `limit_watches` passed; the server ended every watch (`end_watches`); the server stopped; it sent
# an ERROR event; the connection went away (the client closed it, or a write failed); or one of
# faults.WATCH_FAULTS broke it.
TIMEOUT, LIMIT, ENDED_BY_SERVER, SERVER_STOPPED, ERROR_EVENT, CONNECTION_LOST = (
    "timeout",
    "server limit",
    "ended by the server",
    "server stopped",
    "error event",
    "connection lost",
)


def _float(text: str | None, default: float) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


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

    def _handle(self, method: str) -> None:
        self._arrived, self._ticket, self._end = time.monotonic(), -1, ""
        try:
            super()._handle(method)
        finally:
            if self._ticket >= 0:
                ended = time.monotonic()
                self._context.requests.finish(self._ticket, ended, self._watch_end(ended) if self._streaming else "")

    def _watch_end(self, ended: float) -> str:
        """Why the watch just ended (the answer is written: the client may already be making its
        next request)."""
        context = self._context
        if self._end:
            return self._end
        if ended - self._streamed >= min(self._asked, self._limit if self._limit is not None else self._asked):
            return LIMIT if self._limit is not None and self._limit < self._asked else TIMEOUT
        if context.watch_epoch != self._epoch:  # before closing: the server may stop just after ending it
            return ENDED_BY_SERVER
        if context.closing.is_set():
            return SERVER_STOPPED
        return CONNECTION_LOST

    # ---- refinements
    def before_dispatch(self) -> bool:
        faults, closing = self._context.faults, self._context.closing
        request = request_line(self._method, self._path, self.is_watch)
        if closing.wait(faults.latency + faults.held_for(request)):
            raise ApiError(status_object(503, "the server is shutting down"))
        if faults.unavailable:
            raise ApiError(status_object(503, "the server is currently unable to handle the request"))
        route = parse_route(self._path)
        verb = verb_of(self._method, self._path, self._query)
        if route is not None and faults.is_forbidden(verb, route.kind.plural):
            raise ApiError(forbidden(verb, self._path, FORBIDDEN_USER) or {})
        if (code := faults.take_failure(self._path)) is not None:
            raise ApiError(status_object(code, f"injected failure ({code})"))
        if (answer := faults.take_answer(request)) is not None:
            self._send_raw(answer)
            return False
        self._authorize()
        return True

    def _authorize(self) -> None:
        """403 unless the caller set with `authorize_as` may make this request (RBAC)."""
        registry = self._context.registry
        assert isinstance(registry, FullRegistry)
        caller = registry.authorizer.act_for(self.headers.get("Authorization"))
        route = parse_route(self._path)
        if route is None or caller is None:
            return
        check_request(caller, verb_of(self._method, self._path, self._query), self._path)

    def record(self, status: int) -> None:
        context = self._context
        # A watch records as it starts streaming: what its timeout is and counts from (its epoch
        # is the one `_watch` read first).
        self._streamed = time.monotonic()
        self._asked = _float(self._query.get("timeoutSeconds"), context.watch_timeout)
        self._limit = context.faults.watch_limit
        request = RecordedRequest(
            self._method,
            self._path,
            dict(self._query),
            status,
            self._body,
            authorization=self.headers.get("Authorization"),
            client=self._client_name(),
            started=self._arrived,
        )
        self._ticket = context.requests.append(request)

    def _client_name(self) -> str | None:
        if not isinstance(self.connection, ssl.SSLSocket):
            return None
        subject = (self.connection.getpeercert() or {}).get("subject", ())
        if isinstance(subject, str):
            return None
        names = [pair[1] for relative in subject for pair in relative if pair[0] == "commonName"]
        return names[0] if names else None

    def write_event(self, event_type: str, obj: JSON) -> None:
        if event_type == "ERROR" and not self._end:
            self._end = ERROR_EVENT
        super().write_event(event_type, obj)

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
        self._end = fault
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
            field_manager=self._query.get("fieldManager", ""),
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
