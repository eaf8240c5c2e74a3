"""The HTTP face of the fake API server: request handling and watch streaming.

The `Handler` methods marked as refinable (`before_dispatch`, `record`, `matcher`, `before_update`,
`watch_limit`, `interrupt_watch`) do the plain thing here; the test tree's fake API overrides them
with fault injection, a request log and full selectors, and adds PATCH.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from npu_plugin.sim._fakeapi.fields import Matcher, field_matcher
from npu_plugin.sim._fakeapi.kinds import JSON, group_list
from npu_plugin.sim._fakeapi.registry import Registry
from npu_plugin.sim._fakeapi.routes import Route, parse_route
from npu_plugin.sim._fakeapi.status import ApiError, bad_request, status_object, success_status
from npu_plugin.sim._fakeapi.store import Event

log = logging.getLogger(__name__)
_FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


@dataclass
class Context:
    """State shared by all handler threads of one server."""

    registry: Registry
    watch_timeout: float
    closing: threading.Event = field(default_factory=threading.Event)
    watch_epoch: int = 0  # bumped to end every open watch

    def watch_cancelled(self, epoch: int) -> bool:
        return self.closing.is_set() or self.watch_epoch != epoch


class Server(ThreadingHTTPServer):
    """A threading HTTP server that knows its open connections, so stopping can cut them."""

    daemon_threads = False  # server_close() then joins every handler thread
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], context: Context, handler: type[Handler]) -> None:
        self.context = context
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the peer
                connection.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 with keep-alive like the real server, chunked encoding for
    watches."""

    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: with Nagle on, a keep-alive client's delayed ACK
    # stalls every response by ~40 ms, which the real API server does not do.
    disable_nagle_algorithm = True
    server: Server

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fakeapi %s " + format, self.address_string(), *args)

    # ---- request plumbing
    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        self._method, self._path = method, url.path
        self._query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self._body: Any = None
        self._streaming = False
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        context = self.server.context
        try:
            try:
                self._body = _parse_json(raw) if raw else None
                if context.closing.is_set():
                    raise ApiError(status_object(503, "the server is shutting down"))
                if self.before_dispatch():
                    self._dispatch()
            except ApiError as err:
                self._send_json(err.code, err.status)
            except (BrokenPipeError, ConnectionResetError):
                raise  # not a failure of ours: handled below
            except Exception:
                log.exception("fakeapi: %s %s failed", method, self.path)
                if self._streaming:  # a watch already sent its headers: all that is left is to hang up
                    self.close_connection = True
                else:
                    self._send_json(500, status_object(500, "internal error in the fake API server"))
        except (BrokenPipeError, ConnectionResetError):  # the client hung up, before or while its answer was written
            self.close_connection = True

    # ---- refinable
    def before_dispatch(self) -> bool:
        """False when the request was already answered (by fault injection)."""
        return True

    def record(self, status: int) -> None:
        """Note an answered request (a request log)."""

    def matcher(self, route: Route) -> Matcher:
        return field_matcher(self._query.get("fieldSelector", ""), self._query.get("labelSelector", ""))

    def before_update(self, route: Route) -> None:
        """Raise an ApiError to refuse an update before it is tried (forced conflicts)."""

    def watch_limit(self) -> float | None:
        """At most this many seconds for a watch, whatever it asked for."""
        return None

    def interrupt_watch(self, route: Route) -> bool:
        """Break the watch after its initial events; True when the stream (or connection) was
        ended."""
        return False

    @property
    def is_watch(self) -> bool:
        return self._method == "GET" and self._query.get("watch", "").lower() in ("true", "1")

    def _send_json(self, code: int, obj: JSON, warnings: Iterable[str] = ()) -> None:
        self.record(code)
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for warning in warnings:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(data)

    # ---- routing
    def _dispatch(self) -> None:
        if self._path in ("/healthz", "/readyz", "/livez", "/version"):
            version = self.server.context.registry.cluster.version()
            self._send_json(200, version if self._path == "/version" else {"status": "ok"})
            return
        if self._path in ("/apis", "/apis/"):
            self._send_json(200, group_list(self.server.context.registry.cluster.minor))
            return
        route = parse_route(self._path)
        if route is None:
            raise ApiError(status_object(404, "the server could not find the requested resource"))
        handler = getattr(self, f"_{'item' if route.name else 'collection'}_{self._method.lower()}", None)
        if handler is None:
            raise ApiError(status_object(405, "the server does not allow this method on the requested resource"))
        handler(route)

    @property
    def _field_validation(self) -> str:
        value = self._query.get("fieldValidation") or "Warn"
        if value not in _FIELD_VALIDATION:
            raise bad_request(f'fieldValidation must be one of "Ignore", "Warn" or "Strict", got "{value}"')
        return value

    def _collection_get(self, route: Route) -> None:
        if self.is_watch:
            self._watch(route)
        else:
            query = self._query
            text = query.get("limit") or "0"
            if not text.isdigit():
                raise bad_request(f'invalid limit "{text}"')
            listed = self.server.context.registry.list_collection(
                route.kind,
                route.namespace,
                self.matcher(route),
                limit=int(text),
                continue_token=query.get("continue", ""),
                selected=bool(query.get("fieldSelector") or query.get("labelSelector")),
            )
            self._send_json(200, listed)

    def _collection_post(self, route: Route) -> None:
        if route.kind.namespaced and route.namespace is None:
            raise ApiError(status_object(405, "the server does not allow this method on the requested resource"))
        registry = self.server.context.registry
        dry_run = self._dry_run
        obj, warnings = registry.create(
            route.kind, route.namespace or "", self._body, self._field_validation, dry_run=dry_run
        )
        self._send_json(201, obj, warnings)

    @property
    def _dry_run(self) -> bool:
        value = self._query.get("dryRun")
        if value is None:
            return False
        if value != "All":
            raise bad_request(f'dryRun values must be "All", got "{value}"')
        return True

    def _collection_delete(self, route: Route) -> None:
        registry = self.server.context.registry
        listed = registry.list_collection(route.kind, route.namespace, self.matcher(route))
        for item in listed["items"]:
            try:
                registry.delete(route.kind, (item["metadata"].get("namespace", ""), item["metadata"]["name"]), None)
            except ApiError as err:
                if err.code != 404:
                    raise
        self._send_json(200, listed)

    def _item_get(self, route: Route) -> None:
        self._send_json(200, self.server.context.registry.store.get(route.kind, route.key))

    def _item_put(self, route: Route) -> None:
        self.before_update(route)
        registry = self.server.context.registry
        obj, warnings = registry.update(
            route.kind, route.key, self._body, field_validation=self._field_validation, subresource=route.subresource
        )
        self._send_json(200, obj, warnings)

    def _item_delete(self, route: Route) -> None:
        if route.subresource:
            raise ApiError(status_object(405, "the server does not allow this method on the requested resource"))
        obj, gone = self.server.context.registry.delete(route.kind, route.key, self._body)
        deleted_status = gone and not route.kind.returns_deleted_object
        self._send_json(200, success_status(route.kind, obj) if deleted_status else obj)

    # ---- watch
    def _watch(self, route: Route) -> None:
        context = self.server.context
        # The epoch before the limit and before the request log shows the watch: a test ends watches
        # as soon as it sees this one, and `limit_watches` sets the limit before it bumps the epoch,
        # so either this watch gets the limit or the bump ends it (read later, it could get neither
        # and run for all its timeoutSeconds).
        self._epoch = context.watch_epoch
        matches = self.matcher(route)
        timeout = _float(self._query.get("timeoutSeconds"), context.watch_timeout)
        if (limit := self.watch_limit()) is not None:
            timeout = min(timeout, limit)
        initial, cursor = self._watch_start(route, matches)
        self.record(200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True
        epoch, deadline = self._epoch, time.monotonic() + timeout
        for event_type, obj in initial:
            self.write_event(event_type, obj)
        if self.interrupt_watch(route):
            return
        while not context.watch_cancelled(epoch) and (remaining := deadline - time.monotonic()) > 0:
            try:
                events = context.registry.store.events_after(cursor)
            except ApiError as err:
                self.write_event("ERROR", err.status)
                break
            for event in events:
                cursor = event.rv
                if (shown := _as_seen(event, route, matches)) is not None:
                    self.write_event(*shown)
            if not events:
                context.registry.store.wait(cursor, remaining, lambda: context.watch_cancelled(epoch))
        if not context.watch_cancelled(epoch) and self._query.get("allowWatchBookmarks") == "true":
            # Like the API server's watch cache: a bookmark as the timeout ends the watch, so the
            # client resumes from the newest resourceVersion even when none of its objects changed.
            self.write_event("BOOKMARK", {"kind": route.kind.kind, "metadata": {"resourceVersion": str(cursor)}})
        self.wfile.write(b"0\r\n\r\n")

    def _watch_start(self, route: Route, matches: Matcher) -> tuple[list[tuple[str, JSON]], int]:
        """Synthetic ADDED events for the current state when no resourceVersion (or "0") was asked
        for."""
        text = self._query.get("resourceVersion", "")
        if text in ("", "0"):
            listed = self.server.context.registry.list_collection(route.kind, route.namespace, matches)
            return [("ADDED", item) for item in listed["items"]], int(listed["metadata"]["resourceVersion"])
        if not text.isdigit():
            raise bad_request(f'invalid resource version "{text}"')
        return [], int(text)

    def write_event(self, event_type: str, obj: JSON) -> None:
        self.write_chunk(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")


def _as_seen(event: Event, route: Route, matches: Matcher) -> tuple[str, JSON] | None:
    """How a watcher with this route and selector sees `event`, if at all (objects entering/leaving
    the selection)."""
    if event.kind is not route.kind:
        return None
    if route.namespace is not None and event.obj["metadata"].get("namespace") != route.namespace:
        return None
    now_selected = matches(event.obj)
    before_selected = event.old is not None and matches(event.old)
    if event.type != "MODIFIED":
        return (event.type, event.obj) if now_selected else None
    if now_selected:
        return ("MODIFIED" if before_selected else "ADDED"), event.obj
    return ("DELETED", event.obj) if before_selected else None


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as err:
        raise bad_request(f"couldn't get version/kind; json parse error: {err}") from err


def _float(text: str | None, default: float) -> float:
    try:
        return float(text) if text else default
    except ValueError as err:
        raise bad_request(f'invalid timeoutSeconds "{text}"') from err
