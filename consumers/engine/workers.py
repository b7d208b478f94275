"""Small pieces the runner is built from: workers, counters, and clock-driven waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

from consumers.clock import Clock
from consumers.record import Record


class Worker:
    """A task holding one permit; ``record`` is what it runs now (read by the watchdog)."""

    __slots__ = ("record", "started", "task", "timed_out")

    def __init__(self) -> None:
        self.task: asyncio.Task[None]
        self.record: Record | None = None
        self.started = 0.0
        self.timed_out = False

    def clear_timeout(self) -> None:
        """Forget a watchdog cancellation once it has been turned into a timeout failure."""
        self.timed_out = False
        self.task.uncancel()


@dataclass
class WorkloadCounters:
    """Plain integer counters, bumped on the hot path and read by the metrics collector."""

    consumed: int = 0
    completed: int = 0
    failed: int = 0
    timeouts: int = 0
    skipped: int = 0
    client_errors: int = 0
    dropped_unassigned: int = 0
    dropped_on_revoke: int = 0
    late_completions: int = 0
    redelivered: int = 0
    retries: int = 0
    dead_lettered: int = 0
    dead_letter_write_failures: int = 0
    dropped_by_handler: int = 0
    parked: int = 0
    forwarded: int = 0
    superseded: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


async def first_of(*awaitables: Awaitable[Any]) -> None:
    """Return when the first awaitable finishes; cancel the coroutines it started for the others.

    Futures passed in are only watched, never cancelled: they belong to someone else.
    """
    owned = [asyncio.ensure_future(a) for a in awaitables if not isinstance(a, asyncio.Future)]
    watched = [a for a in awaitables if isinstance(a, asyncio.Future)]
    try:
        await asyncio.wait([*owned, *watched], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in owned:
            task.cancel()


async def wait_for(
    clock: Clock, event: asyncio.Event, predicate: Callable[[], bool], limit: float
) -> bool:
    """Wait until ``predicate()`` holds, re-checking whenever ``event`` is set.

    Returns False if ``limit`` seconds of ``clock`` time pass first (a clock-driven deadline,
    which ``asyncio.timeout`` cannot be). The event is cleared
    *before* each check, so a set between the check and the wait is never lost.
    """
    deadline = clock.now() + limit
    while True:
        event.clear()
        if predicate():
            return True
        remaining = deadline - clock.now()
        if remaining <= 0:
            return False
        await first_of(event.wait(), clock.sleep(remaining))
