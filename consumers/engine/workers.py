"""A worker: one task holding one permit, running lane heads until the lanes run dry; and the
watchdog that cancels a worker whose call runs past the timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from consumers.clock import Clock
from consumers.engine.tracked import TrackedRecord
from consumers.execution.executors import PendingCall


class Worker:
    """A task holding one permit; ``record`` is what it runs now (read by the watchdog), and
    ``call`` the thread or process call it awaits, if any."""

    __slots__ = ("call", "record", "started", "task", "timed_out")

    def __init__(self) -> None:
        self.task: asyncio.Task[None]
        self.record: TrackedRecord | None = None
        self.call: PendingCall | None = None
        self.started = 0.0
        self.timed_out = False

    def clear_timeout(self) -> None:
        """Forget a watchdog cancellation once it has been turned into a timeout failure."""
        self.timed_out = False
        self.task.uncancel()


def time_out(
    workers: Iterable[Worker], now: float, limit: float, collect: Callable[[], None]
) -> int:
    """Cancel the workers whose call has run ``limit`` seconds by ``now``; return how many.

    A call that has returned is never a timeout, even when the loop has not yet run the
    callback that hands its result over: a starved loop (a loaded machine, threads holding the
    GIL) can wake the watchdog before that callback, and cancelling there would discard work
    already done and run the record again. So ``collect()`` first delivers every result that
    has come back, and a worker whose call is then done keeps it."""
    late = [
        worker
        for worker in workers
        if worker.record is not None and not worker.timed_out and now - worker.started >= limit
    ]
    if late:
        collect()
    cancelled = 0
    for worker in late:
        if worker.call is not None and worker.call.future.done():
            continue  # returned in time for this check: its task resumes with the result
        worker.timed_out = True
        worker.task.cancel()
        cancelled += 1
    return cancelled


async def watchdog(
    workers: set[Worker], clock: Clock, limit: float, collect: Callable[[], None]
) -> None:
    """Cancel handler calls that run past ``limit`` seconds (checked a few times per limit,
    :func:`time_out`); the caller turns the cancellation into a timeout failure."""
    tick = min(max(limit / 8, 0.001), 0.5)
    while True:
        await clock.sleep(tick)
        time_out(workers, clock.now(), limit, collect)
