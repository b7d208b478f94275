"""Plain ``def`` handlers on threads, with one loop wake-up per batch of results, not per record.

``concurrent.futures.ThreadPoolExecutor`` plus ``asyncio.wrap_future`` costs a record two
futures (one with its own ``threading.Condition``), a done-callback and one
``call_soon_threadsafe`` (a write to the loop's wake-up pipe). Here a call is one loop future:
threads put their results on a deque and only the thread that finds no wake-up scheduled
schedules one, so results that finish together are delivered in one loop turn.

Threads start as calls are in flight, never more than the workload's concurrency: a workload
whose handler is fast keeps a handful of threads, not ``concurrency`` of them. They are daemon
threads, so a handler stuck past the drain deadline cannot keep the process from exiting.

A timed-out call cannot be stopped: :meth:`ThreadExecutor.abandon` waits for its thread to
return, and the caller keeps the record's permit meanwhile, so abandoned threads never push a
workload past its concurrency. It waits as long again as the timeout at most: a thread still
running then is *stuck* (a handler that never returns would otherwise pin its record, its key
and its partition's commits forever). The record's failure is then settled without it (retried,
dead-lettered), the stuck thread no longer counts among the pool's threads, so a new one may
start in its place, and it stays counted in ``abandoned`` until it returns. Its late effects are
out of order; ``executor: process`` kills a worker instead.

Threads of one interpreter stop scaling near :data:`CROWDED` waiting calls at once: each
wake-up needs the GIL, and its waiters time out and ask for it every switch interval, so the
more threads wait, the more each wake-up costs (1,000 threads that only sleep 20 ms reach 0.18
to 0.46 of their rate here, 300 reach 0.94 to 0.98; ``bench/thread_floor.py``). The pool says
so, once, when it starts its ``CROWDED``-th thread, and says what to do instead.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from queue import SimpleQueue
from typing import Any

from consumers.clock import first_of
from consumers.execution.executors import Handler

log = logging.getLogger("lanehouse.engine")

#: Threads of one pool past which waiting calls stop scaling (see the module doc).
CROWDED = 300


class ThreadCall:
    """One call in flight; ``future`` resolves on the loop with the handler's result. Each call
    has a thread (they start as calls are in flight), so it runs from the moment it is queued."""

    __slots__ = ("future", "on_start", "running", "subject")

    def __init__(self, subject: Any, future: asyncio.Future[Any]) -> None:
        self.subject = subject
        self.future = future
        self.running = True
        self.on_start: Callable[[], None] | None = None


#: (call, result, exception, wall seconds of the handler alone)
_Done = tuple[ThreadCall, Any, BaseException | None, float]


class ThreadExecutor:
    """Runs one workload's sync handler on up to ``max_threads`` threads; see the module doc."""

    def __init__(
        self,
        handler: Handler,
        max_threads: int,
        workload: str,
        timed: Callable[[float], None] | None = None,
    ) -> None:
        self._handler = handler
        self._max = max_threads
        self._workload = workload
        self._name = f"lh-{workload}"
        self._timed = timed
        self._loop = asyncio.get_running_loop()
        self._queue: SimpleQueue[ThreadCall | None] = SimpleQueue()
        self._done: deque[_Done] = deque()
        self._wake_scheduled = False
        self._threads: list[threading.Thread] = []
        self._in_flight = 0
        self._closed = False
        #: Threads running a call whose caller stopped waiting for it.
        self._stuck = 0
        self.abandoned = 0

    def submit(self, subject: Any) -> ThreadCall:
        call = ThreadCall(subject, self._loop.create_future())
        self._in_flight += 1
        live = len(self._threads) - self._stuck
        if self._in_flight - self._stuck > live and live < self._max:
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
            if len(self._threads) == CROWDED:
                log.warning(
                    "workload %s: %d threads run its plain def handler at once; threads of one "
                    "interpreter stop scaling near this many (every wake-up waits for the GIL). "
                    "For more calls waiting at once, write the handler async def, or run "
                    "replicas with a concurrency of at most %d each "
                    "(docs/configuration.md, 'Which executor')",
                    self._workload,
                    CROWDED,
                    CROWDED,
                )
        self._queue.put(call)
        return call

    async def abandon(self, call: ThreadCall, grace: Callable[[], Awaitable[object]]) -> None:
        """Wait, without a result, for a timed-out call's thread to return, or until ``grace()``
        finishes: then the thread is stuck (see the module doc) and counted until it returns."""
        self.abandoned += 1
        waiting = call.future = self._loop.create_future()
        await first_of(waiting, grace())
        if waiting.done():
            self.abandoned -= 1
            if not waiting.cancelled():
                waiting.exception()  # retrieved: the handler's late error is nobody's concern
            return
        self._stuck += 1
        waiting.add_done_callback(self._returned)

    def _returned(self, waiting: asyncio.Future[Any]) -> None:
        """A stuck thread's handler returned: the thread serves the pool again."""
        self._stuck -= 1
        self.abandoned -= 1
        if not waiting.cancelled():
            waiting.exception()

    def close(self) -> None:
        """Let idle threads end; a thread still in a handler ends when the handler returns."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)

    # ------------------------------------------------------------------ thread side

    def _serve(self) -> None:
        get, handler, done, clock = self._queue.get, self._handler, self._done, time.perf_counter
        while True:
            call = get()
            if call is None:
                return
            error: BaseException | None = None
            result: Any = None
            started = clock()
            try:
                result = handler(call.subject)
            except BaseException as exc:  # delivered to the caller, who wraps it
                error = exc
            done.append((call, result, error, clock() - started))
            if not self._wake_scheduled:
                self._wake_scheduled = True
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody waits for this result
                    return

    # ------------------------------------------------------------------ loop side

    def collect(self) -> None:
        """Deliver now the results threads have queued (``CallPool.collect``)."""
        self._deliver()

    def _deliver(self) -> None:
        self._wake_scheduled = False  # before popping: a result appended after this wakes again
        done, timed = self._done, self._timed
        while done:
            call, result, error, wall = done.popleft()
            self._in_flight -= 1
            if timed is not None:
                timed(wall)
            future = call.future
            if future.done():  # cancelled by the watchdog, then abandoned or given up
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)
