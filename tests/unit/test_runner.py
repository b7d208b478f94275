"""The workload runner driven directly on an event loop: a fake source control, a manual clock,
and handlers whose calls finish only when the test releases them."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest
import pytest_asyncio

from consumers import LanehouseError, LocalPermitPool, Record, RetryPolicy, RunnerSettings
from consumers.backends.base import CommitOffset, PartitionKey
from consumers.backends.metadata import decode_done, encode_done
from consumers.clock import ManualClock
from consumers.engine.commands import PlannedCommit
from consumers.engine.partition import PartitionState
from consumers.engine.runner import WorkloadRunner
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

TOPIC = "orders"


# ---------------------------------------------------------------- fakes and waits


class Msg:
    """The smallest ``MessageLike``."""

    def __init__(self, partition: int, offset: int, key: bytes | None, error: Any = None):
        self._partition = partition
        self._offset = offset
        self._key = key
        self._error = error

    def error(self) -> Any:
        return self._error

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)


class FakeControl:
    """Records what the runner asks of the source thread."""

    def __init__(self) -> None:
        self.commits: list[tuple[list[CommitOffset], bool]] = []
        self.pauses: list[list[PartitionKey]] = []
        self.resumes: list[list[PartitionKey]] = []

    def commit(self, planned: list[PlannedCommit], asynchronous: bool) -> None:
        self.commits.append(([offset for offset, _ in planned], asynchronous))

    def pause(self, parts: list[PartitionKey]) -> None:
        self.pauses.append(list(parts))

    def resume(self, parts: list[PartitionKey]) -> None:
        self.resumes.append(list(parts))

    def last_committed(self) -> dict[PartitionKey, tuple[int, str]]:
        out: dict[PartitionKey, tuple[int, str]] = {}
        for offsets, _ in self.commits:
            for topic, partition, offset, metadata in offsets:
                out[(topic, partition)] = (offset, metadata)
        return out


RecKey = tuple[int, int]  # (partition, offset)


class Gate:
    """An async handler whose every call waits until the test releases that record.

    It checks the ordering contract as records start: ``lane_of(record)`` names the ordered
    lane a record belongs to (None: unordered); two records of one lane must never run at once,
    and a record may only start after every earlier record of its lane has returned.
    """

    def __init__(
        self,
        lane_of: Callable[[Record], object] | None = None,
        fail: Iterable[RecKey] = (),
    ) -> None:
        self._events: dict[RecKey, asyncio.Event] = {}
        self.lane_of = lane_of
        self.fail = set(fail)
        self.started: list[Record] = []
        self.returned: list[Record] = []
        self.cancelled: list[Record] = []
        self.running: dict[RecKey, Record] = {}
        self.max_running = 0
        self.violations: list[str] = []
        self._seen: dict[object, list[Record]] = {}

    def _event(self, key: RecKey) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    def release(self, partition: int, offset: int) -> None:
        self._event((partition, offset)).set()

    def started_keys(self) -> list[RecKey]:
        return [(r.partition, r.offset) for r in self.started]

    async def __call__(self, rec: Record) -> None:
        key = (rec.partition, rec.offset)
        if self.lane_of is not None:
            lane = self.lane_of(rec)
            if lane is not None:
                busy = [r for r in self.running.values() if self.lane_of(r) == lane]
                if busy:
                    self.violations.append(f"{rec} started while {busy} of its lane ran")
                earlier = self._seen.setdefault(lane, [])
                if earlier and earlier[-1].offset > rec.offset:
                    self.violations.append(f"{rec} started after {earlier[-1]}")
                earlier.append(rec)
        self.started.append(rec)
        self.running[key] = rec
        self.max_running = max(self.max_running, len(self.running))
        try:
            await self._event(key).wait()
        except asyncio.CancelledError:
            self.cancelled.append(rec)
            raise
        finally:
            del self.running[key]
        self.returned.append(rec)
        if key in self.fail:
            raise RuntimeError(f"boom at {rec.offset}")


async def advance_until(
    clock: ManualClock, predicate: Callable[[], object], step: float, limit: float
) -> None:
    """Move manual time forward in ``step``s, letting the loop run, until ``predicate()``."""
    start = clock.now()
    while not predicate():
        if clock.now() - start > limit:
            raise AssertionError(f"not met after {limit} s of clock time: {predicate}")
        clock.advance(step)
        await settle()


async def settle(rounds: int = 30) -> None:
    """Let every ready callback run (a bounded number of loop turns, not a wait for time)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def release_randomly(gate: Gate, rnd: random.Random, total: int) -> None:
    """Release running records one by one in random order until ``total`` have returned."""
    while len(gate.returned) < total:
        await until(lambda: gate.running, what="some record running")
        key = rnd.choice(sorted(gate.running))
        done = len(gate.returned)
        gate.release(*key)

        def returned(n: int = done) -> bool:
            return len(gate.returned) > n

        await until(returned, what=f"{key} returned")


