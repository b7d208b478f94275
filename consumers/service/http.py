"""The consumer's HTTP server: ``/metrics``, ``/healthz`` and ``/tap/<workload>``.

    serve(app, port) → Server   a ThreadingHTTPServer (one daemon thread per request) running
                                in a background thread; ``Server.shutdown()`` stops accepting,
                                ends every open tap stream within ~0.25 s, and returns.

Routes (GET only):

``/metrics``          Prometheus text from :class:`consumers.service.metrics.EngineCollector`.
``/healthz``          200 when every workload is ready (see :func:`health`), else 503; JSON.
``/tap/<workload>``   server-sent events of handled records (see :mod:`consumers.engine.tap`): one
                      ``data: <json>`` per record; ``event: dropped`` with ``{"dropped": N}``
                      where N events did not fit this client's queue; ``: keepalive`` every
                      second when idle. ``?limit=N`` ends the stream after N records. Open
                      on a loopback bind, else only with a bearer token
                      (:mod:`consumers.service.tap_access`).

A tap stream never makes the engine wait: a client that stops reading fills its socket, then its
queue, and from then on its events are dropped and counted. The socket's send buffer is capped
(``TAP_SEND_BUFFER``) so a stalled client costs bounded memory and its drops show up promptly
instead of hiding in kernel buffers. Writes use a short socket timeout so a blocked stream still
notices shutdown.
"""

from __future__ import annotations

import json
import logging
import queue
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from pydantic import SecretStr

from consumers.config.names import NAME
from consumers.errors import LanehouseError
from consumers.service.health import DEFAULT_STALL_SECONDS, health
from consumers.service.metrics import EngineCollector
from consumers.service.tap_access import TapAccess

if TYPE_CHECKING:
    from consumers.engine.tap import Subscription, Tap
    from consumers.service.app import ConsumerApp

log = logging.getLogger("lanehouse.http")

#: How often a tap stream checks for shutdown and a vanished client.
POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 1.0
#: Events written in one send when a client keeps up.
BATCH_EVENTS = 200
#: Kernel send buffer of a tap connection (Linux doubles it).
TAP_SEND_BUFFER = 32 * 1024


# ---------------------------------------------------------------------------------- server


class _HTTPServer(ThreadingHTTPServer):
    """The stdlib server plus what the handlers need (daemon request threads)."""

    daemon_threads = True
    #: The stdlib's 5 drops connections when a scrape, probes and tap clients arrive together
    #: (the client retries its SYN a second later).
    request_queue_size = 128

    def __init__(
        self,
        addr: tuple[str, int],
        app: ConsumerApp,
        stall_seconds: float,
        tap_token: SecretStr | None,
    ) -> None:
        self.app = app
        self.stall_seconds = stall_seconds
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(app))
        self.closing = threading.Event()
        self.last_progress: dict[str, tuple[int, float]] = {}
        self.health_lock = threading.Lock()
        self.streams = 0
        self.streams_changed = threading.Condition()
        super().__init__(addr, _Handler)
        # The address really bound (numeric, whatever name was asked for) decides the tap.
        self.tap_access = TapAccess(str(self.server_address[0]), tap_token)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("error serving %s", client_address)


class Server:
    """A running server; ``shutdown()`` stops it and ends every open tap stream."""

    def __init__(self, httpd: _HTTPServer) -> None:
        self._httpd = httpd
        self.addr: str = httpd.server_address[0]  # type: ignore[assignment]
        self.port: int = httpd.server_address[1]
        self.tap: TapAccess = httpd.tap_access
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="lh-http", daemon=True
        )
        self._thread.start()
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}"

    @property
    def open_streams(self) -> int:
        return self._httpd.streams

    def shutdown(self, timeout: float = 2.0) -> None:
        """Stop accepting, end open tap streams (they notice within ~0.25 s), close the socket."""
        if self._stopped:
            return
        self._stopped = True
        httpd = self._httpd
        httpd.closing.set()
        httpd.shutdown()
        httpd.server_close()
        self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        with httpd.streams_changed:
            while httpd.streams and (left := deadline - time.monotonic()) > 0:
                httpd.streams_changed.wait(left)
        if httpd.streams:
            log.warning("%d tap streams still open %.1f s after shutdown", httpd.streams, timeout)


def serve(
    app: ConsumerApp,
    port: int,
    addr: str = "127.0.0.1",
    stall_seconds: float = DEFAULT_STALL_SECONDS,
    tap_token: SecretStr | None = None,
) -> Server:
    """Serve ``/metrics``, ``/healthz`` and ``/tap/<workload>`` for ``app`` (``port=0``: any).

    ``tap_token`` (:func:`consumers.service.tap_access.token_from_env`) opens the tap when
    ``addr`` is beyond loopback; without it the tap is off there.
    """
    server = Server(_HTTPServer((addr, port), app, stall_seconds, tap_token))
    log.info("serving %s: %s", server.url, server.tap.describe())
    return server


# ---------------------------------------------------------------------------------- routes


