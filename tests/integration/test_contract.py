"""The engine's contract, run unchanged on the in-memory backend and on a real Tansu broker."""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

from consumers import (
    ConsumerApp,
    LanehouseError,
    Record,
    RetryPolicy,
    RunnerSettings,
    Workload,
    WorkloadSummary,
)
from consumers.engine.tracked import TrackedRecord
from tests.backends import Backend, MemoryBackend, keyed_stream
from tests.helpers import until

# The tier comes from tests/conftest.py: integration on a broker, unit in memory.


def workload(backend: Backend, topic: str, group: str, handler, **settings) -> Workload:
    defaults = {"name": "contract", "commit_interval": 0.05, "drain_timeout": 10.0}
    return Workload(
        RunnerSettings(**{**defaults, **settings}), handler, [topic], backend.factory(group)
    )


FAST_RETRY = RetryPolicy(max_attempts=3, backoff=0.01, jitter=False)


def held_behind(records: list[tuple[bytes, bytes]], offset: int) -> list[int]:
    """Offsets after ``offset`` with the same key (they wait behind it in key order)."""
    key = records[offset][0]
    return [i for i, (k, _) in enumerate(records) if k == key and i > offset]


async def fail_offset_3(rec: Record) -> None:
    if rec.offset == 3:
        raise RuntimeError("poison")


async def fail_then_restart(
    backend: Backend, topic: str, group: str
) -> tuple[list[bytes | None], WorkloadSummary]:
    """Run once with offset 3 failing, then again with a handler that records the values it
    sees (not offsets: Pulsar's are numbered afresh in each session)."""
    first = workload(backend, topic, group, fail_offset_3, retry=FAST_RETRY)
    await ConsumerApp([first]).run(until_idle=1.0)
    handled: list[bytes | None] = []

    async def record_values(rec: Record) -> None:
        handled.append(rec.value)

    [summary] = await ConsumerApp([workload(backend, topic, group, record_values)]).run(
        until_idle=1.0
    )
    return handled, summary


async def test_key_order_and_everything_committed(backend: Backend) -> None:
    topic = backend.make_topic(4)
    records = keyed_stream(4000, keys=40)
    backend.produce(topic, records)
    last: dict[bytes | None, int] = {}
    violations = []
    rng = random.Random(7)

    async def handler(rec: Record) -> None:
        if rng.random() < 0.2:
            await asyncio.sleep(rng.random() * 0.003)
        seq = rec.json()["seq"]
        if seq != last.get(rec.key, -1) + 1:
            violations.append((rec.key, last.get(rec.key), seq))
        last[rec.key] = seq

    app = ConsumerApp([workload(backend, topic, "g-order", handler, concurrency=64)])
    [summary] = await app.run(until_idle=1.0)

    assert violations == []
    assert summary.counters["completed"] == len(records)
    assert sum(last.get(k.encode(), -1) + 1 for k in {f"k{i}" for i in range(40)}) == len(records)
    assert backend.committed("g-order", topic, 4) == backend.log_end(topic, 4)


async def test_shutdown_drains_in_flight_and_commits_only_completed(backend: Backend) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(300, keys=10, seed=3)
    backend.produce(topic, records)
    gate = asyncio.Event()
    waiting: set[bytes | None] = set()

    async def handler(rec: Record) -> None:
        if rec.json()["seq"] == 5:  # every key stops at its sixth record until released
            waiting.add(rec.key)
            await gate.wait()

    app = ConsumerApp([workload(backend, topic, "g-drain", handler, concurrency=100)])
    run = asyncio.ensure_future(app.run())
    await until(lambda: len(waiting) == 10)
    app.request_stop()
    await until(lambda: app.runners["contract"].stopping)
    gate.set()
    [summary] = await run

    # The ten in-flight records finished inside the drain, nothing after them started, so the
    # final position is the first record whose seq is above 5.
    first_unstarted = min(i for i, (_, v) in enumerate(records) if json.loads(v)["seq"] > 5)
    assert backend.committed("g-drain", topic, 1) == {0: first_unstarted}
    assert summary.counters["completed"] == sum(json.loads(v)["seq"] <= 5 for _, v in records)


