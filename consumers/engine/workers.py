"""A worker: one task holding one permit, running lane heads until the lanes run dry; and the
watchdog that cancels a worker whose call runs past the timeout."""

from __future__ import annotations

import asyncio

from consumers.clock import Clock
from consumers.engine.tracked import TrackedRecord


class Worker:
    """A task holding one permit; ``record`` is what it runs now (read by the watchdog)."""

    __slots__ = ("record", "started", "task", "timed_out")

    def __init__(self) -> None:
        self.task: asyncio.Task[None]
        self.record: TrackedRecord | None = None
        self.started = 0.0
        self.timed_out = False

    def clear_timeout(self) -> None:
        """Forget a watchdog cancellation once it has been turned into a timeout failure."""
        self.timed_out = False
        self.task.uncancel()


async def watchdog(workers: set[Worker], clock: Clock, limit: float) -> None:
    """Cancel handler calls that run past ``limit`` seconds (checked a few times per limit); the
    caller turns the cancellation into a timeout failure."""
    tick = min(max(limit / 8, 0.001), 0.5)
    while True:
        await clock.sleep(tick)
        now = clock.now()
        for worker in list(workers):
            if worker.record is not None and not worker.timed_out and now - worker.started >= limit:
                worker.timed_out = True
                worker.task.cancel()
