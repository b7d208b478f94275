"""Live tap: handled records fanned out to subscribers, without ever slowing the engine.

    engine (loop thread)                         HTTP threads (one per subscriber)
    if tap.active(w): tap.publish(w, rec, out) ──► Subscription.queue ──► sub.queue.get()

``publish`` runs on the event loop for every handled record while someone listens, so it never
blocks and never raises: each subscriber has a bounded queue, and an event that does not fit is
dropped *for that subscriber* and counted in its ``dropped``. Subscribing and unsubscribing
replace an immutable tuple of subscriptions under a lock; ``active`` and ``publish`` only read
the current tuple, so the hot path takes no lock of its own (the queue's internal one is held
for a few instructions).

Queue items are ``(dropped_before, event)``: ``dropped_before`` is the subscriber's ``dropped``
count when the event was queued, so a reader can report a gap exactly where it happened.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from consumers.errors import HandlerError
from consumers.outcomes import Outcome, outcome_name
from consumers.record import Record

#: One handled-record event, JSON-ready (see :meth:`Tap.publish` for the fields).
Event = dict[str, Any]


class Subscription:
    """One live subscriber of one workload's events.

    ``dropped`` is only written by the publishing thread; readers may read it at any time.
    """

    __slots__ = ("dropped", "queue", "workload")

    def __init__(self, workload: str, queue_size: int) -> None:
        self.workload = workload
        self.queue: queue.Queue[tuple[int, Event]] = queue.Queue(maxsize=queue_size)
        self.dropped = 0

    def __repr__(self) -> str:
        return (
            f"Subscription({self.workload!r}, queued={self.queue.qsize()}, dropped={self.dropped})"
        )


class Tap:
    """Fan-out of handled-record events per workload; see the module docstring."""

    def __init__(self, preview_bytes: int = 256, queue_size: int = 1000) -> None:
        if preview_bytes < 0 or queue_size < 1:
            raise ValueError(
                f"preview_bytes must be >= 0 and queue_size >= 1, got {preview_bytes}, {queue_size}"
            )
        self.preview_bytes = preview_bytes
        self.queue_size = queue_size
        #: Subscriptions by workload. Read by the engine's workers to skip a record nobody
        #: listens to without a call; changed only by :meth:`subscribe` and :meth:`unsubscribe`.
        self.by_workload: dict[str, tuple[Subscription, ...]] = {}
        #: Drops of subscriptions that have ended, so ``dropped_total`` never goes down.
        self._retired_dropped: dict[str, int] = {}
        self._lock = threading.Lock()

    def active(self, workload: str) -> bool:
        """Whether anyone listens to ``workload`` (the engine publishes only then)."""
        return workload in self.by_workload

    def handled(
        self, workload: str, record: Record, outcome: Outcome, error: HandlerError | None
    ) -> None:
        """Publish a handled record under its outcome's label if anyone listens (the check is
        all it costs otherwise)."""
        if workload in self.by_workload:
            self.publish(workload, record, outcome_name(outcome, error))

    def publish(self, workload: str, record: Record, outcome: str) -> None:
        """Offer one event to every subscriber of ``workload``; never blocks, never raises."""
        subs = self.by_workload.get(workload)
        if not subs:
            return
        key = record.key
        value = record.value
        event: Event = {
            "workload": workload,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": None if key is None else key.decode("utf-8", "backslashreplace"),
            "outcome": outcome,
            "value_preview": (
                None if value is None else value[: self.preview_bytes].decode("utf-8", "replace")
            ),
            "value_bytes": None if value is None else len(value),
            "ts": int(time.time() * 1000),
        }
        for sub in subs:
            try:
                sub.queue.put_nowait((sub.dropped, event))
            except queue.Full:
                sub.dropped += 1

    def subscribe(self, workload: str) -> Subscription:
        sub = Subscription(workload, self.queue_size)
        with self._lock:
            self.by_workload[workload] = (*self.by_workload.get(workload, ()), sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop delivering to ``sub`` (unknown or already removed subscriptions are ignored)."""
        with self._lock:
            current = self.by_workload.get(sub.workload, ())
            if sub not in current:
                return
            rest = tuple(s for s in current if s is not sub)
            if rest:
                self.by_workload[sub.workload] = rest
            else:
                del self.by_workload[sub.workload]
            retired = self._retired_dropped.get(sub.workload, 0)
            self._retired_dropped[sub.workload] = retired + sub.dropped

    def subscribers(self, workload: str) -> int:
        return len(self.by_workload.get(workload, ()))

    def dropped_total(self, workload: str) -> int:
        """Events dropped for ``workload``'s subscribers, past and present (monotonic)."""
        with self._lock:
            live = self.by_workload.get(workload, ())
            return self._retired_dropped.get(workload, 0) + sum(s.dropped for s in live)
