"""The workload runner: one workload on the event loop, from records in to commit positions.

Lifecycle (on the event-loop thread; ``prepare_assignment`` alone runs on the source thread,
inside the client's assignment callback, before any record of the partitions is read):

    assign(parts) → ingest(messages)* → [revoke(keys)]* → drain() → final positions

The runner assembles the mechanisms and owns what they share: ``ingest`` hands messages to the
:class:`~consumers.engine.intake.Intake` (trackers, lanes, pauses) and wakes the
:class:`~consumers.engine.dispatch.Dispatch` (workers holding permits run lane heads through the
caller); the :class:`~consumers.engine.resolution.Resolver` turns results into completions;
every completion, on every path, ends in :class:`~consumers.engine.settlement.Settlement`, the
one way into a partition's commit position. The runner never talks to
the broker: it asks its :class:`SourceControl` to commit, pause and resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence

from consumers.backends.base import CommitOffset, Identify, MessageLike, PartitionKey, Position
from consumers.clock import Clock, first_of, wait_for
from consumers.engine.batching import BatchCalls
from consumers.engine.caller import HandlerCaller
from consumers.engine.commands import SourceControl
from consumers.engine.commits import CommitPlanner
from consumers.engine.counters import WorkloadCounters
from consumers.engine.dispatch import Dispatch
from consumers.engine.intake import Intake
from consumers.engine.isolation import isolate
from consumers.engine.lake import Rewind, WorkloadLake
from consumers.engine.lanes import lane_router
from consumers.engine.partition import Lane, PartitionState
from consumers.engine.producer import AckedProducer
from consumers.engine.ready import ReadyLanes
from consumers.engine.resolution import Resolver
from consumers.engine.settings import RunnerSettings
from consumers.engine.settlement import Settlement
from consumers.engine.tap import Tap
from consumers.engine.tracked import TrackedRecord
from consumers.engine.workers import watchdog
from consumers.errors import describe
from consumers.execution.executors import Handler
from consumers.execution.interceptors import Interceptor
from consumers.permits.pool import PermitPool

log = logging.getLogger("lanehouse.engine")


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
        self._control = control
        self._clock = clock
        self._ready = ReadyLanes()
        self._intake_open = True
        self._progress = asyncio.Event()
        self._commit_now = asyncio.Event()
        self._commits = CommitPlanner(settings.commit_every)
        self._tasks: list[asyncio.Task[None]] = []
        self.last_ingest = clock.now()
        self._producer = producer
        self._tap = tap
        #: Set when the workload must stop (safety valve, output write failure).
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lake: WorkloadLake | None = None
        if settings.landing is not None:
            if identify is None:
                raise ValueError(f"workload {settings.name!r}: landing needs source identities")
            self._lake = WorkloadLake(settings.name, settings.landing, identify, clock)
        #: The landing sink, for reports (None unless the workload lands).
        self.landing = self._lake.sink if self._lake else None
        self._intake = Intake(
            settings.name,
            self.parts,
            self._ready,
            lane_router(settings.ordering, settings.virtual_partitions),
            settings.ordering != "none",
            self.counters,
            settings.buffer_limit,
            control.pause,
            control.resume,
            sequenced=settings.output_topic is not None,
        )
        self._settlement = Settlement(
            self.counters,
            clock,
            self._commits,
            self._commit_now,
            self._intake.resume_if_drained,
            self._intake.resume_at,
            # a drain may wait for acknowledgements or landed files
            progress=self._progress if producer is not None or self.landing is not None else None,
        )
        self._resolver = Resolver(
            settings.name,
            settings.retry,
            settings.dead_letter,
            settings.output_topic,
            producer,
            clock,
            self.counters,
            self._settlement,
            self.requeue,
            self.fail,
            landing=self.landing,
            identity=self._lake.identity if self._lake else None,
            position=position,
        )
        if self.landing is not None:  # a partition whose files fail to land pauses
            self.landing.gates.on_blocked = self._intake.hold
        self._crashes, isolation = isolate(
            settings, self._caller.call, self.fail, self._intake.end_window, clock.now
        )
        batches = BatchCalls(
            settings.name,
            settings.mode == "unique",
            self._caller,
            self._resolver,
            self._ready,
            self.counters,
            clock,
            tap,
            self._settlement,
        )
        self._dispatch = Dispatch(
            settings,
            self._ready,
            self._caller,
            self._resolver,
            batches,
            pool,
            clock,
            self.counters,
            tap,
            self._progress,
            self._settlement,
            isolation,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the commit timer and the timeout watchdog on the running loop."""
        self._tasks.append(asyncio.ensure_future(self._commit_timer()))
        self._tasks.append(
            asyncio.ensure_future(
                watchdog(
                    self._dispatch.active,
                    self._clock,
                    self.settings.timeout,
                    self._caller.collect,
                )
            )
        )

    def prepare_assignment(
        self, parts: Sequence[PartitionState], rewind: Rewind | None = None
    ) -> None:
        """Before the first record of ``parts`` is read (on the source's thread): see
        :meth:`WorkloadLake.prepare`; and the partitions are marked held (:class:`CrashJournal`)."""
        if self._crashes is not None:
            for part in parts:
                part.suspect = self._crashes.open(part.topic, part.partition, part.committed)
        if self._lake is not None:
            self._lake.prepare(parts, rewind)

    def client_positions(self, positions: dict[PartitionKey, int]) -> None:
        """The client's positions (after every record below them was ingested): where a
        partition read past offsets it never delivers, its watermark may move past them."""
        if not self._intake_open:
            return  # records ignored since the drain began lie below these positions
        for key, position in positions.items():
            part = self.parts.get(key)
            if part is not None and not part.closing:
                part.tracker.client_at(position)

    def commit_failed(self) -> None:
        """A commit failed: the next one sends every position, moved or not."""
        self._commits.resend_all()

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
            self._ready.close(part)
        # Outputs, dead letters and rows not yet landed would be redone by the next owner.
        drained = await self._settle(
            lambda: (
                all(p.in_flight == 0 for p in parts)
                and self._acknowledged()
                and (self._lake is None or self._lake.landed(parts))
            )
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
            part.awaiting_outputs.clear()
            self.counters.dropped_on_revoke += len(dropped)
            del self.parts[(part.topic, part.partition)]
            self._commits.forget((part.topic, part.partition))
            self._release_mark(part)
        return offsets

    async def drain(self) -> list[CommitOffset]:
        """Stop intake and new work, wait for in-flight records, return final positions."""
        self._intake_open = False
        self._dispatch.stop()
        producer, lake = self._producer, self._lake
        drained = await self._settle(
            lambda: not self._dispatch.active,
            self._acknowledged,
            lambda: lake is None or lake.landed(self.parts.values()),
        )
        if not drained:
            log.warning(
                "workload %s: %d records still running, unacknowledged or not landed after the "
                "%.1fs drain deadline; committing below them",
                self.settings.name,
                len(self._dispatch.active)
                + (producer.in_flight if producer else 0)
                + (lake.unlanded(self.parts.values()) if lake else 0),
                self.settings.drain_timeout,
            )
        for task in self._tasks:
            task.cancel()
        self._resolver.close()
        if self.landing is not None:
            self.landing.abort()
        for part in self.parts.values():
            self._release_mark(part)
        return self._commits.plan(list(self.parts.values()), only_changed=False)

    def _release_mark(self, part: PartitionState) -> None:
        """The process ends its hold on ``part`` alive (:class:`CrashJournal`)."""
        if self._crashes is not None:
            suspect = part.suspect
            if suspect is not None:
                suspect.detach()
            self._crashes.close(part.topic, part.partition, suspect is not None and suspect.keep)

    async def _settle(self, *conditions: Callable[[], bool]) -> bool:
        """Wait for each condition in turn, each within the drain deadline; False if one is
        still false at its deadline."""
        for condition in conditions:
            limit = self.settings.drain_timeout
            if not await wait_for(self._clock, self._progress, condition, limit):
                return False
        return True

    def _acknowledged(self) -> bool:
        """No output or dead letter waits for the broker's acknowledgement."""
        return self._producer is None or self._producer.in_flight == 0

    def close(self) -> None:
        self._resolver.close()
        if self.landing is not None:
            self.landing.abort()
        self._dispatch.close()
        self._caller.close()

    # ------------------------------------------------------------------ intake

    def ingest(self, messages: list[MessageLike]) -> None:
        """File a batch of client messages (:class:`Intake`) and start workers for them."""
        if not self._intake_open:
            return
        now = self._clock.now()
        self.last_ingest = now
        for rec in self._intake.admit(messages, now):
            self._resolver.done(rec, (), land=False)  # a previous owner completed it
        self._dispatch.arrived()

    # ------------------------------------------------------------------ from the Resolver

    def requeue(self, lane: Lane, rec: TrackedRecord) -> None:
        """A retry is due: its record runs next in its lane (:meth:`ReadyLanes.requeue`)."""
        self._ready.requeue(lane, rec)
        self._dispatch.start()

    def fail(self, error: BaseException) -> None:
        """Stop the whole workload (the app drains and commits what is durable)."""
        if not self.failed.done():
            log.error("workload %s: stopping: %s", self.settings.name, describe(error))
            self.failed.set_exception(error)

    # ------------------------------------------------------------------ timers and commits

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
            parts = self.parts
            planned = [(o, parts.get((o[0], o[1]))) for o in offsets]
            self._control.commit(planned, asynchronous)

    # ------------------------------------------------------------------ introspection

    @property
    def in_flight(self) -> int:
        return sum(1 for w in self._dispatch.active if w.record is not None)

    @property
    def stopping(self) -> bool:
        """Drain has begun: no new record will start."""
        return self._dispatch.stopping

    @property
    def busy(self) -> bool:
        """Work is running, waiting for a permit or a retry, unacknowledged, or held back by a
        paused partition."""
        return (
            bool(self._dispatch.active or self._ready or self._resolver.waiting)
            or (self._producer is not None and self._producer.in_flight > 0)
            or any(p.paused for p in self.parts.values())
        )

    @property
    def permits_held(self) -> int:
        return self._dispatch.permits.held

    @property
    def waiting_lanes(self) -> int:
        return len(self._ready)

    @property
    def abandoned_threads(self) -> int:
        return self._caller.abandoned

    @property
    def valve_used(self) -> float | None:
        return self._resolver.valve_used

    def partitions(self) -> list[PartitionState]:
        return list(self.parts.values())
