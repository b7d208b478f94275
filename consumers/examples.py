"""Example handlers for the demo, the sample workloads and the tests.

``enrich`` parses the sample stream's JSON and checks per-key order on the way: the sample
producer numbers each key's records 0, 1, 2, ... so any reordering shows up as a violation.
"""

from __future__ import annotations

import asyncio
import threading
import time

from consumers.record import Record


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


async def slow(record: Record) -> None:
    """A 20 ms downstream call (what the benchmarks model)."""
    value = record.json()
    ORDER.observe(record.key, value["seq"])
    await asyncio.sleep(0.020)
