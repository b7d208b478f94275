"""The consumer's HTTP server over real sockets: /metrics, /healthz, /tap/<workload> (SSE).

The engine runs on the in-memory broker in the test's event loop; every HTTP client call runs in
a thread (``asyncio.to_thread``) so the loop keeps handling records while a client waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

import consumers.service.http as lh_http
from consumers import ConsumerApp, Record, RunnerSettings, Workload
from consumers.engine.tap import Subscription, Tap
from consumers.service.health import health
from consumers.service.http import Server, serve
from tests.backends import MemoryBackend
from tests.helpers import until, wait_until

pytestmark = pytest.mark.integration

NAME = "w"
Handler = Callable[[Record], Awaitable[None]]


# ---------------------------------------------------------------------------------- helpers


def make_app(
    backend: MemoryBackend,
    topic: str,
    group: str,
    handler: Handler | None = None,
    names: tuple[str, ...] = (NAME,),
    **settings: Any,
) -> ConsumerApp:
    """An app of ``names`` workloads on ``topic``, each running ``handler`` (default: nothing)."""

    async def nothing(rec: Record) -> None:
        return None

    defaults: dict[str, Any] = {"commit_interval": 0.05, "drain_timeout": 5.0}
    app = ConsumerApp(
        [
            Workload(
                RunnerSettings(name=name, **{**defaults, **settings}),
                handler or nothing,
                [topic],
                backend.factory(group),
            )
            for name in names
        ]
    )
    return app


def produce(backend: MemoryBackend, topic: str, count: int, keys: int = 50, pad: int = 0) -> None:
    for i in range(count):
        key = f"k{i % keys}"
        value = json.dumps({"key": key, "i": i, "pad": "x" * pad}).encode()
        backend.broker.produce(topic, value, key.encode())


@contextlib.asynccontextmanager
async def running(app: ConsumerApp) -> AsyncIterator[asyncio.Future[Any]]:
    task = asyncio.ensure_future(app.run())
    await until_in_thread(lambda: len(app.runners) == len(app.workloads) or task.done())
    try:
        yield task
    finally:
        app.request_stop()
        await asyncio.wait_for(task, 30)


@contextlib.contextmanager
def serving(app: ConsumerApp, **kwargs: Any) -> Iterator[Server]:
    server = serve(app, 0, **kwargs)
    try:
        yield server
    finally:
        server.shutdown()


async def until_in_thread(predicate: Callable[[], object], within: float = 20.0) -> None:
    # The predicates here ask the server over HTTP, which needs the loop: they must not run on it.
    await until(predicate, within, in_thread=True)


def get(server: Server, path: str) -> tuple[int, bytes, dict[str, str]]:
    """A raw GET (http.client sends the path exactly as given: no dot-segment cleanup)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.headers)
    finally:
        conn.close()


def get_json(server: Server, path: str) -> tuple[int, Any]:
    status, body, _ = get(server, path)
    return status, json.loads(body)


