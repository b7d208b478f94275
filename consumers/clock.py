"""Injectable clocks, and the waits that read them: every timer in the engine reads a clock, so
tests can drive time by hand."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Clock(Protocol):
    """Monotonic time in seconds plus an awaitable sleep on the same time line."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Wall-clock monotonic time; sleeps on the running event loop.

    ``now`` is :func:`time.monotonic` itself, not a method around it: the engine reads the
    clock twice a record, and a Python frame each time cost ~3% of the no-op path."""

    now: Callable[[], float] = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """Time moves only when a test calls :meth:`advance`; sleepers wake in deadline order."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    @property
    def sleeping(self) -> int:
        """Sleepers not woken yet: a test waits for a timer to be armed before advancing."""
        return sum(not fut.done() for _, _, fut in self._sleepers)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)


async def first_of(*awaitables: Awaitable[Any]) -> None:
    """Return when the first awaitable finishes; cancel the coroutines it started for the others.
    One of those coroutines that failed raises its error here: a failure is not a finish.

    Futures passed in are only watched, never cancelled: they belong to someone else.
    """
    owned = [asyncio.ensure_future(a) for a in awaitables if not isinstance(a, asyncio.Future)]
    watched = [a for a in awaitables if isinstance(a, asyncio.Future)]
    try:
        done, _ = await asyncio.wait([*owned, *watched], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in owned:
            task.cancel()
    for task in owned:
        if task in done and not task.cancelled() and (error := task.exception()) is not None:
            raise error


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