class Harness:
    def __init__(
        self, handler: Any, parts: list[PartitionState], pool_size: int, **settings: Any
    ) -> None:
        settings.setdefault("commit_interval", 3600.0)
        self.settings = RunnerSettings(name="w", **settings)
        self.clock = ManualClock()
        self.control = FakeControl()
        self.pool = LocalPermitPool("p", pool_size)
        self.runner = WorkloadRunner(self.settings, handler, self.pool, self.control, self.clock)
        self.runner.start()
        self.runner.assign(parts)
        self.parts = {p.partition: p for p in parts}
        self.closed = False

    def ingest(self, msgs: list[Msg]) -> None:
        self.runner.ingest(msgs)  # type: ignore[arg-type]

    async def finish(self) -> list[CommitOffset]:
        positions = await asyncio.wait_for(self.runner.drain(), 2.0)
        self.close()
        return positions

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.runner.close()

    def committed_now(self) -> dict[PartitionKey, tuple[int, str]]:
        self.runner.commit(asynchronous=True)
        return self.control.last_committed()


@pytest_asyncio.fixture
async def make() -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def factory(
        handler: Any,
        partitions: Iterable[int | PartitionState] = (0,),
        pool_size: int = 1000,
        **settings: Any,
    ) -> Harness:
        parts = [
            p if isinstance(p, PartitionState) else PartitionState(TOPIC, p) for p in partitions
        ]
        h = Harness(handler, parts, pool_size, **settings)
        made.append(h)
        return h

    yield factory
    for h in made:  # a failed test must not leave tasks running into the next one
        for task in h.runner._tasks:
            task.cancel()
        h.close()
    await settle()


def by_key(rec: Record) -> object:
    return (rec.partition, rec.key) if rec.key is not None else (rec.partition, None)


def by_partition(rec: Record) -> object:
    return rec.partition


# ---------------------------------------------------------------- ordering modes


@pytest.mark.parametrize("seed", range(6))
async def test_key_mode_keeps_per_key_order_under_random_completion_order(
    make: Callable[..., Harness], seed: int
) -> None:
    rnd = random.Random(seed)
    keys = [b"a", b"b", b"c", b"d"]
    msgs = [Msg(0, offset, rnd.choice(keys)) for offset in range(30)]
    gate = Gate(lane_of=by_key)
    h = make(gate, ordering="key")
    h.ingest(msgs)
    first_per_key: dict[bytes | None, int] = {}
    for m in msgs:
        first_per_key.setdefault(m.key(), m.offset())
    # Every key's first record starts at once: keys run in parallel.
    await until(lambda: len(gate.running) == len(first_per_key))
    assert sorted(o for _, o in gate.running) == sorted(first_per_key.values())

    await release_randomly(gate, rnd, len(msgs))
    assert gate.violations == []
    for key in keys:
        ran = [r.offset for r in gate.started if r.key == key]
        assert ran == [m.offset() for m in msgs if m.key() == key]
    await until(lambda: h.runner.counters.completed == len(msgs))
    assert h.committed_now() == {(TOPIC, 0): (30, "")}
    assert await h.finish() == [(TOPIC, 0, 30, "")]


async def test_a_record_arriving_while_its_key_runs_waits_for_it(
    make: Callable[..., Harness],
) -> None:
    gate = Gate(lane_of=by_key)
    h = make(gate, ordering="key")
    h.ingest([Msg(0, 0, b"a")])
    await until(lambda: (0, 0) in gate.running)
    # Later batches: more of "a" (must queue behind 0) and another key (must not).
    h.ingest([Msg(0, 1, b"a"), Msg(0, 2, b"b")])
    h.ingest([Msg(0, 3, b"a")])
    await until(lambda: (0, 2) in gate.running)
    await settle()
    assert sorted(gate.running) == [(0, 0), (0, 2)]
    await release_randomly(gate, random.Random(3), 4)
    assert gate.violations == []
    assert [r.offset for r in gate.started if r.key == b"a"] == [0, 1, 3]
    assert await h.finish() == [(TOPIC, 0, 4, "")]


