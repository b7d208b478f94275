"""Owns the one way into the commit position: a record whose outcome is durable is *settled*
here, and only here, whatever path it took (the inline fast path, threads, processes, retries,
dead letters, outputs after the producer's ack, landed files, batches, superseded records).

    settle(rec) ─► revoked? count it late, stop ─► watermark (OffsetTracker.complete)
                ─► a commit due early? wake the commit timer ─► a paused partition drained? resume

Whether a partition is still this runner's is asked here too (:meth:`Settlement.late`,
:meth:`Settlement.owns`): the one revoked check, so a late result is counted the same way on
every path and nothing is resolved, produced or landed for a partition another member owns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from consumers.clock import Clock
from consumers.engine.commits import CommitPlanner
from consumers.engine.counters import WorkloadCounters
from consumers.engine.partition import PartitionState
from consumers.engine.tracked import TrackedRecord


class Settlement:
    """Settles the records of one workload's partitions; see the module docstring."""

    def __init__(
        self,
        counters: WorkloadCounters,
        clock: Clock,
        commits: CommitPlanner,
        commit_now: asyncio.Event,
        resume_if_drained: Callable[[PartitionState], None],
        resume_at: int,
        progress: asyncio.Event | None = None,
    ) -> None:
        self._counters = counters
        self._now = clock.now
        self._commits = commits
        self._commit_now = commit_now
        self._resume_if_drained = resume_if_drained
        #: At or below this many tracked records a paused partition may resume (the intake's
        #: rule, asked only then).
        self._resume_at = resume_at
        #: Set on every settle when a drain may wait for it (acknowledgements, landed files).
        self._progress = progress

    @staticmethod
    def owns(rec: TrackedRecord) -> bool:
        """Whether ``rec``'s partition is still this runner's (not revoked since the read)."""
        return not rec.part.revoked

    def late(self, rec: TrackedRecord) -> bool:
        """True, counting a late completion, when ``rec``'s partition was revoked: its result is
        dropped (the partition's next owner handles the record again)."""
        if not rec.part.revoked:  # owns(), inlined: every result passes here
            return False
        self._counters.late_completions += 1
        return True

    def settle(self, rec: TrackedRecord) -> bool:
        """``rec``'s outcome is durable: it may be committed past. False, counted late, when
        its partition was revoked meanwhile (one call on the hot path: no :meth:`late` first)."""
        part: PartitionState = rec.part  # owns(), inlined
        if part.revoked:
            self._counters.late_completions += 1
            return False
        advanced = part.tracker.complete(rec, self._now())
        self._counters.completed += 1
        if advanced:
            if self._commits.advanced(advanced):
                self._commit_now.set()
            if part.paused and len(part.tracker) <= self._resume_at:
                self._resume_if_drained(part)
        if self._progress is not None:
            self._progress.set()
        return True
