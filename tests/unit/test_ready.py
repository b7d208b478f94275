"""The ready queue, the one place a lane changes state: a key never runs twice at once, a retry
goes first, a batch's unrun records go back in order, a revoked partition's lanes are dropped."""

from __future__ import annotations

import pytest

from consumers.engine.partition import PartitionState
from consumers.engine.ready import ReadyLanes
from consumers.engine.tracked import TrackedRecord

pytestmark = pytest.mark.unit


PART = PartitionState("t", 0)


def rec(offset: int) -> TrackedRecord:
    return TrackedRecord("t", 0, offset, None, b"", None, 0, PART)


def test_an_ordered_lane_runs_one_record_at_a_time_in_order() -> None:
    ready, part = ReadyLanes(), PartitionState("t", 0)
    for offset in (0, 1):
        ready.join(part, "k", True, rec(offset))
    lane, first = ready.take() or (None, None)
    assert first is not None and first.offset == 0
    assert ready.take() is None  # the key is busy: its next record waits
    assert lane is not None
    ready.release(lane)
    taken = ready.take()
    assert taken is not None and taken[1].offset == 1
    ready.release(taken[0])
    assert "k" not in part.lanes  # an empty lane leaves the table


def test_an_unordered_lane_hands_out_its_records_at_once() -> None:
    ready, part = ReadyLanes(), PartitionState("t", 0)
    for offset in (0, 1):
        ready.join(part, "k", False, rec(offset))
    offsets = [taken[1].offset for _ in range(2) if (taken := ready.take()) is not None]
    assert offsets == [0, 1]


def test_a_retry_runs_before_every_other_lane() -> None:
    ready, part = ReadyLanes(), PartitionState("t", 0)
    ready.join(part, "a", True, rec(0))
    ready.join(part, "b", True, rec(1))
    taken = ready.take()
    assert taken is not None
    ready.requeue(taken[0], taken[1])
    again = ready.take()
    assert again is not None and again[1].offset == 0


def test_records_a_batch_did_not_run_go_back_in_order() -> None:
    ready, part = ReadyLanes(), PartitionState("t", 0)
    for offset in range(4):
        ready.join(part, "k", True, rec(offset))
    ((lane, records),) = ready.take_batch(10)
    ready.put_back(lane, records[2:])  # record 1 was held: 2 and 3 wait behind it
    ready.requeue(lane, records[1])
    order = []
    while (taken := ready.take()) is not None:
        order.append(taken[1].offset)
        ready.release(taken[0])
    assert order == [1, 2, 3]


def test_a_closed_partition_runs_nothing_more() -> None:
    ready, part = ReadyLanes(), PartitionState("t", 0)
    ready.join(part, "k", True, rec(0))
    ready.close(part)
    assert part.closing and part.lanes == {}
    assert ready.take() is None
