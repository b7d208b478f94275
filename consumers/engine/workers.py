"""A worker: one task holding one permit, running lane heads until the lanes run dry."""

from __future__ import annotations

import asyncio

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
