"""Handlers for consumer jobs executed inside the test process: they record into this module.

``execute_in_process`` runs the op in the test's own interpreter, so a handler named by import
path in a spec shares these lists with the test. Call :func:`reset` before each run.
"""

from __future__ import annotations

import asyncio

from consumers import Record

Place = tuple[int, int]  # (partition, offset)

#: Records whose handler call began, returned, or was cancelled.
started: list[Place] = []
finished: list[Place] = []
cancelled: list[Place] = []
#: Handler calls running now, and the most that ever ran at once.
running = 0
peak = 0
#: Per-record delay of :func:`slow`, in seconds.
delay = 0.002
#: The offset at which :func:`stuck` never returns (until cancelled), on every partition.
stuck_offset = 3


def reset(per_record_delay: float = 0.002, stuck_at: int = 3) -> None:
    global delay, stuck_offset, running, peak
    for log in (started, finished, cancelled):
        log.clear()
    running = peak = 0
    delay = per_record_delay
    stuck_offset = stuck_at


async def _handle(rec: Record, seconds: float | None) -> None:
    global running, peak
    place = (rec.partition, rec.offset)
    started.append(place)
    running += 1
    peak = max(peak, running)
    try:
        if seconds is None:
            await asyncio.Event().wait()  # never set: only a cancellation ends this call
        else:
            await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        cancelled.append(place)
        raise
    finally:
        running -= 1
    finished.append(place)


async def slow(rec: Record) -> None:
    """Every record takes :data:`delay` seconds."""
    await _handle(rec, delay)


async def stuck(rec: Record) -> None:
    """Like :func:`slow`, but the record at :data:`stuck_offset` of each partition never ends."""
    await _handle(rec, None if rec.offset == stuck_offset else delay)
