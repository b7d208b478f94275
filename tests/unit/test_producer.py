"""AckedProducer against a scripted client: order under a full queue, refusals (permanent or
not), close."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from consumers import DeliveryError
from consumers.backends.base import delivery_failure
from consumers.engine.producer import AckedProducer, Done
from tests.helpers import until

pytestmark = pytest.mark.unit


class ScriptedClient:
    """Refuses with BufferError while ``full``; refuses for good values in ``bad``; raises the
    ``DeliveryError`` of a value in ``refusals``; fails the delivery of a value in ``failures``
    with its error."""

    def __init__(self) -> None:
        self.full = False
        self.bad: set[bytes] = set()
        self.refusals: dict[bytes, DeliveryError] = {}
        self.failures: dict[bytes, object] = {}
        self.produced: list[bytes] = []
        self._callbacks: list[Any] = []
        self._lock = threading.Lock()

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        if self.full:
            raise BufferError("queue full")
        if value in self.bad:
            raise ValueError("message too large")
        if value in self.refusals:
            raise self.refusals[value]
        with self._lock:
            self.produced.append(value)
            self._callbacks.append((kw["on_delivery"], self.failures.get(value)))

    def poll(self, timeout: float = -1) -> int:
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback, error in callbacks:
            callback(error, None)
        if not callbacks and timeout > 0:
            threading.Event().wait(min(timeout, 0.01))
        return len(callbacks)

    def flush(self, timeout: float = -1) -> int:
        self.poll(0)
        return 0

    def close(self) -> None:
        return None

    def delivery_error(self, error: object) -> DeliveryError:
        return delivery_failure(error)


def appends(done: list[tuple[bytes, DeliveryError | None]], value: bytes) -> Done:
    """An ``on_done`` that appends ``(value, error)`` to ``done``."""
    return lambda error: done.append((value, error))


def stores(done: dict[bytes, DeliveryError | None], value: bytes) -> Done:
    """An ``on_done`` that sets ``done[value]`` to the error (None once delivered)."""
    return lambda error: done.update({value: error})


async def test_records_refused_for_a_full_queue_keep_their_order_and_count_in_flight() -> None:
    client = ScriptedClient()
    producer = AckedProducer("p", lambda: client, asyncio.get_running_loop())
    done: list[tuple[bytes, DeliveryError | None]] = []
    try:
        client.full = True
        for value in (b"1", b"2", b"3"):
            producer.send("t", None, value, None, appends(done, value))
        assert producer.in_flight == 3 and client.produced == []
        client.full = False
        await until(lambda: len(done) == 3)
        assert client.produced == [b"1", b"2", b"3"]
        assert done == [(b"1", None), (b"2", None), (b"3", None)]
        assert producer.in_flight == 0
    finally:
        producer.close()


async def test_a_refused_record_fails_through_its_callback_and_the_rest_go_on() -> None:
    client = ScriptedClient()
    client.bad = {b"huge"}
    producer = AckedProducer("p", lambda: client, asyncio.get_running_loop())
    done: dict[bytes, DeliveryError | None] = {}
    try:
        for value in (b"a", b"huge", b"b"):
            producer.send("t", None, value, None, stores(done, value))
        await until(lambda: len(done) == 3)
        assert done[b"a"] is None and done[b"b"] is None
        huge = done[b"huge"]
        assert huge is not None and huge.reason == "ValueError: message too large"
        assert huge.permanent, "the same record is refused again: sending it again cannot help"
        assert client.produced == [b"a", b"b"] and producer.in_flight == 0
    finally:
        producer.close()


async def test_a_failure_says_whether_sending_again_can_help() -> None:
    """The client's ``delivery_error`` decides: here a ``DeliveryError`` keeps its word, raised
    or delivered, and any other delivery error (the in-memory broker's text) is transient."""
    client = ScriptedClient()
    client.refusals = {b"unknown": DeliveryError("no leader yet", permanent=False)}
    client.failures = {
        b"too-large": DeliveryError("MSG_SIZE_TOO_LARGE", permanent=True),
        b"away": "topic unavailable",
    }
    producer = AckedProducer("p", lambda: client, asyncio.get_running_loop())
    done: dict[bytes, DeliveryError | None] = {}
    try:
        for value in (b"unknown", b"too-large", b"away"):
            producer.send("t", None, value, None, stores(done, value))
        await until(lambda: len(done) == 3)
        told = {v: (e.reason, e.permanent) for v, e in done.items() if e is not None}
        assert told == {
            b"unknown": ("no leader yet", False),
            b"too-large": ("MSG_SIZE_TOO_LARGE", True),
            b"away": ("topic unavailable", False),
        }
    finally:
        producer.close()


async def test_records_still_waiting_at_close_fail_instead_of_reaching_a_closed_client() -> None:
    client = ScriptedClient()
    client.full = True
    producer = AckedProducer("p", lambda: client, asyncio.get_running_loop())
    done: list[DeliveryError | None] = []
    producer.send("t", None, b"late", None, done.append)
    producer.close()
    client.full = False
    await until(lambda: [str(e) for e in done] == ["the producer is closed"])
    assert client.produced == [] and producer.in_flight == 0
