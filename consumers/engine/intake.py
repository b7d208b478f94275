"""Intake: client messages admitted into their partition's tracker and lane (the hot path), and
the flow control that keeps a partition's buffer bounded.

A partition pauses once its tracker holds ``limit`` delivered-but-incomplete records and resumes
at half of it; the source thread keeps polling while paused (librdkafka's rebalance callbacks and
``max.poll.interval.ms`` need it), so backpressure never blocks the poll loop. A partition whose
landing fails (a full disk: :mod:`consumers.landing.gates`) is *held*: paused whatever its
buffer, until its files can be written again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from consumers.backends.base import MessageLike, PartitionKey
from consumers.engine.counters import WorkloadCounters
from consumers.engine.crashes import SUSPECT_LANE
from consumers.engine.partition import PartitionState
from consumers.engine.ready import ReadyLanes
from consumers.engine.tracked import TrackedRecord

log = logging.getLogger("lanehouse.engine")


class Intake:
    """Files records for one workload; told where to pause and resume, never talks to a client."""

    def __init__(
        self,
        name: str,
        parts: dict[PartitionKey, PartitionState],
        ready: ReadyLanes,
        route: Callable[[bytes | None], Hashable],
        ordered: bool,
        counters: WorkloadCounters,
        limit: int,
        pause: Callable[[list[PartitionKey]], None],
        resume: Callable[[list[PartitionKey]], None],
        sequenced: bool,
    ) -> None:
        self._name = name
        self._parts = parts
        self._ready = ready
        self._route = route
        self._ordered = ordered
        self._counters = counters
        self._limit = limit
        self._pause = pause
        self._resume = resume
        #: Keep records in delivery order for the output sequencer (output topic only).
        self._sequenced = sequenced
        #: Partitions whose landing fails: paused until it works again.
        self._held: set[PartitionKey] = set()

    def admit(self, messages: list[MessageLike], now: float) -> list[TrackedRecord]:
        """Admit ``messages`` to their lanes; returns the records a previous owner already
        completed (their offsets were in the commit metadata), for the caller to complete
        without a call.

        A poll holds runs of one partition's messages; each run is read into records in one
        loop, then tracked and admitted whole (:meth:`_admit_run`), not a call per record."""
        parts = self._parts
        counters = self._counters
        skipped: list[TrackedRecord] = []
        run: list[TrackedRecord] = []
        part: PartitionState | None = None
        last = -1
        for msg in messages:
            if msg.error() is not None:
                counters.client_errors += 1
                log.warning("workload %s: client error: %s", self._name, msg.error())
                continue
            topic = msg.topic()
            partition = msg.partition()
            if part is None or part.partition != partition or part.topic != topic:
                if part is not None:
                    self._admit_run(part, run, now, skipped)
                    run = []
                part = parts.get((topic, partition))  # type: ignore[arg-type]
                if part is not None:
                    delivered = part.tracker.last_delivered
                    last = -1 if delivered is None else delivered
            if part is None or part.closing:
                counters.dropped_unassigned += 1
                continue
            offset: int = msg.offset()  # type: ignore[assignment]
            if offset <= last:
                # The client went back (a seek or an offset reset): this record was delivered
                # before and is already tracked, so a second copy could only double-count.
                counters.redelivered += 1
                continue
            last = offset
            rec = TrackedRecord(
                part.topic,
                part.partition,
                offset,
                msg.key(),
                msg.value(),
                msg.headers(),
                msg.timestamp()[1],
                part,
            )
            run.append(rec)
        if part is not None:
            self._admit_run(part, run, now, skipped)
        return skipped

    def _admit_run(
        self,
        part: PartitionState,
        run: list[TrackedRecord],
        now: float,
        skipped: list[TrackedRecord],
    ) -> None:
        """Track and admit one partition's new records (in offset order), then pause the
        partition if its buffer is full: once per run, not per record."""
        if run:
            part.tracker.deliver(run, now)
            if self._sequenced:
                part.awaiting_outputs.extend(run)
            self._counters.consumed += len(run)
            if part.skip or part.suspect is not None:
                self._admit_one_by_one(part, run, skipped)
            else:
                self._ready.join_run(part, run, self._route, self._ordered)
        self.pause_if_full(part)

    def _admit_one_by_one(
        self, part: PartitionState, run: list[TrackedRecord], skipped: list[TrackedRecord]
    ) -> None:
        """The rare run: offsets a previous owner completed, or a suspect window."""
        join, route, ordered = self._ready.join, self._route, self._ordered
        for rec in run:
            if part.skip and rec.offset in part.skip:
                part.skip.discard(rec.offset)
                self._counters.skipped += 1
                skipped.append(rec)
                continue
            suspect = part.suspect
            if suspect is not None:  # earlier holders died: one at a time, then the rest
                if suspect.admits(rec.offset):
                    join(part, SUSPECT_LANE, True, rec)
                else:
                    suspect.later.append(rec)
                continue
            join(part, route(rec.key), ordered, rec)
        self.end_window(part)  # its last record may have run before the records past it came

    def end_window(self, part: PartitionState) -> None:
        """A suspect window is done (all of it arrived, and none of it runs or waits): the
        partition runs as usual, and the records held back behind the window join their lanes."""
        suspect = part.suspect
        if suspect is None or SUSPECT_LANE in part.lanes or part.closing:
            return
        if not suspect.arrived(part.high_watermark):
            return
        part.suspect = None
        suspect.calm()
        join, route, ordered = self._ready.join, self._route, self._ordered
        for rec in suspect.later:
            join(part, route(rec.key), ordered, rec)

    def pause_if_full(self, part: PartitionState) -> None:
        key = (part.topic, part.partition)
        if not part.paused and (len(part.tracker) >= self._limit or key in self._held):
            part.paused = True
            self._pause([key])

    @property
    def resume_at(self) -> int:
        """A paused partition resumes once its tracker holds this many records or fewer."""
        return self._limit // 2

    def resume_if_drained(self, part: PartitionState) -> None:
        key = (part.topic, part.partition)
        if part.paused and len(part.tracker) <= self.resume_at and key not in self._held:
            part.paused = False
            self._resume([key])

    def hold(self, topic: str, partition: int, held: bool) -> None:
        """Landing of the partition fails (``held``: pause it, whatever its buffer) or works
        again (resume it once its buffer allows); backpressure, so nothing is handled ahead."""
        key = (topic, partition)
        if held:
            self._held.add(key)
        else:
            self._held.discard(key)
        part = self._parts.get(key)
        if part is None or part.closing:
            return
        if held:
            self.pause_if_full(part)
        else:
            self.resume_if_drained(part)