class SseClient:
    """Reads an SSE stream from a raw socket, so a test controls exactly when it reads."""

    def __init__(self, port: int, path: str, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the TCP window is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
        self.rcvbuf = rcvbuf or 65536
        self.buf = b""
        self.head: bytes | None = None
        self.events: list[dict[str, Any]] = []
        self.dropped: list[int] = []
        self.comments: list[str] = []
        self.closed = False

    @property
    def status(self) -> int:
        assert self.head is not None
        return int(self.head.split(b" ", 2)[1])

    @property
    def accounted(self) -> int:
        """Events received plus events the server said it dropped."""
        return len(self.events) + sum(self.dropped)

    def read_until(self, predicate: Callable[[SseClient], object], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if self.closed:
                raise AssertionError(f"stream closed first; got {len(self.events)} events")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"condition not met within {timeout} s: {self.summary()}")
            self.sock.settimeout(min(left, 0.5))
            try:
                chunk = self.sock.recv(self.rcvbuf)
            except TimeoutError:
                continue
            if not chunk:
                self.closed = True
            self._parse(chunk)

    def read_to_end(self, timeout: float = 10.0) -> None:
        if not self.closed:
            self.read_until(lambda c: c.closed, timeout)

    def _parse(self, chunk: bytes) -> None:
        self.buf += chunk
        if self.head is None:
            if b"\r\n\r\n" not in self.buf:
                return
            self.head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        *frames, self.buf = self.buf.split(b"\n\n")
        for frame in frames:
            kind = "message"
            for line in frame.decode().split("\n"):
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                elif line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    data = json.loads(line.removeprefix("data: "))
                    if kind == "dropped":
                        self.dropped.append(data["dropped"])
                    else:
                        assert kind == "message", frame
                        self.events.append(data)
                else:
                    raise AssertionError(f"not an SSE line: {line!r}")

    def summary(self) -> str:
        return f"{len(self.events)} events, dropped {self.dropped}, closed={self.closed}"

    def close(self) -> None:
        self.sock.close()


def assert_well_formed(event: dict[str, Any]) -> None:
    assert set(event) == {
        "workload",
        "topic",
        "partition",
        "offset",
        "key",
        "outcome",
        "value_preview",
        "value_bytes",
        "ts",
    }
    assert event["workload"] == NAME
    assert isinstance(event["outcome"], str) and event["outcome"]
    value = json.loads(event["value_preview"])  # small values: the preview is the whole value
    assert value["key"] == event["key"]
    assert event["value_bytes"] == len(event["value_preview"].encode())


# ---------------------------------------------------------------------------------- routes


async def test_a_stop_requested_before_run_starts_is_honoured() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    produce(backend, topic, 10)
    app = make_app(backend, topic, "g-early")
    app.request_stop()
    summaries = await asyncio.wait_for(app.run(), 30)
    assert [summary.name for summary in summaries] == [NAME]


async def test_metrics_and_healthz_before_and_after_assignment() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(2)
    produce(backend, topic, 500)
    app = make_app(backend, topic, "g-health")
    with serving(app) as server:
        status, body = await asyncio.to_thread(get_json, server, "/healthz")
        assert status == 503
        assert body == {
            "status": "unavailable",
            "workloads": {NAME: {"ready": False, "reason": "not started"}},
        }
        async with running(app):
            await until_in_thread(lambda: app.runners[NAME].counters.completed == 500)
            status, body = await asyncio.to_thread(get_json, server, "/healthz")
            assert status == 200, body
            assert body["status"] == "ok"
            assert body["workloads"][NAME]["partitions"] == 2
            status, text, headers = await asyncio.to_thread(get, server, "/metrics")
            assert status == 200
            assert headers["Content-Type"] == CONTENT_TYPE_LATEST
            assert f'lanehouse_records_consumed_total{{workload="{NAME}"}} 500.0' in text.decode()
            assert f'lanehouse_tap_dropped_total{{workload="{NAME}"}} 0.0' in text.decode()


async def test_healthz_reports_a_stall_and_recovers() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(2)
    produce(backend, topic, 200)
    release = asyncio.Event()

    async def handler(rec: Record) -> None:
        if rec.offset >= 50:
            await release.wait()

    app = make_app(backend, topic, "g-stall", handler, timeout=60.0, ordering="partition")
    with serving(app, stall_seconds=0.3) as server:

        def stalled() -> bool:
            status, body = get_json(server, "/healthz")
            reason = body["workloads"][NAME].get("reason") or ""
            return status == 503 and reason.startswith("no progress for ")

        async with running(app):
            await until_in_thread(stalled, 10)
            release.set()
            await until_in_thread(lambda: app.runners[NAME].counters.completed == 200)
            status, body = await asyncio.to_thread(get_json, server, "/healthz")
            assert status == 200, body


async def test_healthz_names_a_workload_without_partitions() -> None:
    """Two members of one group on a one-partition topic: one of them is never assigned."""
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    produce(backend, topic, 10)
    app = make_app(backend, topic, "g-shared", names=("a", "b"))
    with serving(app) as server:
        async with running(app):

            def one_unassigned() -> bool:
                status, body = get_json(server, "/healthz")
                reasons = sorted(str(w["reason"]) for w in body["workloads"].values())
                return status == 503 and reasons == ["None", "not assigned"]

            await until_in_thread(one_unassigned, 10)


def test_unknown_routes_and_names_are_404_and_never_looked_up() -> None:
    backend = MemoryBackend()
    app = make_app(backend, backend.make_topic(1), "g-404")
    subscribed: list[str] = []
    real_subscribe = app.tap.subscribe

    def subscribe(workload: str) -> Subscription:
        subscribed.append(workload)
        return real_subscribe(workload)

    app.tap.subscribe = subscribe  # type: ignore[method-assign]
    with serving(app) as server:
        status, body, _ = get(server, "/tap/nope")
        assert status == 404
        assert b"unknown workload 'nope'" in body
        for path in (
            "/tap/../x",
            "/tap/..%2Fx",
            "/tap/%2e%2e",
            "/tap/W",
            "/tap/" + "a" * 65,
            "/tap/w/../w",
            "/tap/",
            "/tap/-w",
            "/tap/w%00",
        ):
            status, body, _ = get(server, path)
            assert (status, body[:18]) == (404, b"not a workload nam"), path
        assert get(server, "/")[0] == 404
        assert get(server, "/metrics/x")[0] == 404
        assert get(server, "/tap/w?limit=x")[0] == 400
    assert subscribed == []


# ---------------------------------------------------------------------------------- tap


async def test_fast_client_gets_limit_events_in_order_per_partition() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(4)
    produce(backend, topic, 2000)
    app = make_app(backend, topic, "g-fast", ordering="partition")
    with serving(app) as server:
        client = SseClient(server.port, f"/tap/{NAME}?limit=50")
        try:
            await until_in_thread(lambda: app.tap.active(NAME), 5)
            async with running(app):
                await asyncio.to_thread(client.read_to_end)
        finally:
            client.close()
        assert client.status == 200
        assert b"text/event-stream" in (client.head or b"")
        assert len(client.events) == 50, client.summary()
        last: dict[int, int] = {}
        for event in client.events:
            assert_well_formed(event)
            assert event["topic"] == topic
            assert event["offset"] > last.get(event["partition"], -1), client.events
            last[event["partition"]] = event["offset"]
        await until_in_thread(
            lambda: not app.tap.active(NAME), 5
        )  # the limit ended the subscription


async def test_stalled_client_never_slows_the_engine_and_sees_its_drops() -> None:
    """20k records (~3 MB of events) through a tap whose client stops reading after its first
    event: the engine completes them all while the client holds a few, so publishing never
    waits on a client. (How much a tap costs is the benchmarks' business, not a test's.)"""
    count = 20_000
    backend = MemoryBackend()
    topic = backend.make_topic(4)
    produce(backend, topic, count, keys=200, pad=150)
    app = make_app(backend, topic, "g-stalled")
    with serving(app) as server:
        client = SseClient(server.port, f"/tap/{NAME}", rcvbuf=4096)
        try:
            await until_in_thread(lambda: app.tap.active(NAME), 5)
            # The client reads its first event, then stops reading while the engine runs.
            first = asyncio.ensure_future(
                asyncio.to_thread(client.read_until, lambda c: c.events, 20)
            )
            async with running(app):
                await until_in_thread(lambda: app.runners[NAME].counters.completed == count, 60)
                await first
            # Every record completed while the stalled client had read a handful of events:
            # a publish that waited for it could not have got past its socket buffers.
            assert 0 < len(client.events) < 100, client.summary()
            assert client.dropped == []  # not told yet: it has not read further
            assert app.tap.dropped_total(NAME) > 0
            # It resumes: every record is either received or counted as dropped, in order.
            await asyncio.to_thread(client.read_until, lambda c: c.accounted >= count, 30)
            _, text, _ = await asyncio.to_thread(get, server, "/metrics")
        finally:
            client.close()
    assert client.accounted == count, client.summary()
    assert client.dropped and all(n > 0 for n in client.dropped)
    assert sum(client.dropped) == app.tap.dropped_total(NAME)
    assert f'lanehouse_tap_dropped_total{{workload="{NAME}"}} {sum(client.dropped)}.0' in (
        text.decode()
    )
    last: dict[tuple[int, str], int] = {}
    for event in client.events:
        key = (event["partition"], event["key"])
        assert event["offset"] > last.get(key, -1)  # key order survives the gaps
        last[key] = event["offset"]


def test_idle_stream_keepalive_disconnect_and_prompt_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No engine running: the test publishes as the engine would."""
    monkeypatch.setattr(lh_http, "KEEPALIVE_SECONDS", 0.05)
    backend = MemoryBackend()
    app = make_app(backend, backend.make_topic(1), "g-idle")
    tap: Tap = app.tap
    server = serve(app, 0)
    try:
        # A client that disconnects is unsubscribed.
        gone = SseClient(server.port, f"/tap/{NAME}")
        wait_until(lambda: tap.subscribers(NAME) == 1, 5)
        gone.close()
        wait_until(lambda: not tap.active(NAME), 5)

        idle = SseClient(server.port, f"/tap/{NAME}")
        idle.read_until(lambda c: "keepalive" in c.comments, 5)
        stalled = SseClient(server.port, f"/tap/{NAME}", rcvbuf=4096)
        wait_until(lambda: tap.subscribers(NAME) == 2, 5)
        record = Record("t", 0, 0, b"k", b"v" * 200)
        for _ in range(5_000):  # far more than the queue plus the socket buffers hold
            tap.publish(NAME, record, "ok")
        wait_until(lambda: tap.dropped_total(NAME) > 0, 5)
        idle.read_until(lambda c: len(c.events) > 100, 5)  # the idle one keeps up
    finally:
        started = time.monotonic()
        server.shutdown()
        took = time.monotonic() - started
    assert took < 1.0, took
    assert server.open_streams == 0
    assert not tap.active(NAME)
    for client in (idle, stalled):
        client.read_to_end(5)  # both streams end (the stalled one after its buffered bytes)
        client.close()


def test_concurrent_scrapes_while_streaming() -> None:
    """Many request threads at once: /metrics and /healthz stay correct next to a stream."""
    backend = MemoryBackend()
    app = make_app(backend, backend.make_topic(1), "g-many")
    with serving(app) as server:
        stream = SseClient(server.port, f"/tap/{NAME}")
        try:
            wait_until(lambda: app.tap.active(NAME), 5)
            results: list[int] = []
            threads = [
                threading.Thread(target=lambda p=p: results.append(get(server, p)[0]))
                for p in ["/metrics", "/healthz"] * 8
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            assert sorted(results) == [200] * 8 + [503] * 8
        finally:
            stream.close()


# ---------------------------------------------------------------------------------- health()


def fake_app(**runners: SimpleNamespace | None) -> Any:
    return SimpleNamespace(
        workloads=[SimpleNamespace(settings=SimpleNamespace(name=n)) for n in runners],
        runners={n: r for n, r in runners.items() if r is not None},
    )


def fake_runner(completed: int = 0, parts: int = 1, busy: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        counters=SimpleNamespace(completed=completed),
        parts={("t", i): None for i in range(parts)},
        busy=busy,
    )


def reasons(app: Any, memo: dict[str, tuple[int, float]], now: float) -> dict[str, Any]:
    result = health(app, memo, now, stall_seconds=30)
    found = {name: w["reason"] for name, w in result.workloads.items()}
    assert result.ok == all(r is None for r in found.values())
    return found


def test_health_logic() -> None:
    a = fake_runner(completed=5, busy=True)
    app = fake_app(a=a, b=fake_runner(parts=0), c=None)
    memo: dict[str, tuple[int, float]] = {}
    assert reasons(app, memo, 100) == {"a": None, "b": "not assigned", "c": "not started"}
    assert reasons(app, memo, 129) == {"a": None, "b": "not assigned", "c": "not started"}
    assert reasons(app, memo, 142)["a"] == "no progress for 42 s"
    a.counters.completed = 6  # progress: ready again, the stall clock restarts
    assert reasons(app, memo, 150)["a"] is None
    assert reasons(app, memo, 179)["a"] is None
    a.busy = False  # nothing waiting: never a stall, however long
    assert reasons(app, memo, 1000)["a"] is None
    a.busy = True  # work arrives: the stall clock starts now, not at the last completion
    assert reasons(app, memo, 1010)["a"] is None
    assert reasons(app, memo, 1040)["a"] == "no progress for 30 s"


def test_health_needs_at_least_one_workload() -> None:
    assert not health(fake_app(), {}, 0.0).ok
    assert health(fake_app(a=fake_runner()), {}, 0.0).body() == {
        "status": "ok",
        "workloads": {
            "a": {"ready": True, "reason": None, "partitions": 1, "completed": 0, "busy": False}
        },
    }