async def test_a_parked_record_pins_the_commit_while_other_keys_complete(
    backend: Backend,
) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(50, keys=5, seed=4)
    backend.produce(topic, records)

    app = ConsumerApp([workload(backend, topic, "g-pin", fail_offset_3, retry=FAST_RETRY)])
    [summary] = await app.run(until_idle=1.0)

    # Three attempts, then (no dead-letter topic) the record is parked: its key waits behind it,
    # every other key completes, and the commit never passes it.
    held_back = held_behind(records, 3)
    assert summary.counters["failed"] == 3
    assert summary.counters["parked"] == 1
    assert summary.counters["completed"] == 50 - 1 - len(held_back)
    assert backend.committed("g-pin", topic, 1) == {0: 3}


async def test_restart_never_loses_a_failed_record(backend: Backend) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(50, keys=5, seed=5)
    backend.produce(topic, records)
    handled, _ = await fail_then_restart(backend, topic, "g-restart")
    assert records[3][1] in handled
    assert backend.committed("g-restart", topic, 1) == {0: 50}


@pytest.fixture
def skips_done_work(backend: Backend, request: pytest.FixtureRequest) -> None:
    if not backend.remembers_done_work:
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="Tansu accepts commit metadata but returns ''")
        )


async def test_restart_skips_work_recorded_in_commit_metadata(
    backend: Backend, skips_done_work: None
) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(50, keys=5, seed=6)
    backend.produce(topic, records)
    handled, summary = await fail_then_restart(backend, topic, "g-skip")
    assert handled == [records[i][1] for i in (3, *held_behind(records, 3))]
    # Offsets 4.. were done except those held behind offset 3; 0-2 lie below the position.
    done_above = 50 - 4 - len(held_behind(records, 3))
    assert summary.counters["skipped"] == (done_above if backend.hands_back_done_work else 0)


async def test_backpressure_bounds_buffered_records(backend: Backend) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(3000, keys=3000, seed=8)  # all distinct keys: nothing serializes
    backend.produce(topic, records)
    gate = asyncio.Event()
    peak = 0

    async def handler(rec: Record) -> None:
        nonlocal peak
        assert isinstance(rec, TrackedRecord)
        peak = max(peak, len(rec.part.tracker))
        await gate.wait()

    app = ConsumerApp([workload(backend, topic, "g-bp", handler, concurrency=10, max_buffered=100)])
    run = asyncio.ensure_future(app.run(until_idle=1.0))
    await until(lambda: "contract" in app.runners and app.runners["contract"].in_flight == 10)
    runner = app.runners["contract"]
    await until(lambda: any(p.paused for p in runner.partitions()))
    gate.set()
    [summary] = await run

    assert summary.counters["completed"] == len(records)
    # One poll is at most max_buffered records and at most two polls wait for the loop.
    assert peak <= 4 * 100
    assert backend.committed("g-bp", topic, 1) == backend.log_end(topic, 1)


async def test_partitions_paused_for_backpressure_deliver_again_after_a_rebalance(
    kafka_backend: Backend,
) -> None:
    """librdkafka keeps a paused flag across a revoke and the next assignment: a member that
    was paused when a second one joined and left must still read its partitions to the end.
    The liveness watch is kept out of the way (``stall_after``): the assignment must do it."""
    backend = kafka_backend
    topic = backend.make_topic(2)
    records = keyed_stream(6000, keys=60, seed=9)
    backend.produce(topic, records)

    async def slow(rec: Record) -> None:
        await asyncio.sleep(0.002)

    settings = {"concurrency": 4, "max_buffered": 100, "stall_after": 3600.0}
    first = ConsumerApp([workload(backend, topic, "g-repaused", slow, **settings)])
    run = asyncio.ensure_future(first.run(until_idle=1.0))
    await until(lambda: "contract" in first.runners)
    runner = first.runners["contract"]
    await until(lambda: len([p for p in runner.partitions() if p.paused]) == 2, within=30)
    second = ConsumerApp([workload(backend, topic, "g-repaused", slow, name="second")])
    joined = asyncio.ensure_future(second.run())
    await until(lambda: "second" in second.runners, within=30)
    await until(lambda: second.runners["second"].counters.completed >= 20, within=30)
    second.request_stop()
    [left] = await joined
    [summary] = await asyncio.wait_for(run, timeout=60)

    assert backend.committed("g-repaused", topic, 2) == backend.log_end(topic, 2)
    assert summary.counters["completed"] + left.counters["completed"] >= len(records)


