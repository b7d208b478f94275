"""A live shop for ``lanehouse up``: the demo's sessions, played in real time.

Why: ``lanehouse up`` runs the pipeline continuously, and its Spark assets clean today's
partition. The producers must therefore send what the cleaning rules expect (the demo's clicks
and orders, :mod:`orchestration.demo.events`), stamped with the moment they are sent, with a
few malformed records so the quarantine has something to show.

Sessions start at a steady pace; each session's events are sent when their moment comes, so
one user's clicks are minutes apart as in the batch demo. :class:`LiveShop` only schedules (no
clock, no I/O) so it can be tested with a made-up clock; :func:`run_live_shop` sends.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from math import floor
from typing import Final

from orchestration.demo.events import (
    MAX_USERS,
    DefectKind,
    DemoRecord,
    Event,
    Stream,
    defect_turns,
    product_prices,
    session_events,
    to_record,
)
from orchestration.demo.producers import RecordSink

#: Clicks per session on average (views, carts, purchases), measured over 100,000 sessions of
#: :func:`orchestration.demo.events.session_events`; it turns a click rate into a session rate.
CLICKS_PER_SESSION: Final = 5.7
#: The shop opens in full swing: sessions start this long before it (longer than any session
#: lasts), and only their events from the opening on are sent, so orders flow from the start.
WARM_UP_MS: Final = 45 * 60_000
#: How many users a new session tries before it is skipped because all of them are mid-session.
_USER_TRIES: Final = 20


@dataclass(order=True, frozen=True, slots=True)
class _Pending:
    timestamp_ms: int
    seq: int
    event: Event = field(compare=False)


class LiveShop:
    """Which demo records are due by a given time, for sessions started at a steady pace.

    Sessions are already under way when the shop opens at ``start_ms`` (see ``WARM_UP_MS``).
    A user never has two sessions at once (a new session picks another user, or is skipped when
    every user tried is busy). Ids carry ``start_ms`` so a restarted shop never repeats one.
    Every ``1 / malformed_fraction``-th record of a stream is corrupted, the defect kinds taken
    in turn, so the malformed share is exact rather than random: after ``n`` records of a
    stream, exactly ``floor(n * malformed_fraction)`` are malformed, counted in integers (the
    fraction as the decimal it was written as, so 0.1 is one in ten, not 0.1000000000000000055).
    """

    def __init__(
        self,
        *,
        clicks_per_second: float,
        start_ms: int,
        users: int = 5_000,
        malformed_fraction: float = 0.02,
        seed: int = 0,
    ) -> None:
        if not clicks_per_second > 0:
            raise ValueError(f"clicks_per_second must be positive, got {clicks_per_second!r}")
        if not 1 <= users <= MAX_USERS:
            raise ValueError(f"users must be in 1..{MAX_USERS}, got {users!r}")
        if not 0 <= malformed_fraction <= 1:
            raise ValueError(f"malformed_fraction must be in [0, 1], got {malformed_fraction!r}")
        self._rng = random.Random(seed)
        self._prices = product_prices(self._rng)
        self._users = users
        self._malformed = Fraction(repr(malformed_fraction))
        self._defects = defect_turns()
        self._records: dict[Stream, int] = {"clicks": 0, "orders": 0}
        self._session_every_ms = 1000 * CLICKS_PER_SESSION / clicks_per_second
        self._opened_ms = start_ms
        self._next_session_ms = float(start_ms - WARM_UP_MS)
        self._busy_until: dict[str, int] = {}
        self._pending: list[_Pending] = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self._run = f"{start_ms:x}"
        self.skipped_sessions = 0

    def next_due_ms(self) -> int:
        """The earliest moment at which :meth:`due` has something new."""
        upcoming = int(self._next_session_ms)
        if self._pending:
            upcoming = min(upcoming, self._pending[0].timestamp_ms)
        return upcoming

    def due(self, now_ms: int) -> list[DemoRecord]:
        """Every record timestamped at or before ``now_ms`` not returned before, in time order."""
        while self._next_session_ms <= now_ms:
            self._start_session(int(self._next_session_ms))
            self._next_session_ms += self._session_every_ms
        records = []
        while self._pending and self._pending[0].timestamp_ms <= now_ms:
            event = heapq.heappop(self._pending).event
            if event.timestamp_ms >= self._opened_ms:
                records.append(to_record(self._rng, event, self._defect(event.stream)))
        return records

    def _start_session(self, start_ms: int) -> None:
        for _ in range(_USER_TRIES):
            user_id = f"u{self._rng.randrange(self._users):04d}"
            if self._busy_until.get(user_id, 0) < start_ms:
                break
        else:
            self.skipped_sessions += 1
            return
        events = session_events(self._rng, user_id, start_ms, self._prices, self._next_id)
        self._busy_until[user_id] = events[-1].timestamp_ms
        for event in events:
            heapq.heappush(self._pending, _Pending(event.timestamp_ms, next(self._seq), event))

    def _next_id(self, kind: str) -> str:
        return f"{kind}-live-{self._run}-{next(self._ids):07d}"

    def _defect(self, stream: Stream) -> DefectKind | None:
        before = self._records[stream]
        self._records[stream] = after = before + 1
        if floor(after * self._malformed) == floor(before * self._malformed):
            return None
        return next(self._defects[stream])


def run_live_shop(
    shop: LiveShop,
    sinks: dict[Stream, RecordSink],
    stop: threading.Event,
    *,
    on_sent: Callable[[Counter[str]], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> Counter[str]:
    """Send due records to the sink of their stream until ``stop`` is set; count what was sent.

    A stream without a sink is generated but not sent (a platform may run only one of the two
    workloads). Records are sent as their time comes; the sinks are flushed before returning.
    """
    sent: Counter[str] = Counter()
    while not stop.is_set():
        for record in shop.due(int(clock() * 1000)):
            sink = sinks.get(record.stream)
            if sink is not None:
                sink.send(record)
                sent[record.stream] += 1
                sent["malformed"] += not record.valid
        if on_sent is not None:
            on_sent(sent)
        for sink in sinks.values():
            sink.poll()
        stop.wait(max(0.0, min(1.0, shop.next_due_ms() / 1000 - clock())))
    for sink in sinks.values():
        sink.close()
    return sent
