"""Intake files a poll: each partition's run is tracked and filed into its lanes in one pass,
in offset order, and what must not run (redeliveries, unassigned or closing partitions, client
errors, work a previous owner finished) is counted instead; full partitions pause."""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from consumers import MessageLike
from consumers.backends.base import PartitionKey, PlainMessage
from consumers.engine.counters import WorkloadCounters
from consumers.engine.crashes import SUSPECT_LANE, Mark, Suspect
from consumers.engine.intake import Intake
from consumers.engine.lanes import lane_router
from consumers.engine.partition import PartitionState
from consumers.engine.ready import ReadyLanes
from consumers.engine.tracked import TrackedRecord

pytestmark = pytest.mark.unit


class Failed(PlainMessage):
    """A client error in place of a message (librdkafka's partition EOF, a broker error)."""

    def error(self) -> Any:
        return "broker transport failure"


def msg(partition: int, offset: int, key: bytes | None = b"k", topic: str = "t") -> PlainMessage:
    return PlainMessage(topic, partition, offset, key, b"v%d" % offset, None, 1_000 + offset)


class Setup:
    def __init__(self, partitions: int = 2, limit: int = 100) -> None:
        self.parts = {("t", p): PartitionState("t", p) for p in range(partitions)}
        self.ready = ReadyLanes()
        self.counters = WorkloadCounters()
        self.paused: list[list[PartitionKey]] = []
        self.resumed: list[list[PartitionKey]] = []
        self.intake = Intake(
            "w",
            self.parts,
            self.ready,
            lane_router("key", 0),
            True,
            self.counters,
            limit,
            self.paused.append,
            self.resumed.append,
            sequenced=False,
        )

    def admit(self, *messages: MessageLike) -> list[TrackedRecord]:
        return self.intake.admit(list(messages), now=5.0)

    def lane(self, partition: int, key: Hashable) -> list[int]:
        lane = self.parts[("t", partition)].lanes[key]
        return [r.offset for r in ([lane.head] if lane.head else []) + list(lane.rest or ())]

    def tracked(self, partition: int) -> list[int]:
        tracker = self.parts[("t", partition)].tracker
        return [r.offset for r in tracker._pending]


def test_a_poll_of_two_partitions_files_each_run_into_its_key_lanes_in_offset_order() -> None:
    s = Setup()
    s.admit(msg(0, 0, b"a"), msg(0, 1, b"b"), msg(1, 0, b"a"), msg(0, 2, b"a"), msg(1, 1, b"a"))
    assert s.lane(0, b"a") == [0, 2] and s.lane(0, b"b") == [1] and s.lane(1, b"a") == [0, 1]
    assert s.tracked(0) == [0, 1, 2] and s.tracked(1) == [0, 1]
    assert s.counters.consumed == 5 and len(s.ready) == 3  # lanes (0,a), (0,b), (1,a)
    rec = s.parts[("t", 0)].lanes[b"a"].head
    assert rec is not None and (rec.value, rec.timestamp) == (b"v0", 1_000)
    assert rec.part is s.parts[("t", 0)]


def test_a_redelivered_offset_is_counted_and_never_filed_twice() -> None:
    s = Setup()
    s.admit(msg(0, 0), msg(0, 1))
    s.admit(msg(0, 1), msg(0, 2), msg(0, 0), msg(0, 3))  # the client went back twice
    assert s.tracked(0) == [0, 1, 2, 3] and s.lane(0, b"k") == [0, 1, 2, 3]
    assert s.counters.redelivered == 2 and s.counters.consumed == 4


def test_unassigned_and_closing_partitions_and_client_errors_are_counted_not_filed() -> None:
    s = Setup()
    s.ready.close(s.parts[("t", 1)])
    s.admit(msg(0, 0), Failed("t", 0, 1, None, None, None, 0), msg(1, 0), msg(7, 0), msg(0, 1))
    assert s.tracked(0) == [0, 1] and s.tracked(1) == []
    assert s.counters.client_errors == 1 and s.counters.dropped_unassigned == 2


