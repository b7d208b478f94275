"""Settlement, the one way into the commit position: a settled record moves its partition's
watermark, a due commit wakes the timer, a drained paused partition resumes, and a record of a
revoked partition is only counted late. (The runner's tests drive every path that ends here.)"""

from __future__ import annotations

import asyncio

import pytest

from consumers.clock import ManualClock
from consumers.engine.commits import CommitPlanner
from consumers.engine.counters import WorkloadCounters
from consumers.engine.partition import PartitionState
from consumers.engine.settlement import Settlement
from consumers.engine.tracked import TrackedRecord

pytestmark = pytest.mark.unit


class Parts:
    """One partition with records 0..n delivered, and what settling them asked for."""

    def __init__(
        self, records: int, commit_every: int = 100, progress: bool = False, resume_at: int = 10
    ) -> None:
        self.part = PartitionState("t", 0)
        self.records = [
            TrackedRecord("t", 0, offset, None, b"", None, 0, self.part)
            for offset in range(records)
        ]
        self.part.tracker.deliver(self.records, 0.0)
        self.counters = WorkloadCounters()
        self.commit_now = asyncio.Event()
        self.progress = asyncio.Event() if progress else None
        self.resumed: list[PartitionState] = []
        self.settlement = Settlement(
            self.counters,
            ManualClock(),
            CommitPlanner(commit_every),
            self.commit_now,
            self.resumed.append,
            resume_at,
            progress=self.progress,
        )


async def test_settling_moves_the_watermark_over_contiguous_records_only() -> None:
    parts = Parts(3)
    assert parts.settlement.settle(parts.records[1])
    assert parts.part.tracker.position == 0  # offset 0 still pending: the watermark waits
    parts.settlement.settle(parts.records[0])
    assert parts.part.tracker.position == 2
    assert parts.counters.completed == 2 and parts.counters.late_completions == 0


async def test_a_record_of_a_revoked_partition_is_counted_late_and_moves_nothing() -> None:
    parts = Parts(2)
    parts.part.revoked = True
    assert not parts.settlement.owns(parts.records[0])
    assert parts.settlement.late(parts.records[0])
    assert not parts.settlement.settle(parts.records[0])
    assert parts.counters.late_completions == 2 and parts.counters.completed == 0
    assert parts.part.tracker.position == 0


async def test_a_commit_is_woken_once_commit_every_records_passed() -> None:
    parts = Parts(3, commit_every=2)
    parts.settlement.settle(parts.records[0])
    assert not parts.commit_now.is_set()
    parts.settlement.settle(parts.records[1])
    assert parts.commit_now.is_set()


async def test_a_paused_partition_is_offered_for_resume_when_its_watermark_moves() -> None:
    parts = Parts(2)
    parts.part.paused = True
    parts.settlement.settle(parts.records[1])  # above a pending record: nothing moved
    assert parts.resumed == []
    parts.settlement.settle(parts.records[0])
    assert parts.resumed == [parts.part]


async def test_a_paused_partition_is_offered_for_resume_only_once_drained_enough() -> None:
    parts = Parts(4, resume_at=1)
    parts.part.paused = True
    parts.settlement.settle(parts.records[0])  # 3 records left: above the resume mark
    parts.settlement.settle(parts.records[1])  # 2 left
    assert parts.resumed == []
    parts.settlement.settle(parts.records[2])  # 1 left: at the mark
    assert parts.resumed == [parts.part]


async def test_progress_is_told_only_when_a_drain_may_wait_for_it() -> None:
    quiet, told = Parts(1), Parts(1, progress=True)
    quiet.settlement.settle(quiet.records[0])
    told.settlement.settle(told.records[0])
    assert told.progress is not None and told.progress.is_set()