async def test_a_partition_that_delivers_nothing_is_recovered_by_the_liveness_watch() -> None:
    """Whatever left a partition silent at the client (here a pause behind the engine's back),
    the watch resumes it after ``stall_after`` and the workload reads to the end."""
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(500, keys=5, seed=10))
    clients = []
    factory = backend.factory("g-silent")

    def remember(on_commit):
        client = factory(on_commit)
        clients.append(client)
        return client

    gate = asyncio.Event()

    async def held(rec: Record) -> None:
        await gate.wait()

    # Idleness longer than the watermark refresh (1 s) and the stall bound: the run must see
    # the new records behind the silent partition before it could call itself idle.
    app = ConsumerApp(
        [
            Workload(
                RunnerSettings(name="contract", commit_interval=0.05, stall_after=0.3),
                held,
                [topic],
                remember,
            )
        ]
    )
    run = asyncio.ensure_future(app.run(until_idle=3.0))
    await until(lambda: "contract" in app.runners and app.runners["contract"].in_flight > 0)
    clients[0].pause([(topic, 0)])  # silent: the engine did not ask for it
    backend.produce(topic, keyed_stream(500, keys=5, seed=11))
    gate.set()
    [summary] = await asyncio.wait_for(run, timeout=30)

    assert summary.counters["completed"] == 1000
    assert summary.counters["stall_recoveries"] >= 1
    assert backend.committed("g-silent", topic, 1) == backend.log_end(topic, 1)


async def test_offset_gaps_never_stall_the_watermark() -> None:
    backend = MemoryBackend()  # gaps need compaction or transaction markers: modelled in memory
    topic = backend.make_topic(1)
    for i in range(20):
        backend.broker.produce(topic, b"{}", b"k", partition=0, offset_gap=i % 3)
    done: list[int] = []

    async def handler(rec: Record) -> None:
        done.append(rec.offset)

    await ConsumerApp([workload(backend, topic, "g-gap", handler)]).run(until_idle=0.5)
    end = backend.log_end(topic, 1)
    assert len(done) == 20
    assert backend.committed("g-gap", topic, 1) == end


async def test_offsets_after_the_last_record_are_committed_past_when_idle() -> None:
    """A transaction's marker after the last record is never delivered; the committed offset
    still reaches the log end (the client's position), or lag reads 1 forever."""
    backend = MemoryBackend()
    topic = backend.make_topic(1)
    for _ in range(5):
        backend.broker.produce(topic, b"{}", b"k", partition=0)
    backend.broker.mark(topic, 0)
    done: list[int] = []

    async def handler(rec: Record) -> None:
        done.append(rec.offset)

    await ConsumerApp([workload(backend, topic, "g-marker", handler)]).run(until_idle=1.5)
    assert done == [0, 1, 2, 3, 4]
    assert backend.committed("g-marker", topic, 1) == backend.log_end(topic, 1) == {0: 6}


def first_read_after_committing(backend: Backend, topic: str, start: int) -> list[int | None]:
    """Join ``g-set-back`` committing ``start`` inside ``on_assign``; the first offset read."""
    consumer = backend.factory("g-set-back")(lambda failure: None)

    def assigned(keys: list[tuple[str, int]]) -> None:
        consumer.commit([(topic, 0, start, "")], asynchronous=False)

    consumer.subscribe(
        [topic], on_assign=assigned, on_revoke=lambda k: None, on_lost=lambda k: None
    )
    first: list[int | None] = []  # a client message's offset() may be None
    deadline = time.monotonic() + 30
    while not first and time.monotonic() < deadline:
        first += [m.offset() for m in consumer.consume(10, 0.2) if m.error() is None][:1]
    assert consumer.low_watermark((topic, 0)) == 0
    consumer.close()
    return first


def test_a_commit_inside_on_assign_sets_where_reading_starts(kafka_backend: Backend) -> None:
    """How the engine sets a partition back when a landed file below its position was damaged:
    a synchronous commit inside ``on_assign`` is where reading starts, forward or back; and the
    broker's earliest offset is known."""
    topic = kafka_backend.make_topic(1)
    kafka_backend.produce(topic, keyed_stream(100, keys=5))
    assert first_read_after_committing(kafka_backend, topic, 60) == [60]
    assert first_read_after_committing(kafka_backend, topic, 20) == [20]


def test_duplicate_workload_names_are_rejected() -> None:
    backend = MemoryBackend()
    topic = backend.make_topic(1)

    async def handler(rec: Record) -> None:
        return None

    w = workload(backend, topic, "g", handler)
    with pytest.raises(LanehouseError, match="unique"):
        ConsumerApp([w, w])
