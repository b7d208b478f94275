"""Calling user code for one workload: interceptors around the handler, async or sync, timeouts
turned into :class:`HandlerTimeout`, and every exception wrapped with the record's place.

User code never raises into the engine: a call returns ``(outcome, None)`` or ``(None, error)``
where ``error`` is a counted, logged :class:`HandlerError`. The resolver then decides between a
retry and a dead letter. That holds for ``BaseException`` too: a handler's ``SystemExit`` or
``KeyboardInterrupt`` is one failed attempt of its record, not the end of the process (stops
reach the engine as signals, through handlers it installs, never as exceptions in user code).
Only the engine's own cancellation passes through. Engine errors are never wrapped, so they are
never mistaken for a bad record.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from time import perf_counter
from typing import Any

from consumers.clock import Clock
from consumers.engine.counters import WorkloadCounters
from consumers.engine.workers import Worker
from consumers.errors import HandlerError, HandlerTimeout, LanehouseError
from consumers.execution.executors import (
    MAX_HANDOFF_BYTES,
    CallPool,
    Executor,
    Handler,
    PendingCall,
    check_executor,
    is_async_handler,
)
from consumers.execution.inline import InlineGate
from consumers.execution.interceptors import Interceptor
from consumers.execution.processes import ProcessExecutor
from consumers.execution.threads import ThreadExecutor
from consumers.outcomes import Outcome
from consumers.record import Record

log = logging.getLogger("lanehouse.engine")


class HandlerCaller:
    """One workload's handler and interceptors; see the module docstring."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        max_threads: int,
        timeout: float,
        interceptors: tuple[Interceptor, ...],
        counters: WorkloadCounters,
        clock: Clock,
        executor: Executor = "auto",
        processes: int = 0,
        max_handoff_bytes: int = MAX_HANDOFF_BYTES,
    ) -> None:
        self._name = name
        self._handler = handler
        self._timeout = timeout
        self._interceptors = interceptors
        self._counters = counters
        problem = check_executor(handler, executor)
        if problem is not None:
            raise LanehouseError(f"workload {name!r}: {problem}")
        self._async = is_async_handler(handler)
        #: Decides inline or threads for a plain def under ``executor: auto``.
        self.gate = InlineGate(clock) if executor == "auto" and not self._async else None
        #: The gate, when a worker may call the handler itself while the gate says inline
        #: (:meth:`call_inline`; nothing around the handler).
        self.inline_gate = self.gate if not interceptors else None
        self._clock = clock
        self._pool: CallPool | None = None
        if executor == "process":
            self._pool = ProcessExecutor(
                handler, processes or os.cpu_count() or 1, name, max_handoff_bytes
            )
        elif not self._async:
            timed = self.gate.threaded if self.gate is not None else None
            self._pool = ThreadExecutor(handler, max_threads, name, timed)

    def call(
        self, worker: Worker, rec: Record
    ) -> Coroutine[Any, Any, tuple[Outcome, HandlerError | None]]:
        """Run the interceptors and the handler on one record (await the result).

        A plain function returning the coroutine to await: without interceptors, the hot path,
        that is the invocation itself, one coroutine a record fewer."""
        if not self._interceptors:
            return self._invoke(worker, rec, rec)
        return self._call_intercepted(worker, rec)

    async def _call_intercepted(
        self, worker: Worker, rec: Record
    ) -> tuple[Outcome, HandlerError | None]:
        error = self._before([rec])
        if error is not None:
            return None, self._after(rec, None, error)
        outcome, error = await self._invoke(worker, rec, rec)
        return outcome, self._after(rec, outcome, error)

    async def call_batch(
        self, worker: Worker, records: list[Record]
    ) -> tuple[dict[Record, Outcome], HandlerError | None]:
        """Run the handler once on a batch; it returns None or one outcome per record."""
        first = records[0]
        error = self._before(records)
        results: Any = None
        if error is None:
            results, error = await self._invoke(worker, first, records)
        wrong_shape = not isinstance(results, list) or len(results) != len(records)
        if error is None and results is not None and wrong_shape:
            got = len(results) if isinstance(results, list) else type(results).__name__
            message = f"a batch of {len(records)} must return None or as many outcomes, got {got}"
            error = self.error(first, TypeError(message))
        outcomes = dict(zip(records, results, strict=True)) if error is None and results else {}
        for rec in reversed(records):  # undo in reverse, as nested before() calls expect
            error = self._after(rec, outcomes.get(rec), error)
        return outcomes, error

    async def _invoke(
        self, worker: Worker, first: Record, subject: Record | list[Record]
    ) -> tuple[Any, HandlerError | None]:
        gate = self.gate
        call: PendingCall | None = None
        try:
            if self._async:
                result = await self._handler(subject)
            elif gate is not None and gate.inline:
                started = perf_counter()
                try:
                    result = self._handler(subject)
                finally:
                    gate.ran_inline(perf_counter() - started)
            else:
                assert self._pool is not None  # every plain def has a pool
                call = worker.call = self._pool.submit(subject)
                if not call.running:
                    # Queued behind other records: its timeout starts when it runs.
                    worker.started = math.inf
                    call.on_start = partial(self._restart_timer, worker)
                result = await call.future
                worker.call = None
        except BaseException as exc:  # everything user code raises: see the module docstring
            worker.call = None
            error = self.failure(worker, first, exc)
            if isinstance(error, HandlerTimeout) and call is not None and self._pool is not None:
                worker.record = None
                # A thread gets as long again to return; a worker process is killed at once.
                await self._pool.abandon(call, partial(self._clock.sleep, self._timeout))
            return None, error
        if worker.timed_out:  # the handler swallowed the cancellation and returned
            worker.clear_timeout()
        return result, None

    def collect(self) -> None:
        """Hand over every thread or process result that has come back but whose callback
        has not run yet (the watchdog asks before it times a call out)."""
        if self._pool is not None:
            self._pool.collect()

    @property
    def direct(self) -> Callable[[Record], Awaitable[Any]] | None:
        """The handler itself when a worker may await it with nothing around it (an ``async
        def`` without interceptors), so a record costs one coroutine, not two; else None. The
        worker then turns what it raises into a result with :meth:`failure`."""
        if self._async and not self._interceptors:
            return self._handler
        return None

    def call_inline(self, worker: Worker, rec: Record) -> tuple[Outcome, HandlerError | None]:
        """A plain ``def`` proven fast, called on the loop's thread with no coroutine around
        it (only while ``inline_gate.inline``); the gate times the call."""
        gate = self.inline_gate
        assert gate is not None  # a worker calls this only while the gate says inline
        started = perf_counter()
        try:
            result = self._handler(rec)
        except BaseException as exc:  # user code: a result, never a crash
            return None, self.failure(worker, rec, exc)
        finally:
            gate.ran_inline(perf_counter() - started)
        return result, None

    def failure(self, worker: Worker, rec: Record, exc: BaseException) -> HandlerError:
        """What ``exc``, raised by the handler on ``rec``, means: a timeout when the watchdog
        cancelled the call, else a failed attempt (counted, logged). The engine's own
        cancellation is not the record's fault: it is raised again."""
        if isinstance(exc, asyncio.CancelledError):
            if not worker.timed_out:
                raise exc
            worker.clear_timeout()
            error: HandlerError = HandlerTimeout(
                *self._where(rec), f"timed out after {self._timeout:g}s"
            )
            self.fail(rec, error)  # counted now, even while an abandoned thread runs on
            return error
        if worker.timed_out:
            worker.clear_timeout()
        return self.error(rec, exc)

    def _restart_timer(self, worker: Worker) -> None:
        worker.started = self._clock.now()

    def _before(self, records: list[Record]) -> HandlerError | None:
        for rec in records:
            for interceptor in self._interceptors:
                try:
                    interceptor.before(rec)
                except BaseException as exc:
                    return self.error(rec, exc)
        return None

    def _after(
        self, rec: Record, outcome: Outcome, error: HandlerError | None
    ) -> HandlerError | None:
        """Run the ``after`` hooks in reverse order; one that raises fails the call."""
        for interceptor in reversed(self._interceptors):
            try:
                interceptor.after(rec, outcome, error)
            except BaseException as exc:
                error = self.error(rec, exc)
        return error

    def error(self, rec: Record, exc: BaseException) -> HandlerError:
        """Wrap (and count) an exception from user code with the record's place."""
        error = HandlerError(*self._where(rec), f"{type(exc).__name__}: {exc}")
        error.__cause__ = exc
        self.fail(rec, error)
        return error

    def fail(self, rec: Record, error: HandlerError) -> None:
        """Count and log a failed attempt (the traceback once per record, not per retry)."""
        self._counters.failed += 1
        if isinstance(error, HandlerTimeout):
            self._counters.timeouts += 1
        first = rec.attempts == 0
        log.warning(
            "%s (attempt %d)", error, rec.attempts + 1, exc_info=error.__cause__ if first else None
        )

    def _where(self, rec: Record) -> tuple[str, str, int, int, bytes | None]:
        return (self._name, rec.topic, rec.partition, rec.offset, rec.key)

    @property
    def abandoned(self) -> int:
        return self._pool.abandoned if self._pool is not None else 0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