async def test_a_blocked_key_does_not_block_other_keys(make: Callable[..., Harness]) -> None:
    gate = Gate(lane_of=by_key)
    h = make(gate, ordering="key")
    keys = [b"slow", b"x", b"y", b"z"]
    msgs = [Msg(0, offset, keys[offset % 4]) for offset in range(20)]
    h.ingest(msgs)
    await until(lambda: len(gate.running) == 4)
    others = [m for m in msgs if m.key() != b"slow"]
    # Release every other key's records as they start; "slow"@0 never finishes meanwhile.
    while len(gate.returned) < len(others):
        await until(lambda: any(k != (0, 0) for k in gate.running), what="another key runs")
        for partition, offset in list(gate.running):
            if offset != 0:
                gate.release(partition, offset)
        await settle()
    assert sorted(r.offset for r in gate.returned) == [m.offset() for m in others]
    assert list(gate.running) == [(0, 0)]
    # The slow key's later records wait behind its head, and the watermark is pinned by it.
    assert [r.offset for r in gate.started if r.key == b"slow"] == [0]
    await until(lambda: h.runner.counters.completed == len(others))
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert position == 0
    assert decode_done(0, metadata) == {m.offset() for m in others}

    await release_randomly(gate, random.Random(1), len(msgs))
    assert gate.violations == []
    assert [r.offset for r in gate.started if r.key == b"slow"] == [0, 4, 8, 12, 16]
    assert await h.finish() == [(TOPIC, 0, 20, "")]


@pytest.mark.parametrize("concurrency", [1, 3, 7])
async def test_never_more_handler_calls_than_concurrency(
    make: Callable[..., Harness], concurrency: int
) -> None:
    gate = Gate()
    h = make(gate, partitions=(0, 1), ordering="key", concurrency=concurrency)
    msgs = [Msg(offset % 2, offset, b"k%d" % offset) for offset in range(24)]
    h.ingest(msgs)
    await until(lambda: len(gate.running) == concurrency)
    rnd = random.Random(concurrency)
    while len(gate.returned) < len(msgs):
        assert len(gate.running) <= concurrency
        assert h.runner.permits_held <= concurrency
        key = rnd.choice(sorted(gate.running))
        done = len(gate.returned)
        gate.release(*key)
        left = len(msgs) - done - 1

        def reused(n: int = done, left: int = left) -> bool:
            return len(gate.returned) > n and len(gate.running) == min(concurrency, left)

        await until(reused, what="the freed slot is reused")
    assert gate.max_running == concurrency
    await until(lambda: h.runner.counters.completed == len(msgs))
    assert sorted(await h.finish()) == [(TOPIC, 0, 23, ""), (TOPIC, 1, 24, "")]


async def test_partition_mode_runs_one_record_at_a_time_per_partition(
    make: Callable[..., Harness],
) -> None:
    gate = Gate(lane_of=by_partition)
    h = make(gate, partitions=(0, 1, 2), ordering="partition")
    msgs = [Msg(offset % 3, offset, b"k%d" % offset) for offset in range(30)]
    h.ingest(msgs)
    # One per partition, all partitions in parallel.
    await until(lambda: len(gate.running) == 3)
    await release_randomly(gate, random.Random(5), len(msgs))
    assert gate.violations == []
    assert gate.max_running == 3
    for p in range(3):
        assert [r.offset for r in gate.started if r.partition == p] == list(range(p, 30, 3))
    await until(lambda: h.runner.counters.completed == len(msgs))
    assert sorted(await h.finish()) == [(TOPIC, 0, 28, ""), (TOPIC, 1, 29, ""), (TOPIC, 2, 30, "")]


