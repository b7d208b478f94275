"""The commit planner sends a partition's position only when it or its done-offset metadata
moved, and says when enough records were passed to commit before the timer."""

from __future__ import annotations

import pytest

from consumers.backends.metadata import decode_done
from consumers.engine.commits import CommitPlanner
from consumers.engine.partition import PartitionState
from consumers.engine.tracked import TrackedRecord

pytestmark = pytest.mark.unit


def delivered(partition: int, offsets: range) -> tuple[PartitionState, list[TrackedRecord]]:
    part = PartitionState("t", partition)
    records = [TrackedRecord("t", partition, o, None, b"", None, 0, part) for o in offsets]
    part.tracker.deliver(records, 0.0)
    return part, records


def test_a_commit_is_due_early_once_commit_every_records_were_passed() -> None:
    planner = CommitPlanner(commit_every=10)
    assert not planner.advanced(6)
    assert planner.advanced(4)
    assert not planner.advanced(1)  # due already: the commit timer was woken once
    planner.plan([], only_changed=True)  # a plan starts the count again
    assert not planner.advanced(9)
    assert planner.advanced(5)


def test_only_partitions_whose_position_or_metadata_moved_are_planned_again() -> None:
    planner = CommitPlanner(commit_every=100)
    first, a = delivered(0, range(0, 5))
    second, _ = delivered(1, range(0, 5))
    idle = PartitionState("t", 2)  # nothing delivered: no position to commit
    first.tracker.complete(a[0], 1.0)
    assert planner.plan([first, second, idle], only_changed=True) == [
        ("t", 0, 1, ""),
        ("t", 1, 0, ""),
    ]
    assert planner.plan([first, second, idle], only_changed=True) == []  # nothing moved
    first.tracker.complete(a[3], 2.0)  # above the watermark: only the metadata moves
    [(topic, partition, position, metadata)] = planner.plan([first, second], only_changed=True)
    assert (topic, partition, position) == ("t", 0, 1)
    assert decode_done(position, metadata) == {3}
    assert planner.plan([first, second], only_changed=False) == [
        ("t", 0, 1, metadata),
        ("t", 1, 0, ""),
    ]


def test_a_forgotten_partition_is_planned_again_after_it_comes_back() -> None:
    planner = CommitPlanner(commit_every=100)
    part, _ = delivered(0, range(0, 3))
    assert planner.plan([part], only_changed=True) == [("t", 0, 0, "")]
    planner.forget(("t", 0))
    assert planner.plan([part], only_changed=True) == [("t", 0, 0, "")]


def test_after_a_failed_commit_every_position_is_planned_again() -> None:
    planner = CommitPlanner(commit_every=100)
    first, _ = delivered(0, range(0, 5))
    assert planner.plan([first], only_changed=True) == [("t", 0, 0, "")]
    assert planner.plan([first], only_changed=True) == []
    planner.resend_all()  # the broker did not take it
    assert planner.plan([first], only_changed=True) == [("t", 0, 0, "")]
