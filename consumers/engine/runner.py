"""The workload runner: records in, lanes, permits, handler calls, completions, commit positions.

Lifecycle (all on the event-loop thread):

    assign(parts) → ingest(messages)* → [revoke(keys)]* → drain() → final positions

``ingest`` files each record into its partition's commit tracker and its lane. Lanes with work
wait in one ready queue; *workers* (tasks that each hold one permit) pop a lane, run its head
record and put the lane back if more records wait. A worker keeps its permit while there is work
unless the pool says the permit is owed to a workload further below its fair share, so tasks are
not created per record. The runner never talks to the broker: it asks its :class:`SourceControl`
to commit, pause and resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from consumers.backends.base import CommitOffset, Identify, MessageLike, PartitionKey, Position
from consumers.clock import Clock, first_of, wait_for
from consumers.engine.batching import BatchCalls
from consumers.engine.caller import HandlerCaller
from consumers.engine.commits import CommitPlanner
from consumers.engine.counters import WorkloadCounters
from consumers.engine.lake import Lake
from consumers.engine.lanes import lane_router
from consumers.engine.partition import Lane, PartitionState
from consumers.engine.producer import AckedProducer
from consumers.engine.ready import ReadyLanes
from consumers.engine.resolution import Resolver
from consumers.engine.settings import RunnerSettings
from consumers.engine.tap import Tap
from consumers.engine.workers import Worker
from consumers.execution.executors import Handler
from consumers.execution.interceptors import Interceptor
from consumers.permits.pool import PermitPool
from consumers.record import Record

log = logging.getLogger("lanehouse.engine")

#: How long a worker runs records without suspending (handlers that never await, inline sync
#: handlers) before it lets the loop take its turn: intake, timers, results from threads.
TURN = 0.002


class SourceControl(Protocol):
    """What a runner asks of the thread that owns the client."""

    def commit(self, offsets: list[CommitOffset], asynchronous: bool) -> None: ...
    def pause(self, parts: list[PartitionKey]) -> None: ...
    def resume(self, parts: list[PartitionKey]) -> None: ...


class WorkloadRunner:
    """Runs one workload's records through lanes and permits; see the module docstring."""

    def __init__(
        self,
        settings: RunnerSettings,
        handler: Handler,
        pool: PermitPool,
        control: SourceControl,
        clock: Clock,
        producer: AckedProducer | None = None,
        tap: Tap | None = None,
        interceptors: Sequence[Interceptor] = (),
        identify: Identify | None = None,
        position: Position | None = None,
    ) -> None:
        self.settings = settings
        self.counters = WorkloadCounters()
        self.parts: dict[PartitionKey, PartitionState] = {}
        self._caller = HandlerCaller(
            settings.name,
            handler,
            settings.concurrency,
            settings.timeout,
            tuple(interceptors),
            self.counters,
            clock,
            settings.executor,
            settings.processes,
            settings.max_handoff_bytes,
        )
        self._pool = pool
        self._permits = pool.register(
            settings.name,
            settings.weight,
            settings.concurrency,
            self._on_grant,
            pending=lambda: self._runnable() - self._starting,
        )
        self._control = control
        self._clock = clock
        self._buffer_limit = settings.buffer_limit
        self._route = lane_router(settings.ordering, settings.virtual_partitions)
        self._ordered = settings.ordering != "none"
        self._ready = ReadyLanes()
        self._workers: set[Worker] = set()
        #: Workers spawned that have not picked their first lane yet.
        self._starting = 0
        self._intake_open = True
        self._stopping = False
        self._progress = asyncio.Event()
        self._commit_now = asyncio.Event()
        self._commits = CommitPlanner(settings.commit_every)
        self._tasks: list[asyncio.Task[None]] = []
        self.last_ingest = clock.now()
        self._producer = producer
        self._tap = tap
        #: Set when the workload must stop (safety valve, output write failure).
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lake: Lake | None = None
        if settings.landing is not None:
            if identify is None:
                raise ValueError(f"workload {settings.name!r}: landing needs source identities")
            self._lake = Lake(settings.name, settings.landing, identify, clock)
        #: The landing sink, for reports (None unless the workload lands).
        self.landing = self._lake.sink if self._lake else None
        self._resolver = Resolver(
            settings.name,
            settings.retry,
            settings.dead_letter,
            settings.output_topic,
            producer,
            clock,
            self.counters,
            complete=self._complete,
            requeue=self._requeue,
            fail=self._fail_workload,
            landing=self.landing,
            identity=self._lake.identity if self._lake else None,
            position=position,
        )
        self._sequenced = self._resolver.sequenced
        self._batches = BatchCalls(
            settings.name,
            settings.mode == "unique",
            self._caller,
            self._resolver,
            self._ready,
            self.counters,
            clock,
            tap,
        )
        self._batched = settings.mode != "single"
        #: Set when records arrive, for batch workers gathering a batch.
        self._arrivals = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the commit timer and the timeout watchdog on the running loop."""
        self._tasks.append(asyncio.ensure_future(self._commit_timer()))
        self._tasks.append(asyncio.ensure_future(self._watchdog()))

    def prepare_assignment(self, parts: Sequence[PartitionState]) -> None:
        """Before the first record of ``parts`` is read (on the source's thread): see
        :meth:`Lake.prepare`."""
        if self._lake is not None:
            self._lake.prepare(parts)

    def assign(self, parts: Iterable[PartitionState]) -> None:
        self.last_ingest = self._clock.now()  # idleness counts from the assignment
        for part in parts:
            self.parts[(part.topic, part.partition)] = part

    async def revoke(self, keys: Sequence[PartitionKey]) -> list[CommitOffset]:
        """Stop intake of ``keys``, drain their in-flight records, return what to commit.

        Queued records that never started are dropped (the next owner reads them again);
        completions arriving after this returns are ignored.
        """
        parts = [self.parts[k] for k in keys if k in self.parts]
        for part in parts:
            part.closing = True
            part.lanes.clear()
        producer = self._producer
        drained = await wait_for(
            self._clock,
            self._progress,
            # Outputs, dead letters and rows not yet landed would be redone by the next owner.
            lambda: (
                all(p.in_flight == 0 for p in parts)
                and (producer is None or producer.in_flight == 0)
                and (self._lake is None or self._lake.landed(parts))
            ),
            self.settings.drain_timeout,
        )
        if not drained:
            stuck = sum(p.in_flight for p in parts)
            log.warning(
                "workload %s: %d records still running after %.1fs drain on revoke; their "
                "partitions are committed below them and the late results dropped",
                self.settings.name,
                stuck,
                self.settings.drain_timeout,
            )
        offsets = self._commits.plan(parts, only_changed=False)
        for part in parts:
            part.revoked = True
            dropped = part.tracker.drop_all()
            self._resolver.forget(dropped)
            part.emit.clear()
            self.counters.dropped_on_revoke += len(dropped)
            del self.parts[(part.topic, part.partition)]
            self._commits.forget((part.topic, part.partition))
        return offsets

    async def drain(self) -> list[CommitOffset]:
        """Stop intake and new work, wait for in-flight records, return final positions."""
        self._intake_open = False
        self._stopping = True
        self._arrivals.set()  # wake batch workers that are gathering, so they leave now
        drained = await wait_for(
            self._clock, self._progress, lambda: not self._workers, self.settings.drain_timeout
        )
        producer = self._producer
        if drained and producer is not None:
            drained = await wait_for(
                self._clock,
                self._progress,
                lambda: producer.in_flight == 0,
                self.settings.drain_timeout,
            )
        lake = self._lake
        if drained and lake is not None:
            drained = await wait_for(
                self._clock,
                self._progress,
                lambda: lake.landed(self.parts.values()),
                self.settings.drain_timeout,
            )
        if not drained:
            log.warning(
                "workload %s: %d records still running, unacknowledged or not landed after the "
                "%.1fs drain deadline; committing below them",
                self.settings.name,
                len(self._workers)
                + (producer.in_flight if producer else 0)
                + (lake.unlanded(self.parts.values()) if lake else 0),
                self.settings.drain_timeout,
            )
        for task in self._tasks:
            task.cancel()
        self._resolver.close()
        if self.landing is not None:
            self.landing.abort()
        return self._commits.plan(list(self.parts.values()), only_changed=False)

    def close(self) -> None:
        self._resolver.close()
        if self.landing is not None:
            self.landing.abort()
        for worker in list(self._workers):
            worker.task.cancel()
        self._caller.close()
        if not self._permits.held:
            self._pool.unregister(self._permits)

    # ------------------------------------------------------------------ intake

    def ingest(self, messages: list[MessageLike]) -> None:
        """File a batch of client messages into trackers and lanes (the hot path)."""
        if not self._intake_open:
            return
        now = self._clock.now()
        self.last_ingest = now
        parts = self.parts
        route = self._route
        ordered = self._ordered
        ready = self._ready
        counters = self.counters
        part: PartitionState | None = None
        tracker = None
        sequenced = self._sequenced
        consumed = 0
        for msg in messages:
            if msg.error() is not None:
                counters.client_errors += 1
                log.warning("workload %s: client error: %s", self.settings.name, msg.error())
                continue
            topic = msg.topic()
            partition = msg.partition()
            if part is None or part.partition != partition or part.topic != topic:
                if part is not None:
                    self._pause_if_full(part)  # once per run of a partition, not per record
                part = parts.get((topic, partition))  # type: ignore[arg-type]
                tracker = part.tracker if part is not None else None
            if part is None or part.closing:
                counters.dropped_unassigned += 1
                continue
            assert tracker is not None
            offset: int = msg.offset()  # type: ignore[assignment]
            last = tracker.last_delivered
            if last is not None and offset <= last:
                # The client went back (a seek or an offset reset): this record was delivered
                # before and is already tracked, so a second copy could only double-count.
                counters.redelivered += 1
                continue
            key = msg.key()
            rec = Record(
                part.topic,
                part.partition,
                offset,
                key,
                msg.value(),
                msg.headers(),
                msg.timestamp()[1],
            )
            rec._part = part
            tracker.deliver(rec, now)
            if sequenced:
                part.emit.append(rec)
            consumed += 1
            if part.skip and offset in part.skip:
                part.skip.discard(offset)
                counters.skipped += 1
                self._resolver.done(rec, (), land=False)  # a previous owner landed it
                continue
            ready.file(part, route(key), ordered, rec)
        counters.consumed += consumed
        if part is not None:
            self._pause_if_full(part)
        if self._batched:
            self._arrivals.set()
        self._start_workers()

    def _pause_if_full(self, part: PartitionState) -> None:
        """Pause a partition whose tracker holds ``buffer_limit`` records (resumed at half)."""
        if not part.paused and len(part.tracker) >= self._buffer_limit:
            part.paused = True
            self._control.pause([(part.topic, part.partition)])

    # ------------------------------------------------------------------ workers

    def _runnable(self) -> int:
        """How many workers could start now (records, or batches in batch modes)."""
        if self._batched:
            return -(-self._ready.queued_records() // self.settings.batch_size)
        if self._ordered:
            return len(self._ready)
        return self._ready.queued_records()

    def _start_workers(self, fan_out: int = 0) -> None:
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
        while want > 0 and self._pool.try_acquire(self._permits):
            self._spawn()
            want -= 1
        if want > 0:
            self._pool.wait(self._permits)

    def _on_grant(self) -> bool:
        if self._stopping or self._runnable() <= self._starting:
            return False
        self._spawn()
        return True

    def _spawn(self) -> None:
        worker = Worker()
        self._workers.add(worker)
        self._starting += 1
        work = self._work_batch if self._batched else self._work
        worker.task = asyncio.ensure_future(work(worker))

    async def _work(self, worker: Worker) -> None:
        ready = self._ready
        take, release = ready.take, ready.release
        now = self._clock.now
        immediate = self._resolver.immediate
        tap = self._tap
        name = self.settings.name
        call = self._caller.call
        finish = self._finish
        progress = self._progress
        should_yield, permits = self._pool.should_yield, self._permits
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
                        self._start_workers(fan_out=2)
                worker.record = rec
                worker.started = now()
                outcome, error = await call(worker, rec)
                worker.record = None
                part.in_flight -= 1
                held = False
                if part.revoked:
                    self.counters.late_completions += 1
                else:
                    if outcome is None and error is None and immediate:
                        finish(rec, part, now())  # plain success: the hot path
                    else:
                        held = self._resolver.resolve(lane, rec, outcome, error)
                    if tap is not None:
                        tap.handled(name, rec, outcome, error)
                if not held:  # a retry or a parked record keeps its lane busy: its key waits
                    release(lane)
                progress.set()
                if should_yield(permits):
                    break
                if worker.started >= turn_ends:  # handlers that never suspend: let the loop in
                    await asyncio.sleep(0)
                    turn_ends = now() + TURN
        finally:
            self._workers.discard(worker)
            progress.set()
            self._pool.release(permits)
            if ready and not self._stopping:
                self._start_workers()

    async def _work_batch(self, worker: Worker) -> None:
        """Batch and unique modes: gather up to ``batch_size`` records or wait ``batch_max_wait``,
        call the handler once with the list, resolve each record. One batch holds one permit."""
        ready = self._ready
        clock = self._clock
        size = self.settings.batch_size
        gathering = True  # counted in ``_starting`` while gathering
        try:
            while ready and not self._stopping:
                deadline = clock.now() + self.settings.batch_max_wait
                while ready.queued_records() < size and not self._stopping:
                    remaining = deadline - clock.now()
                    if remaining <= 0:
                        break
                    self._arrivals.clear()
                    await first_of(self._arrivals.wait(), clock.sleep(remaining))
                if self.stopping:  # a drain began while gathering: no new batch starts
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
                if self._pool.should_yield(self._permits):
                    break
        finally:
            if gathering:
                self._starting -= 1
            self._workers.discard(worker)
            self._progress.set()
            self._pool.release(self._permits)
            if ready and not self._stopping:
                self._start_workers()

    def _complete(self, rec: Record) -> None:
        """The record's outcome is durable: it may now be committed past."""
        part = rec._part
        if part is None or part.revoked:
            self.counters.late_completions += 1
            return
        self._finish(rec, part, self._clock.now())
        if self._producer is not None or self.landing is not None:
            self._progress.set()  # drain may be waiting for acknowledgements or files

    def _requeue(self, lane: Lane, rec: Record) -> None:
        """A retry is due: its record runs next in its lane (:meth:`ReadyLanes.requeue`)."""
        self._ready.requeue(lane, rec)
        self._start_workers()

    def _fail_workload(self, error: BaseException) -> None:
        """Stop the whole workload (the app drains and commits what is durable)."""
        if not self.failed.done():
            log.error("workload %s: stopping: %s", self.settings.name, error)
            self.failed.set_exception(error)

    def _finish(self, rec: Record, part: PartitionState, now: float) -> None:
        advanced = part.tracker.complete(rec, now)
        self.counters.completed += 1
        if advanced:
            if self._commits.advanced(advanced):
                self._commit_now.set()
            if part.paused and len(part.tracker) <= self._buffer_limit // 2:
                part.paused = False
                self._control.resume([(part.topic, part.partition)])

    # ------------------------------------------------------------------ timers and commits

    async def _watchdog(self) -> None:
        """Cancel handler calls that run past the timeout (checked a few times per timeout)."""
        timeout = self.settings.timeout
        tick = min(max(timeout / 8, 0.001), 0.5)
        while True:
            await self._clock.sleep(tick)
            now = self._clock.now()
            for worker in list(self._workers):
                if (
                    worker.record is not None
                    and not worker.timed_out
                    and now - worker.started >= timeout
                ):
                    worker.timed_out = True
                    worker.task.cancel()

    async def _commit_timer(self) -> None:
        while True:
            await first_of(
                self._commit_now.wait(), self._clock.sleep(self.settings.commit_interval)
            )
            self._commit_now.clear()
            self.commit(asynchronous=True)

    def commit(self, asynchronous: bool) -> None:
        """Send the positions that moved since the last commit to the source."""
        offsets = self._commits.plan(list(self.parts.values()), only_changed=True)
        if offsets:
            self._control.commit(offsets, asynchronous)

    # ------------------------------------------------------------------ introspection

    @property
    def in_flight(self) -> int:
        return sum(1 for w in self._workers if w.record is not None)

    @property
    def stopping(self) -> bool:
        """Drain has begun: no new record will start."""
        return self._stopping

    @property
    def busy(self) -> bool:
        """Work is running, waiting for a permit or a retry, unacknowledged, or held back by a
        paused partition."""
        return (
            bool(self._workers or self._ready or self._resolver.waiting)
            or (self._producer is not None and self._producer.in_flight > 0)
            or any(p.paused for p in self.parts.values())
        )

    @property
    def permits_held(self) -> int:
        return self._permits.held

    @property
    def waiting_lanes(self) -> int:
        return len(self._ready)

    @property
    def abandoned_threads(self) -> int:
        return self._caller.abandoned

    def partitions(self) -> list[PartitionState]:
        return list(self.parts.values())
