"""Example handlers for the demo, the sample workloads and the tests.

``enrich`` parses the sample stream's JSON and checks per-key order on the way: the sample
producer numbers each key's records 0, 1, 2, ... so any reordering shows up as a violation.
``land_in_key_order`` is the landing workloads' handler: it checks order by record time and
lands everything.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import Counter

from consumers import Record


class OrderCheck:
    """Counts handled records and per-key sequence violations (thread-safe for sync handlers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last: dict[bytes | None, int] = {}
        self.handled = 0
        self.violations: list[tuple[bytes | None, int, int]] = []
        self.first_at = 0.0
        self.last_at = 0.0

    def observe(self, key: bytes | None, seq: int) -> None:
        with self._lock:
            self.last_at = time.perf_counter()
            if not self.handled:
                self.first_at = self.last_at
            self.handled += 1
            previous = self.last.get(key, -1)
            if seq != previous + 1:
                self.violations.append((key, previous, seq))
            self.last[key] = seq

    def reset(self) -> None:
        with self._lock:
            self.last.clear()
            self.handled = 0
            self.violations.clear()
            self.first_at = self.last_at = 0.0

    @property
    def per_second(self) -> float:
        """Records per second from the first to the last handled record."""
        span = self.last_at - self.first_at
        return self.handled / span if span > 0 else 0.0


ORDER = OrderCheck()


async def enrich(record: Record) -> None:
    """Parse the event and check its key's order (landing rows come with the landing issue)."""
    value = record.json()
    ORDER.observe(record.key, value["seq"])


class TimeOrderCheck:
    """Per topic: records handled, keys seen, and records older than their key's previous one
    (loop thread only: async handlers)."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, bytes | None], int] = {}
        self.handled: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()

    def observe(self, topic: str, key: bytes | None, timestamp: int) -> None:
        self.handled[topic] += 1
        if timestamp < self.last.get((topic, key), timestamp):
            self.violations[topic] += 1
        self.last[(topic, key)] = timestamp

    def keys(self, topic: str) -> int:
        return sum(1 for seen, _ in self.last if seen == topic)

    def reset(self) -> None:
        self.last.clear()
        self.handled.clear()
        self.violations.clear()


TIME_ORDER = TimeOrderCheck()


async def land_in_key_order(record: Record) -> None:
    """The demo's landing handler: checks that each key's records arrive in time order (the
    demo producers send them so) and lands every record as it is, malformed ones included:
    cleaning them is Spark's job, which quarantines them with a reason."""
    TIME_ORDER.observe(record.topic, record.key, record.timestamp)


async def slow(record: Record) -> None:
    """A 20 ms downstream call (what the benchmarks model)."""
    value = record.json()
    ORDER.observe(record.key, value["seq"])
    await asyncio.sleep(0.020)


#: The correlation id of the record being handled (set by :class:`CorrelationId`).
CORRELATION_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "correlation_id", default=None
)


class CorrelationId:
    """Interceptor: lifts the ``correlation-id`` header into :data:`CORRELATION_ID` for the
    duration of the handler call (``interceptors: [consumers.dev.examples:CorrelationId]``)."""

    def __init__(self) -> None:
        self._tokens: dict[Record, contextvars.Token[str | None]] = {}

    def before(self, record: Record) -> None:
        value = record.header("correlation-id")
        self._tokens[record] = CORRELATION_ID.set(value.decode() if value else None)

    def after(self, record: Record, outcome: object, error: object) -> None:
        token = self._tokens.pop(record, None)
        if token is not None:
            CORRELATION_ID.reset(token)
