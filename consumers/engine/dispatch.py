"""Dispatch: the workers of one workload, each a task holding one permit, taking lane heads from
the ready queue and running them until the lanes run dry or the permit is owed elsewhere.

A worker keeps its permit while there is work unless the pool says the permit is owed to a
workload further below its fair share, so tasks are not created per record. Single mode runs
one record at a time per worker (``_work``); batch and unique modes gather a batch and hand it to
:class:`~consumers.engine.batching.BatchCalls` (``_work_batch``).
"""

from __future__ import annotations

import asyncio

from consumers.clock import Clock, first_of
from consumers.engine.batching import BatchCalls
from consumers.engine.caller import HandlerCaller
from consumers.engine.counters import WorkloadCounters
from consumers.engine.isolation import Isolation
from consumers.engine.ready import ReadyLanes
from consumers.engine.resolution import Resolver
from consumers.engine.settings import RunnerSettings
from consumers.engine.settlement import Settlement
from consumers.engine.tap import Tap
from consumers.engine.workers import Worker
from consumers.permits.pool import PermitClient, PermitPool

#: How long a worker runs records without suspending (handlers that never await, inline sync
#: handlers) before it lets the loop take its turn: intake, timers, results from threads.
TURN = 0.002


class Dispatch:
    """Starts, runs and retires one workload's workers."""

    def __init__(
        self,
        settings: RunnerSettings,
        ready: ReadyLanes,
        caller: HandlerCaller,
        resolver: Resolver,
        batches: BatchCalls,
        pool: PermitPool,
        clock: Clock,
        counters: WorkloadCounters,
        tap: Tap | None,
        progress: asyncio.Event,
        settlement: Settlement,
        isolation: Isolation | None = None,
    ) -> None:
        self._settings = settings
        self._ready = ready
        self._caller = caller
        self._resolver = resolver
        self._batches = batches
        self._pool = pool
        self._clock = clock
        self._counters = counters
        self._tap = tap
        self._progress = progress
        self._settlement = settlement
        self._isolation = isolation
        self._batched = settings.mode != "single"
        self._ordered = settings.ordering != "none"
        #: Workers running (their records are what the watchdog watches).
        self.active: set[Worker] = set()
        #: Workers spawned that have not picked their first lane yet.
        self._starting = 0
        self._stopping = False
        #: Set when records arrive, for batch workers gathering a batch.
        self._arrivals = asyncio.Event()
        self.permits: PermitClient = pool.register(
            settings.name,
            settings.weight,
            settings.concurrency,
            self._on_grant,
            pending=lambda: self._runnable() - self._starting,
        )

    @property
    def stopping(self) -> bool:
        """Drain has begun: no new record starts."""
        return self._stopping

    def arrived(self) -> None:
        """Records were filed: start workers for them (and wake batch workers gathering)."""
        if self._batched:
            self._arrivals.set()
        self.start()

    def stop(self) -> None:
        """No new record starts; batch workers gathering leave now."""
        self._stopping = True
        self._arrivals.set()

    def close(self) -> None:
        for worker in list(self.active):
            worker.task.cancel()
        if not self.permits.held:
            self._pool.unregister(self.permits)

    def _runnable(self) -> int:
        """How many workers could start now (records, or batches in batch modes)."""
        if self._batched:
            return -(-self._ready.queued_records() // self._settings.batch_size)
        if self._ordered:
            return len(self._ready)
        return self._ready.queued_records()

    def start(self, fan_out: int = 0) -> None:
        """Spawn workers for the runnable work, as far as permits allow.

        Single mode starts one worker; each new worker, when it takes its first lane, spawns
        ``fan_out`` more if lanes are still waiting (``_work``), so a burst of 1,000 lanes is
        covered in about ten loop turns. A handler that never suspends runs lane after lane in
        the first task instead, and the few spawned after it find the queue empty and leave:
        no task per ready lane.
        """
        if self._stopping:
            return
        want = self._runnable() - self._starting
        if not self._batched:
            want = min(want, fan_out or (1 - self._starting))
        while want > 0 and self._pool.try_acquire(self.permits):
            self._spawn()
            want -= 1
        if want > 0:
            self._pool.wait(self.permits)

    def _on_grant(self) -> bool:
        if self._stopping or self._runnable() <= self._starting:
            return False
        self._spawn()
        return True

    def _spawn(self) -> None:
        worker = Worker()
        self.active.add(worker)
        self._starting += 1
        work = self._work_batch if self._batched else self._work
        worker.task = asyncio.ensure_future(work(worker))

    async def _work(self, worker: Worker) -> None:
        ready = self._ready
        take, release = ready.take, ready.release
        now = self._clock.now
        immediate = self._resolver.immediate
        tap = self._tap
        listened = tap.by_workload if tap is not None else {}
        name = self._settings.name
        caller = self._caller
        call, direct, failure = caller.call, caller.direct, caller.failure
        gate, call_inline = caller.inline_gate, caller.call_inline
        late, settle = self._settlement.late, self._settlement.settle
        progress = self._progress
        should_yield, permits = self._pool.should_yield, self.permits
        self._starting -= 1
        chained = False
        turn_ends = now() + TURN
        try:
            while not self._stopping and (taken := take()) is not None:
                lane, rec = taken
                part = lane.part
                part.in_flight += 1
                if not chained:  # the next worker, for the work left (see _start_workers)
                    chained = True
                    if ready:
                        self.start(fan_out=2)
                worker.record = rec
                worker.started = now()
                suspect = part.suspect
                if suspect is None and direct is not None:  # async def, nothing around it
                    try:
                        outcome, error = await direct(rec), None
                    except BaseException as exc:  # user code: a result, never a crash
                        outcome, error = None, failure(worker, rec, exc)
                    else:
                        if worker.timed_out:  # it swallowed the watchdog's cancel and returned
                            worker.clear_timeout()
                elif suspect is None and gate is not None and gate.inline:
                    outcome, error = call_inline(worker, rec)  # a plain def proven fast
                elif suspect is None:
                    outcome, error = await call(worker, rec)
                else:
                    assert self._isolation is not None  # only an isolating runner has suspects
                    outcome, error = await self._isolation.call(worker, rec, suspect)
                worker.record = None
                part.in_flight -= 1
                held = False
                if outcome is None and error is None and immediate:
                    handled = settle(rec)  # plain success: the hot path, one call
                elif handled := not late(rec):
                    held = self._resolver.resolve(lane, rec, outcome, error)
                if handled and name in listened and tap is not None:
                    tap.handled(name, rec, outcome, error)
                if not held:  # a retry or a parked record keeps its lane busy: its key waits
                    release(lane)
                    if suspect is not None:
                        assert self._isolation is not None
                        self._isolation.end_window(part)
                        if ready:  # the records held behind the window joined their lanes
                            self.start(fan_out=2)
                progress.set()
                if should_yield(permits):
                    break
                if worker.started >= turn_ends:  # handlers that never suspend: let the loop in
                    await asyncio.sleep(0)
                    turn_ends = now() + TURN
        finally:
            self._retire(worker)

    async def _work_batch(self, worker: Worker) -> None:
        """Batch and unique modes: gather up to ``batch_size`` records or wait ``batch_max_wait``,
        call the handler once with the list, resolve each record. One batch holds one permit."""
        ready = self._ready
        clock = self._clock
        size = self._settings.batch_size
        gathering = True  # counted in ``_starting`` while gathering
        try:
            while ready and not self._stopping:
                deadline = clock.now() + self._settings.batch_max_wait
                while ready.queued_records() < size and not self._stopping:
                    remaining = deadline - clock.now()
                    if remaining <= 0:
                        break
                    self._arrivals.clear()
                    await first_of(self._arrivals.wait(), clock.sleep(remaining))
                if self.stopping:  # a drain began while gathering (a property: read anew after await): no new batch starts
                    break
                batch = ready.take_batch(size)
                if not batch:
                    continue
                gathering = False
                self._starting -= 1
                await self._batches.run(worker, batch)
                self._progress.set()
                self._starting += 1
                gathering = True
                if self._pool.should_yield(self.permits):
                    break
        finally:
            if gathering:
                self._starting -= 1
            self._retire(worker)

    def _retire(self, worker: Worker) -> None:
        """A worker leaves: its permit goes back, and another starts if work is waiting."""
        self.active.discard(worker)
        self._progress.set()
        self._pool.release(self.permits)
        if self._ready and not self._stopping:
            self.start()