def test_offsets_a_previous_owner_finished_are_tracked_and_handed_back_not_filed() -> None:
    s = Setup()
    s.parts[("t", 0)].skip = {1}
    skipped = s.admit(msg(0, 0), msg(0, 1), msg(0, 2))
    assert [r.offset for r in skipped] == [1] and s.counters.skipped == 1
    assert s.tracked(0) == [0, 1, 2]  # the caller completes it, so the watermark passes it
    assert s.lane(0, b"k") == [0, 2] and s.parts[("t", 0)].skip == set()


def test_a_suspect_window_runs_alone_and_holds_the_records_behind_it(tmp_path: Path) -> None:
    s = Setup()
    part = s.parts[("t", 0)]
    fd = os.open(tmp_path / "mark", os.O_RDWR | os.O_CREAT)  # the window's journal
    part.suspect = Suspect(fd, Mark(deaths=2), window=2)
    s.admit(msg(0, 0, b"a"), msg(0, 1, b"b"), msg(0, 2, b"a"))
    os.close(fd)
    assert s.lane(0, SUSPECT_LANE) == [0, 1]
    assert [r.offset for r in part.suspect.later] == [2] and b"a" not in part.lanes


def run_suspects(s: Setup, part: PartitionState) -> list[int]:
    """Run what the suspect lane holds, one record at a time as its worker would, ending the
    window after each as the dispatcher does; the offsets run."""
    ran = []
    while SUSPECT_LANE in part.lanes:
        taken = s.ready.take()
        assert taken is not None and taken[0].lane_id == SUSPECT_LANE, taken
        lane, rec = taken
        ran.append(rec.offset)
        s.ready.release(lane)
        s.intake.end_window(part)
    return ran


@pytest.mark.parametrize("how", ["its last offset", "a record past it", "the partition's end"])
def test_a_suspect_window_ends_once_all_of_it_arrived_not_when_its_lane_empties(
    tmp_path: Path, how: str
) -> None:
    """Before: it ended when its lane emptied, so a first poll that brought part of it ended
    it early, the rest ran beside other records, and a poison among them died unnamed."""
    s = Setup()
    part = s.parts[("t", 0)]
    fd = os.open(tmp_path / "mark", os.O_RDWR | os.O_CREAT)
    part.suspect = Suspect(fd, Mark(deaths=2), window=3)
    s.admit(msg(0, 0, b"a"))
    assert run_suspects(s, part) == [0]
    assert part.suspect is not None, "the window ended with two of its records still to come"
    if how == "its last offset":
        s.admit(msg(0, 1, b"a"), msg(0, 2, b"b"), msg(0, 3, b"a"))
        assert run_suspects(s, part) == [1, 2]
        assert s.lane(0, b"a") == [3]
    elif how == "a record past it":  # offsets 1 and 2 are gone (compaction)
        s.admit(msg(0, 5, b"a"))
        assert run_suspects(s, part) == []
        assert s.lane(0, b"a") == [5]
    else:
        s.admit(msg(0, 1, b"a"))
        part.high_watermark = 2  # the records the partition has: the window holds them all
        assert run_suspects(s, part) == [1]
    os.close(fd)
    assert part.suspect is None, "the window never ended"


def test_a_full_partition_pauses_once_a_poll_and_resumes_at_half() -> None:
    s = Setup(limit=4)
    s.admit(*(msg(0, o) for o in range(5)), msg(1, 0))
    assert s.paused == [[("t", 0)]]  # once for the run, not once a record past the limit
    part = s.parts[("t", 0)]
    for _ in range(2):
        rec = part.tracker.head
        assert rec is not None
        part.tracker.complete(rec, 6.0)
        s.intake.resume_if_drained(part)
    assert s.resumed == [] and len(part.tracker) == 3
    part.tracker.complete(part.tracker.head, 6.0)  # type: ignore[arg-type]
    s.intake.resume_if_drained(part)
    assert s.resumed == [[("t", 0)]] and s.intake.resume_at == 2


def test_a_held_partition_stays_paused_whatever_its_buffer() -> None:
    s = Setup(limit=4)
    s.admit(msg(0, 0))
    s.intake.hold("t", 0, True)
    assert s.paused == [[("t", 0)]]
    s.intake.resume_if_drained(s.parts[("t", 0)])
    assert s.resumed == []
    s.intake.hold("t", 0, False)
    assert s.resumed == [[("t", 0)]]
