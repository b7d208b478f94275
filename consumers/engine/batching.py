"""Batch and unique modes: one handler call for a batch, then each record resolved on its own.

A batch takes whole runs of records from ready lanes, in lane order, up to ``size`` records
(:meth:`consumers.engine.ready.ReadyLanes.take_batch`). Ordered lanes it takes from stay busy
until the batch is resolved, so no other call can run a later record of the same key (or
virtual partition, or partition) meanwhile. ``unique`` hands the handler only the latest record
of each key; the ones it superseded complete without a call.
"""

from __future__ import annotations

from collections.abc import Hashable

from consumers.clock import Clock
from consumers.engine.caller import HandlerCaller
from consumers.engine.counters import WorkloadCounters
from consumers.engine.partition import Lane
from consumers.engine.ready import ReadyLanes
from consumers.engine.resolution import Resolver
from consumers.engine.settlement import Settlement
from consumers.engine.tap import Tap
from consumers.engine.tracked import TrackedRecord
from consumers.engine.workers import Worker
from consumers.record import Record

Batch = list[tuple[Lane, list[TrackedRecord]]]


def latest_per_key(batch: Batch) -> tuple[list[TrackedRecord], set[TrackedRecord]]:
    """The last record of each key in the batch (to handle) and the superseded ones (to skip).

    Keys are per partition: the same key in two partitions is two keys.
    """
    latest: dict[tuple[int, str, Hashable], TrackedRecord] = {}
    for _, records in batch:
        for rec in records:
            latest[(rec.partition, rec.topic, rec.key)] = rec
    keep = set(latest.values())
    superseded = {rec for _, records in batch for rec in records if rec not in keep}
    handled = [rec for _, records in batch for rec in records if rec in keep]
    return handled, superseded


class BatchCalls:
    """Runs taken batches through the handler and resolves their records in lane order."""

    def __init__(
        self,
        name: str,
        unique: bool,
        caller: HandlerCaller,
        resolver: Resolver,
        ready: ReadyLanes,
        counters: WorkloadCounters,
        clock: Clock,
        tap: Tap | None,
        settlement: Settlement,
    ) -> None:
        self._name = name
        self._settlement = settlement
        self._unique = unique
        self._caller = caller
        self._resolver = resolver
        self._ready = ready
        self._counters = counters
        self._clock = clock
        self._tap = tap

    async def run(self, worker: Worker, batch: Batch) -> None:
        records = [rec for _, recs in batch for rec in recs]
        if self._unique:
            handled, superseded = latest_per_key(batch)
        else:
            handled, superseded = records, set()
        for rec in records:
            rec.part.in_flight += 1
        worker.record = handled[0]
        worker.started = self._clock.now()
        # The handler gets a list of its own: what it does to the list never reaches the engine.
        outcomes, error = await self._caller.call_batch(worker, list[Record](handled))
        worker.record = None
        counters, resolver, tap = self._counters, self._resolver, self._tap
        late = self._settlement.late
        for lane, recs in batch:
            held = False
            part = lane.part
            for i, rec in enumerate(recs):
                part.in_flight -= 1
                if held:
                    continue
                if late(rec):
                    continue
                if rec in superseded:
                    counters.superseded += 1
                    resolver.done(rec, (), land=False)
                    continue
                outcome = outcomes.get(rec)
                held = resolver.resolve(lane, rec, outcome, error)
                if tap is not None:
                    tap.handled(self._name, rec, outcome, error)
                if held:  # later records of this lane go back behind the held one, in order
                    self._ready.put_back(lane, recs[i + 1 :])
            if not held:
                self._ready.release(lane)