class _ClientGone(LanehouseError):
    """The tap client disconnected or the server is shutting down."""


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    server_version = "lanehouse"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif url.path == "/healthz":
            self._healthz()
        elif url.path.startswith("/tap/"):
            self._tap(url.path.removeprefix("/tap/"), url.query)
        else:
            self._text(404, "not found: try /metrics, /healthz or /tap/<workload>")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _reply(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._reply(status, (message + "\n").encode(), "text/plain; charset=utf-8", headers)

    def _healthz(self) -> None:
        srv = self.server
        with srv.health_lock:
            result = health(srv.app, srv.last_progress, srv.app.clock.now(), srv.stall_seconds)
        body = json.dumps(result.body(), sort_keys=True).encode() + b"\n"
        self._reply(200 if result.ok else 503, body, "application/json")

    def _tap(self, name: str, query: str) -> None:
        # Before any lookup: without the key, not even which workloads exist.
        refusal = self.server.tap_access.check(self.headers.get("Authorization"))
        if refusal is not None:
            self._text(refusal.status, refusal.message, refusal.headers)
            return
        app = self.server.app
        if not NAME.fullmatch(name):  # as the spec allows: nothing else reaches a lookup
            self._text(404, "not a workload name: use 1-64 of a-z 0-9 _ - (starting a-z 0-9)")
            return
        # Workloads, not only runners: the server starts before the app runs.
        known = {w.settings.name for w in app.workloads}
        if name not in known:
            self._text(404, f"unknown workload {name!r}; this process runs {sorted(known)}")
            return
        tap: Tap | None = getattr(app, "tap", None)
        if tap is None:
            self._text(404, "this process has no tap")
            return
        limit_values = parse_qs(query).get("limit", [])
        try:
            limit = int(limit_values[-1]) if limit_values else 0
        except ValueError:
            limit = -1
        if limit < 0:
            self._text(400, "limit must be a non-negative integer")
            return
        self._stream(tap, name, limit)

    def _stream(self, tap: Tap, name: str, limit: int) -> None:
        srv = self.server
        with srv.streams_changed:
            srv.streams += 1
        sub = tap.subscribe(name)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Accel-Buffering", "no")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            sock = self.connection
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TAP_SEND_BUFFER)
            sock.settimeout(POLL_SECONDS)
            self._send(b": subscribed\n\n")
            _Stream(self, sub, limit).run()
        except _ClientGone:
            pass
        except OSError as exc:  # reset, broken pipe: the client went away
            log.debug("tap client %s gone: %s", self.address_string(), exc)
        finally:
            tap.unsubscribe(sub)
            with srv.streams_changed:
                srv.streams -= 1
                srv.streams_changed.notify_all()

    def _send(self, data: bytes) -> None:
        """Write all of ``data``, waiting for a slow client but not past shutdown."""
        sock = self.connection
        view = memoryview(data)
        while view:
            if self.server.closing.is_set():
                raise _ClientGone
            try:
                sent = sock.send(view)
            except TimeoutError:  # the client is not reading; nothing was sent
                continue
            view = view[sent:]

    def peer_closed(self) -> bool:
        sock = self.connection
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        try:
            return bool(sock.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True


class _Stream:
    """The loop of one tap stream: queue → SSE frames, with drops, keepalives and a limit."""

    def __init__(self, handler: _Handler, sub: Subscription, limit: int) -> None:
        self.handler = handler
        self.sub = sub
        self.limit = limit
        self.sent = 0
        self.reported = 0  # drops already told to the client
        self.last_write = 0.0

    def run(self) -> None:
        handler = self.handler
        closing = handler.server.closing
        get = self.sub.queue.get
        self.last_write = time.monotonic()
        while not closing.is_set():
            try:
                item = get(timeout=POLL_SECONDS)
            except queue.Empty:
                item = None
            if item is None:
                if self._idle():
                    return
                continue
            frames = [self._frame(item)]
            while len(frames) < BATCH_EVENTS and not self._done():
                try:
                    frames.append(self._frame(self.sub.queue.get_nowait()))
                except queue.Empty:
                    break
            handler._send(b"".join(frames))
            self.last_write = time.monotonic()
            if self._done():
                return

    def _idle(self) -> bool:
        """Nothing queued: report trailing drops, keep the connection alive; True if gone."""
        now = time.monotonic()
        if self.sub.dropped > self.reported:  # dropped after everything queued was sent
            self.handler._send(self._dropped(self.sub.dropped))
        elif now - self.last_write >= KEEPALIVE_SECONDS:
            self.handler._send(b": keepalive\n\n")
        else:
            return self.handler.peer_closed()
        self.last_write = now
        return False

    def _done(self) -> bool:
        return bool(self.limit) and self.sent >= self.limit

    def _frame(self, item: tuple[int, dict[str, Any]]) -> bytes:
        dropped_before, event = item
        data = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        self.sent += 1
        if dropped_before > self.reported:
            return self._dropped(dropped_before) + data
        return data

    def _dropped(self, total: int) -> bytes:
        count = total - self.reported
        self.reported = total
        return b'event: dropped\ndata: {"dropped":%d}\n\n' % count
