"""AckedProducer against a scripted client: order under a full queue, refusals, close."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from consumers.engine.producer import AckedProducer
from tests.helpers import until

pytestmark = pytest.mark.unit


class ScriptedClient:
    """Refuses with BufferError while ``full``; refuses for good values in ``bad``."""

    def __init__(self) -> None:
        self.full = False
        self.bad: set[bytes] = set()
        self.produced: list[bytes] = []
        self._callbacks: list[Any] = []
        self._lock = threading.Lock()

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        if self.full:
            raise BufferError("queue full")
        if value in self.bad:
            raise ValueError("message too large")
        with self._lock:
            self.produced.append(value)
            self._callbacks.append(kw["on_delivery"])

    def poll(self, timeout: float = -1) -> int:
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(None, None)
        if not callbacks and timeout > 0:
            threading.Event().wait(min(timeout, 0.01))
        return len(callbacks)

    def flush(self, timeout: float = -1) -> int:
        self.poll(0)
        return 0

    def close(self) -> None:
        return None


async def test_records_refused_for_a_full_queue_keep_their_order_and_count_in_flight() -> None:
    client = ScriptedClient()
    producer = AckedProducer("p", lambda: client, asyncio.get_running_loop())
    done: list[tuple[bytes, str | None]] = []
    try:
        client.full = True
        for value in (b"1", b"2", b"3"):
            producer.send("t", None, value, None, lambda e, v=value: done.append((v, e)))
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
    done: dict[bytes, str | None] = {}
    try:
        for value in (b"a", b"huge", b"b"):
            producer.send("t", None, value, None, lambda e, v=value: done.update({v: e}))
        await until(lambda: len(done) == 3)
        assert done[b"a"] is None and done[b"b"] is None
        assert done[b"huge"] == "ValueError: message too large"
        assert client.produced == [b"a", b"b"] and producer.in_flight == 0
    finally:
        producer.close()


async def test_records_still_waiting_at_close_fail_instead_of_reaching_a_closed_client() -> None:
    client = ScriptedClient()
    client.full = True
    producer = AckedProducer("p", lambda: client, asyncio.get_running_loop())
    done: list[str | None] = []
    producer.send("t", None, b"late", None, done.append)
    producer.close()
    client.full = False
    await until(lambda: done == ["the producer is closed"])
    assert client.produced == [] and producer.in_flight == 0