async def test_none_mode_runs_records_of_one_partition_concurrently(
    make: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = make(gate, ordering="none", concurrency=50)
    msgs = [Msg(0, offset, b"same-key") for offset in range(8)]
    h.ingest(msgs)
    await until(lambda: len(gate.running) == 8, what="all records of the partition run at once")
    # Finish them newest first: the watermark only moves when the oldest is done.
    for offset in range(7, 0, -1):
        gate.release(0, offset)
    await until(lambda: h.runner.counters.completed == 7)
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert position == 0
    assert decode_done(0, metadata) == set(range(1, 8))
    gate.release(0, 0)
    await until(lambda: h.runner.counters.completed == 8)
    assert h.committed_now()[(TOPIC, 0)] == (8, "")
    assert await h.finish() == [(TOPIC, 0, 8, "")]


@pytest.mark.parametrize("lanes", [1, 2, 3])
async def test_virtual_partitions_bound_the_lanes_and_keep_key_order(
    make: Callable[..., Harness], lanes: int
) -> None:
    rnd = random.Random(lanes)
    keys = [b"user-%d" % i for i in range(12)]
    msgs = [Msg(0, offset, rnd.choice(keys)) for offset in range(40)]
    gate = Gate(lane_of=by_key)
    h = make(gate, ordering="key", virtual_partitions=lanes)
    h.ingest(msgs)
    part = h.parts[0]
    assert len(part.lanes) <= lanes
    await until(lambda: len(gate.running) >= 1)
    await settle()
    while len(gate.returned) < len(msgs):
        assert len(part.lanes) <= lanes
        running = rnd.choice(sorted(gate.running))
        done = len(gate.returned)
        gate.release(*running)

        def returned(n: int = done) -> bool:
            return len(gate.returned) > n

        await until(returned)
        await settle()
    assert gate.violations == []  # per key order held
    assert gate.max_running <= lanes
    # Twelve keys spread over the lanes: every lane is used.
    assert gate.max_running == lanes
    for key in keys:
        assert [r.offset for r in gate.started if r.key == key] == [
            m.offset() for m in msgs if m.key() == key
        ]
    await until(lambda: h.runner.counters.completed == len(msgs))
    assert await h.finish() == [(TOPIC, 0, 40, "")]


async def test_records_without_a_key_are_ordered_by_partition(
    make: Callable[..., Harness],
) -> None:
    gate = Gate(lane_of=by_key)  # key None -> one lane per partition
    h = make(gate, partitions=(0, 1), ordering="key")
    msgs = []
    for offset in range(24):
        key = None if offset % 3 else b"k%d" % offset
        msgs.append(Msg(offset % 2, offset, key))
    h.ingest(msgs)
    await until(lambda: len(gate.running) >= 2)
    await release_randomly(gate, random.Random(9), len(msgs))
    assert gate.violations == []
    for p in (0, 1):
        unkeyed = [m.offset() for m in msgs if m.partition() == p and m.key() is None]
        assert [r.offset for r in gate.started if r.partition == p and r.key is None] == unkeyed
    # Keyed records ran alongside the unkeyed ones (they are not behind the partition lane).
    assert gate.max_running > 2
    await until(lambda: h.runner.counters.completed == len(msgs))
    await h.finish()


# ---------------------------------------------------------------- failures and commits


async def test_a_failed_record_pins_the_commit_position(make: Callable[..., Harness]) -> None:
    gate = Gate(fail=[(0, 2)])
    h = make(gate, ordering="key")
    msgs = [Msg(0, offset, b"k%d" % offset) for offset in range(6)]
    h.ingest(msgs)
    await until(lambda: len(gate.running) == 6)
    for offset in range(6):
        gate.release(0, offset)
    await until(lambda: h.runner.counters.completed + h.runner.counters.failed == 6)
    assert h.runner.counters.failed == 1
    assert h.runner.counters.completed == 5
    assert h.runner.counters.timeouts == 0

    commits_before = len(h.control.commits)
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert (position, decode_done(position, metadata)) == (2, {3, 4, 5})
    assert h.control.commits[-1][1] is True  # asynchronous as asked
    assert len(h.control.commits) == commits_before + 1
    # Nothing moved: the next commit sends nothing.
    h.runner.commit(asynchronous=True)
    assert len(h.control.commits) == commits_before + 1

    # Later records keep completing behind the failed one; it still pins the partition.
    h.ingest([Msg(0, 6, b"k6"), Msg(0, 7, b"k7")])
    await until(lambda: len(gate.running) == 2)
    gate.release(0, 6)
    gate.release(0, 7)
    await until(lambda: h.runner.counters.completed == 7)
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert (position, decode_done(position, metadata)) == (2, {3, 4, 5, 6, 7})
    assert await h.finish() == [(TOPIC, 0, 2, encode_done(2, {3, 4, 5, 6, 7}))]


@pytest.mark.parametrize("seed", range(4))
async def test_commit_metadata_carries_completed_offsets_above_the_watermark(
    make: Callable[..., Harness], seed: int
) -> None:
    rnd = random.Random(seed)
    gate = Gate()
    h = make(gate, partitions=(0, 1), ordering="none")
    offsets = {p: sorted(rnd.sample(range(100), 12)) for p in (0, 1)}
    h.ingest([Msg(p, o, None) for p in (0, 1) for o in offsets[p]])
    await until(lambda: len(gate.running) == 24)
    finished = {p: set(rnd.sample(offsets[p], 7)) for p in (0, 1)}
    for p in (0, 1):
        for o in finished[p]:
            gate.release(p, o)
    await until(lambda: h.runner.counters.completed == 14)
    committed = h.committed_now()
    for p in (0, 1):
        expected = next((o for o in offsets[p] if o not in finished[p]), offsets[p][-1] + 1)
        position, metadata = committed[(TOPIC, p)]
        assert position == expected
        assert decode_done(position, metadata) == {o for o in finished[p] if o > position}
    for p in (0, 1):
        for o in offsets[p]:
            gate.release(p, o)
    await until(lambda: h.runner.counters.completed == 24)
    assert sorted(await h.finish()) == [
        (TOPIC, 0, offsets[0][-1] + 1, ""),
        (TOPIC, 1, offsets[1][-1] + 1, ""),
    ]


async def test_commit_timer_and_commit_every(make: Callable[..., Harness]) -> None:
    gate = Gate()
    h = make(gate, ordering="none", commit_interval=5.0, commit_every=3)
    h.ingest([Msg(0, o, None) for o in range(4)])
    await until(lambda: len(gate.running) == 4)
    gate.release(0, 0)
    gate.release(0, 1)
    await until(lambda: h.runner.counters.completed == 2)
    await settle()
    assert h.control.commits == []  # 2 < commit_every and no time passed
    gate.release(0, 2)
    await until(lambda: h.control.commits, what="commit_every triggers a commit")
    assert h.control.last_committed() == {(TOPIC, 0): (3, "")}
    gate.release(0, 3)
    await until(lambda: h.runner.counters.completed == 4)
    await settle()
    assert len(h.control.commits) == 1
    await advance_until(h.clock, lambda: len(h.control.commits) == 2, step=1.0, limit=6.0)
    assert h.clock.now() >= 5.0
    assert h.control.last_committed() == {(TOPIC, 0): (4, "")}
    await h.finish()


async def test_pause_at_max_buffered_and_resume_at_half(make: Callable[..., Harness]) -> None:
    gate = Gate()
    h = make(gate, partitions=(0, 1), ordering="none", max_buffered=6)
    h.ingest([Msg(0, o, None) for o in range(5)])
    await until(lambda: len(gate.running) == 5)
    assert h.control.pauses == []
    h.ingest([Msg(0, 5, None), Msg(1, 0, None)])
    assert h.control.pauses == [[(TOPIC, 0)]]
    assert (h.parts[0].paused, h.parts[1].paused) == (True, False)
    h.ingest([Msg(0, 6, None)])  # already in flight at the client: no second pause
    assert h.control.pauses == [[(TOPIC, 0)]]
    await until(lambda: len(gate.running) == 8)

    # Completions above the watermark do not shrink the buffer.
    for o in (6, 5, 4):
        gate.release(0, o)
    await until(lambda: h.runner.counters.completed == 3)
    await settle()
    assert h.control.resumes == []
    # 7 buffered (0..6): finishing 0, 1, 2 in order shrinks it one by one, still above half.
    for o, buffered in ((0, 6), (1, 5), (2, 4)):
        gate.release(0, o)

        def shrunk(n: int = buffered) -> bool:
            return len(h.parts[0].tracker) == n

        await until(shrunk)
        assert h.control.resumes == []
    gate.release(0, 3)  # 0..6 all done: buffer empty, well under half of 6
    await until(lambda: len(h.parts[0].tracker) == 0)
    assert h.control.resumes == [[(TOPIC, 0)]]
    assert not h.parts[0].paused
    gate.release(1, 0)
    await until(lambda: h.runner.counters.completed == 8)
    await h.finish()


async def test_resume_exactly_when_the_buffer_falls_to_half(make: Callable[..., Harness]) -> None:
    gate = Gate()
    h = make(gate, ordering="none", max_buffered=4)
    h.ingest([Msg(0, o, None) for o in range(4)])
    assert h.control.pauses == [[(TOPIC, 0)]]
    await until(lambda: len(gate.running) == 4)
    gate.release(0, 0)
    await until(lambda: len(h.parts[0].tracker) == 3)
    await settle()
    assert h.control.resumes == []
    gate.release(0, 1)
    await until(lambda: h.control.resumes == [[(TOPIC, 0)]], what="resume at 2 of 4 buffered")
    assert len(h.parts[0].tracker) == 2
    for o in (2, 3):
        gate.release(0, o)
    await until(lambda: h.runner.counters.completed == 4)
    await h.finish()


# ---------------------------------------------------------------- drain and revoke


async def test_drain_waits_for_in_flight_records_and_starts_no_new_ones(
    make: Callable[..., Harness],
) -> None:
    gate = Gate(lane_of=by_key)
    h = make(gate, ordering="key")
    h.ingest([Msg(0, 0, b"a"), Msg(0, 1, b"a"), Msg(0, 2, b"b")])
    await until(lambda: len(gate.running) == 2)
    drain = asyncio.ensure_future(h.runner.drain())
    await settle()
    gate.release(0, 2)
    await until(lambda: h.runner.counters.completed == 1)
    await settle()
    assert not drain.done()  # offset 0 still runs
    gate.release(0, 0)
    positions = await asyncio.wait_for(drain, 2.0)
    # Offset 1 was queued behind 0 and never started: the position stops there.
    assert gate.started_keys() == [(0, 0), (0, 2)]
    assert positions == [(TOPIC, 0, 1, encode_done(1, {2}))]
    assert decode_done(1, positions[0][3]) == {2}
    # Intake is closed after a drain.
    h.ingest([Msg(0, 3, b"c")])
    assert h.runner.counters.consumed == 3
    h.close()


async def test_drain_gives_up_after_drain_timeout_of_clock_time(
    make: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = make(gate, ordering="none", drain_timeout=5.0, timeout=1000.0)
    h.ingest([Msg(0, o, None) for o in range(3)])
    await until(lambda: len(gate.running) == 3)
    gate.release(0, 1)
    gate.release(0, 2)
    await until(lambda: h.runner.counters.completed == 2)
    drain = asyncio.ensure_future(h.runner.drain())
    await settle()
    for _ in range(9):  # 4.5 s: not yet
        h.clock.advance(0.5)
        await settle()
    assert not drain.done()
    await advance_until(h.clock, drain.done, step=0.5, limit=2.0)
    assert h.clock.now() >= 5.0
    # Committed below the stuck record, with what finished above it.
    assert drain.result() == [(TOPIC, 0, 0, encode_done(0, {1, 2}))]
    assert list(gate.running) == [(0, 0)]
    h.close()
    await until(lambda: gate.cancelled, what="close() cancels the stuck handler")


async def test_revoke_drops_queued_records_and_waits_for_in_flight_ones(
    make: Callable[..., Harness],
) -> None:
    gate = Gate(lane_of=by_key)
    h = make(gate, partitions=(0, 1), ordering="key", concurrency=2)
    # p0: key a runs 0 with 1..3 queued behind it; p1: x runs; p0 key b waits for a permit.
    h.ingest([Msg(0, o, b"a") for o in range(4)] + [Msg(1, 10, b"x"), Msg(0, 4, b"b")])
    await until(lambda: len(gate.running) == 2)
    assert sorted(gate.running) == [(0, 0), (1, 10)]

    revoke = asyncio.ensure_future(h.runner.revoke([(TOPIC, 0)]))
    await settle()
    assert not revoke.done()  # 0@0 is in flight
    gate.release(1, 10)  # frees a permit: the queued p0 lane "b" must not run now
    await until(lambda: h.runner.counters.completed == 1)
    await settle()
    assert not revoke.done()
    gate.release(0, 0)
    offsets = await asyncio.wait_for(revoke, 2.0)
    assert offsets == [(TOPIC, 0, 1, "")]
    assert gate.started_keys() == [(0, 0), (1, 10)]
    assert h.runner.counters.dropped_on_revoke == 4  # 1, 2, 3 and 4 never ran
    assert (TOPIC, 0) not in h.runner.parts

    # Records still arriving for the revoked partition are dropped; the other one runs on.
    h.ingest([Msg(0, 5, b"a"), Msg(1, 11, b"x")])
    assert h.runner.counters.dropped_unassigned == 1
    await until(lambda: (1, 11) in gate.running)
    gate.release(1, 11)
    await until(lambda: h.runner.counters.completed == 3)
    assert await h.finish() == [(TOPIC, 1, 12, "")]


async def test_a_completion_after_the_revoke_deadline_is_ignored(
    make: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = make(gate, partitions=(0, 1), ordering="none", drain_timeout=3.0, timeout=1000.0)
    h.ingest([Msg(0, 0, None), Msg(0, 1, None), Msg(1, 0, None)])
    await until(lambda: len(gate.running) == 3)
    gate.release(0, 1)
    await until(lambda: h.runner.counters.completed == 1)
    revoke = asyncio.ensure_future(h.runner.revoke([(TOPIC, 0)]))
    await settle()
    await advance_until(h.clock, revoke.done, step=0.5, limit=4.0)
    assert h.clock.now() >= 3.0
    assert revoke.result() == [(TOPIC, 0, 0, encode_done(0, {1}))]
    commits = list(h.control.commits)

    gate.release(0, 0)  # the stuck record finishes after its partition is gone
    await until(lambda: h.runner.counters.late_completions == 1)
    assert h.runner.counters.completed == 1
    assert h.control.commits == commits
    # Nothing about the revoked partition is ever committed again.
    h.runner.commit(asynchronous=True)
    assert h.control.commits[-1] == ([(TOPIC, 1, 0, "")], True)
    gate.release(1, 0)
    await until(lambda: h.runner.counters.completed == 2)
    assert await h.finish() == [(TOPIC, 1, 1, "")]


# ---------------------------------------------------------------- timeouts, threads, skips


async def test_a_hung_async_handler_is_cancelled_after_timeout(
    make: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = make(gate, ordering="key", timeout=2.0, retry=RetryPolicy(max_attempts=1))
    h.ingest([Msg(0, 0, b"stuck"), Msg(0, 1, b"ok")])
    await until(lambda: len(gate.running) == 2)
    gate.release(0, 1)
    await until(lambda: h.runner.counters.completed == 1)
    for _ in range(7):  # 1.75 s: still running
        h.clock.advance(0.25)
        await settle()
    assert gate.cancelled == [] and h.runner.counters.timeouts == 0
    await advance_until(h.clock, lambda: h.runner.counters.timeouts == 1, step=0.25, limit=0.5)
    assert h.clock.now() <= 2.0 + 0.25  # within one watchdog tick of the timeout
    assert [r.offset for r in gate.cancelled] == [0]  # CancelledError reached the handler
    assert h.runner.counters.failed == 1
    assert h.runner.counters.completed == 1
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert (position, decode_done(position, metadata)) == (0, {1})

    # The worker survives its cancelled call: other keys keep flowing (the timed-out record,
    # out of attempts and with no dead-letter topic, is parked and holds only its own key).
    h.ingest([Msg(0, 2, b"other")])
    await until(lambda: (0, 2) in gate.running)
    gate.release(0, 2)
    await until(lambda: h.runner.counters.completed == 2)
    assert await h.finish() == [(TOPIC, 0, 0, encode_done(0, {1, 2}))]


async def test_a_sync_handler_runs_on_a_thread(make: Callable[..., Harness]) -> None:
    loop_thread = threading.get_ident()
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def handler(rec: Record) -> None:
        with lock:
            calls.append((rec.offset, threading.get_ident()))

    h = make(handler, ordering="key")
    h.ingest([Msg(0, o, b"k%d" % (o % 3)) for o in range(9)])
    await until(lambda: h.runner.counters.completed == 9)
    assert sorted(o for o, _ in calls) == list(range(9))
    assert all(ident != loop_thread for _, ident in calls)
    assert h.committed_now() == {(TOPIC, 0): (9, "")}
    assert await h.finish() == [(TOPIC, 0, 9, "")]


async def test_a_timed_out_sync_handler_is_abandoned_but_keeps_its_permit(
    make: Callable[..., Harness],
) -> None:
    unblock = threading.Event()
    entered = threading.Event()

    def handler(rec: Record) -> None:
        if rec.offset == 0:
            entered.set()
            unblock.wait(5.0)

    h = make(handler, ordering="none", timeout=1.0, retry=RetryPolicy(max_attempts=1))
    try:
        h.ingest([Msg(0, 0, None)])
        await until(entered.is_set, what="the handler thread started")
        await advance_until(h.clock, lambda: h.runner.counters.timeouts == 1, step=0.125, limit=1.5)
        # Failed at once, but the thread cannot be stopped: it still counts against the cap.
        assert h.runner.counters.failed == 1
        assert h.runner.abandoned_threads == 1
        assert h.runner.permits_held == 1
        assert h.committed_now()[(TOPIC, 0)] == (0, "")
    finally:
        unblock.set()
    await until(lambda: h.runner.abandoned_threads == 0 and h.runner.permits_held == 0)
    assert h.runner.counters.completed == 0  # a late thread result never completes it
    assert await h.finish() == [(TOPIC, 0, 0, "")]


async def test_a_sync_handler_that_never_returns_is_left_stuck_and_its_record_settled(
    make: Callable[..., Harness],
) -> None:
    # One permit: before the fix, the record waited for its thread forever, holding the permit,
    # so nothing after it ever ran and the partition's commits stayed pinned.
    unblock = threading.Event()

    def handler(rec: Record) -> None:
        if rec.offset == 0:
            unblock.wait(30.0)  # "never", within this test

    h = make(
        handler, ordering="none", timeout=1.0, retry=RetryPolicy(max_attempts=1), concurrency=1
    )
    try:
        h.ingest([Msg(0, 0, None), Msg(0, 1, None)])
        await advance_until(h.clock, lambda: h.runner.counters.timeouts == 1, step=0.125, limit=1.5)
        assert h.runner.permits_held == 1, "the timeout alone keeps waiting for the thread"
        # As long again as the timeout: the thread is stuck, the record settles without it.
        # Offset 1 then runs on a new thread: real time, which a loaded machine may take long
        # to give, so it is waited for in real time once the clock has passed the grace.
        for _ in range(10):
            h.clock.advance(0.125)
            await settle()
        await until(lambda: h.runner.counters.completed == 1)
        assert h.runner.counters.failed == 1
        assert h.runner.abandoned_threads == 1, "the stuck thread is still counted"
        # The permit goes back on the loop after the completion is counted (a loaded machine
        # shows the gap): waited for, and it must come back.
        await until(lambda: h.runner.permits_held == 0)
    finally:
        unblock.set()
    await until(lambda: h.runner.abandoned_threads == 0)
    assert h.runner.counters.completed == 1  # the late return never completes offset 0
    await h.finish()


async def test_a_failing_sync_handler_leaves_its_record_uncommitted(
    make: Callable[..., Harness],
) -> None:
    def handler(rec: Record) -> None:
        if rec.offset == 1:
            raise ValueError("bad record")

    h = make(handler, ordering="none")
    h.ingest([Msg(0, o, None) for o in range(3)])
    await until(lambda: h.runner.counters.completed + h.runner.counters.failed == 3)
    assert h.runner.counters.failed == 1
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert (position, decode_done(position, metadata)) == (1, {2})
    await h.finish()


async def test_skip_offsets_complete_without_calling_the_handler(
    make: Callable[..., Harness],
) -> None:
    gate = Gate()
    part = PartitionState(TOPIC, 0, skip={1, 3, 4})
    h = make(gate, partitions=[part], ordering="none")
    h.ingest([Msg(0, o, None) for o in range(6)])
    await until(lambda: len(gate.running) == 3)
    await settle()
    assert sorted(gate.running) == [(0, 0), (0, 2), (0, 5)]
    assert h.runner.counters.skipped == 3
    assert part.skip == set()  # each skip is used once
    position, metadata = h.committed_now()[(TOPIC, 0)]
    assert (position, decode_done(position, metadata)) == (0, {1, 3, 4})
    for o in (0, 2, 5):
        gate.release(0, o)
    await until(lambda: h.runner.counters.completed == 6)
    assert await h.finish() == [(TOPIC, 0, 6, "")]


async def test_client_errors_and_unassigned_partitions_are_counted_not_run(
    make: Callable[..., Harness],
) -> None:
    gate = Gate()
    h = make(gate, ordering="none")
    h.ingest([Msg(0, 0, None, error="broker down"), Msg(7, 0, None)])
    assert h.runner.counters.client_errors == 1
    assert h.runner.counters.dropped_unassigned == 1
    assert h.runner.counters.consumed == 0
    await settle()
    assert gate.started == []
    assert await h.finish() == []


async def test_an_out_of_order_offset_never_lets_the_commit_pass_unhandled_records(
    make: Callable[..., Harness],
) -> None:
    # A client that rewinds a partition (seek, offset reset) hands the runner an offset below
    # one it already delivered; the tracker rejects it with ValueError from inside ``ingest``,
    # which then abandons the rest of the batch. Whatever the runner does about the bad record
    # (skip it, or refuse all further intake), the *other* records of that batch must never be
    # passed by the commit position while later batches are ingested and completed.
    handled: list[tuple[int, int]] = []

    async def handler(rec: Record) -> None:
        handled.append((rec.partition, rec.offset))

    h = make(handler, partitions=(0, 1), ordering="none")
    h.ingest([Msg(0, 5, None)])
    with contextlib.suppress(ValueError, LanehouseError):
        h.ingest([Msg(0, 3, None), Msg(1, 0, None)])
    with contextlib.suppress(ValueError, LanehouseError):  # refusing intake is a valid fix
        h.ingest([Msg(1, 1, None)])  # the next batch from the client
    await until(lambda: not h.runner.busy)
    committed = h.committed_now()
    if (TOPIC, 1) in committed:
        position = committed[(TOPIC, 1)][0]
        unhandled = [o for o in range(position) if (1, o) not in handled]
        assert unhandled == [], f"p1 committed at {position} but never handled {unhandled}"
    await h.finish()


async def test_an_unordered_retry_rejoins_the_lane_that_records_arrived_in_meanwhile(
    make: Callable[..., Harness],
) -> None:
    """ordering: none: while a failed record waits for its retry, later records of the
    partition get a new lane; the retry must join it, and every record must complete."""
    attempts: Counter[int] = Counter()
    go_on = asyncio.Event()

    async def fails_once_at_0(rec: Record) -> None:
        attempts[rec.offset] += 1
        if rec.offset == 0 and attempts[0] == 1:
            raise RuntimeError("once")
        if rec.offset == 1:
            await go_on.wait()

    retry = RetryPolicy(max_attempts=3, backoff=1.0, jitter=False)
    h = make(fails_once_at_0, ordering="none", concurrency=1, retry=retry)
    h.ingest([Msg(0, 0, b"a")])
    await until(lambda: h.runner.counters.failed == 1)
    h.ingest([Msg(0, 1, b"b"), Msg(0, 2, b"c")])
    await until(lambda: attempts[1] == 1)  # 1 runs, 2 waits in the new lane
    h.clock.advance(1.0)  # the retry of 0 is due while the new lane still holds 2
    await settle()
    go_on.set()
    await until(lambda: h.runner.counters.completed == 3)
    assert attempts == {0: 2, 1: 1, 2: 1}
    assert not h.runner._resolver._failures, "a retried success left its failure history"
    assert await h.finish() == [(TOPIC, 0, 3, encode_done(3, set()))]


async def test_a_drain_ends_batch_gathering_at_once_and_starts_no_batch(
    make: Callable[..., Harness],
) -> None:
    calls: list[list[Record]] = []

    async def handler(records: list[Record]) -> None:
        calls.append(records)

    h = make(handler, mode="batch", batch_size=10, batch_max_wait=60.0, ordering="none")
    h.ingest([Msg(0, 0, b"a"), Msg(0, 1, b"b")])
    await until(lambda: h.clock.sleeping == 1)  # a worker gathers, waiting for more or time
    assert await h.finish() == [(TOPIC, 0, 0, encode_done(0, set()))]  # nothing completed
    assert calls == [], "a batch started after the drain began"
