"""Outcomes, retries, dead letters and ordered outputs: the same cases in memory and on Tansu."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from consumers import (
    ConsumerApp,
    DeadLetterPolicy,
    DeadLetterRatioExceeded,
    Drop,
    Forward,
    OutputRecord,
    Record,
    Retry,
    RetryPolicy,
    RunnerSettings,
    Workload,
)
from consumers.engine.dead_letter_headers import decode_dead_letter
from tests.backends import Backend, MemoryBackend, keyed_stream
from tests.helpers import until

# The tier comes from tests/conftest.py: integration on a broker, unit in memory.

FAST_RETRY = RetryPolicy(max_attempts=4, backoff=0.05, max_backoff=0.2, jitter=False)


def workload(backend: Backend, topic: str, group: str, handler, **settings) -> Workload:
    defaults = {"name": "outcomes", "commit_interval": 0.05, "drain_timeout": 10.0}
    return Workload(
        RunnerSettings(**{**defaults, **settings}),
        handler,
        [topic],
        backend.factory(group),
        producer_factory=backend.producer_factory(),
    )


async def test_poison_record_retries_in_key_order_then_dead_letters(backend: Backend) -> None:
    topic, dlq = backend.make_topic(4), backend.make_topic(1)
    poison_key = b"poison"
    records = [(poison_key, json.dumps({"key": "poison", "seq": 0}).encode())]
    records += [
        (poison_key, json.dumps({"key": "poison", "seq": i}).encode()) for i in range(1, 51)
    ]
    records += keyed_stream(3000, keys=300, seed=9)
    backend.produce(topic, records)
    handled: list[tuple[bytes | None, int]] = []
    others_done_before_poison_settled: list[int] = []
    attempts = 0

    async def handler(rec: Record) -> None:
        nonlocal attempts
        seq = rec.json()["seq"]
        if rec.key == poison_key and seq == 0:
            attempts += 1
            others_done_before_poison_settled.append(len(handled))
            raise RuntimeError("poison pill")
        handled.append((rec.key, seq))

    w = workload(
        backend,
        topic,
        "g-poison",
        handler,
        retry=FAST_RETRY,
        dead_letter=DeadLetterPolicy(dlq, max_ratio=0.5, window=100),
    )
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)

    assert attempts == 4 and summary.counters["dead_lettered"] == 1
    # Other keys did not wait for the retries: thousands finished between attempts.
    assert others_done_before_poison_settled[-1] > 1000
    # The 50 records behind the poison ran after it, in order.
    poison_seqs = [seq for key, seq in handled if key == poison_key]
    assert poison_seqs == list(range(1, 51))
    [dead] = [r for part in backend.read(dlq, 1) for r in part]
    info = decode_dead_letter(list(dead.headers.items()))
    assert (info.workload, info.source_topic, info.attempts) == ("outcomes", topic, 4)
    assert info.error_type == "RuntimeError" and "poison pill" in info.error_message
    assert info.first_failure_ms <= info.last_failure_ms
    assert dead.key == poison_key and json.loads(dead.value or b"")["seq"] == 0
    assert backend.committed("g-poison", topic, 4) == backend.log_end(topic, 4)


async def test_dead_letter_write_failure_keeps_the_record_uncommitted_until_it_succeeds() -> None:
    backend = MemoryBackend()  # a topic that refuses writes, then recovers, is modelled here
    topic, dlq = backend.make_topic(1), backend.make_topic(1)
    backend.produce(topic, [(b"k", b"{}")] * 5)
    backend.broker.unavailable.add(dlq)

    async def always_fails(rec: Record) -> None:
        raise ValueError("bad")

    w = workload(
        backend,
        topic,
        "g-dlq-down",
        always_fails,
        retry=RetryPolicy(max_attempts=1),
        dead_letter=DeadLetterPolicy(dlq, max_ratio=1.0),
    )
    app = ConsumerApp([w])
    run = asyncio.ensure_future(app.run(until_idle=1.0))
    await until(lambda: "outcomes" in app.runners)
    runner = app.runners["outcomes"]
    await until(lambda: runner.counters.dead_letter_write_failures >= 3)
    assert runner.counters.completed == 0
    assert backend.committed("g-dlq-down", topic, 1) in ({0: -1001}, {0: 0})
    backend.broker.unavailable.discard(dlq)
    await run

    assert len(backend.read(dlq, 1)[0]) == 5
    assert backend.committed("g-dlq-down", topic, 1) == {0: 5}


async def test_safety_valve_stops_a_workload_that_dead_letters_everything(
    backend: Backend,
) -> None:
    topic, dlq = backend.make_topic(2), backend.make_topic(1)
    backend.produce(topic, keyed_stream(500, keys=50, seed=2))

    async def always_fails(rec: Record) -> None:
        raise ValueError("bad deploy")

    w = workload(
        backend,
        topic,
        "g-valve",
        always_fails,
        retry=RetryPolicy(max_attempts=1),
        dead_letter=DeadLetterPolicy(dlq, 0.1, window=100),
    )
    with pytest.raises(DeadLetterRatioExceeded, match="more than 10% of the last 100"):
        await ConsumerApp([w]).run(until_idle=1.0)

    assert sum(len(p) for p in backend.read(dlq, 1)) == 10
    committed = sum(max(o, 0) for o in backend.committed("g-valve", topic, 2).values())
    assert committed < 500


async def test_forwarded_outputs_keep_source_order_per_partition(backend: Backend) -> None:
    topic, out = backend.make_topic(3), backend.make_topic(3)
    backend.produce(topic, keyed_stream(3000, keys=100, seed=4))
    rng = random.Random(5)

    async def handler(rec: Record) -> Forward | Drop:
        if rng.random() < 0.3:
            await asyncio.sleep(rng.random() * 0.004)  # finish out of order
        if rec.offset % 7 == 0:
            return Drop("not interesting")
        body = json.dumps({"p": rec.partition, "o": rec.offset}).encode()
        return Forward(OutputRecord(body), OutputRecord(body, key=b"copy"))

    w = workload(backend, topic, "g-fwd", handler, concurrency=200, output_topic=out)
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)

    outputs = [json.loads(r.value or b"") for part in backend.read(out, 3) for r in part]
    expected = sum(2 for part in backend.read(topic, 3) for r in part if r.offset % 7)
    assert len(outputs) == expected == summary.counters["forwarded"]
    for partition in backend.read(out, 3):  # within each output partition, per source partition
        last: dict[int, int] = {}
        for r in partition:
            src = json.loads(r.value or b"")
            assert src["o"] >= last.get(src["p"], -1), "outputs left their source order"
            last[src["p"]] = src["o"]
    assert summary.counters["dropped_by_handler"] > 0
    assert backend.committed("g-fwd", topic, 3) == backend.log_end(topic, 3)


async def test_a_hung_async_handler_is_cancelled_then_retried(backend: Backend) -> None:
    topic = backend.make_topic(1)
    backend.produce(topic, [(b"k", b"{}")])
    cancelled = asyncio.Event()
    calls = 0

    async def handler(rec: Record) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            try:
                await asyncio.Event().wait()  # hangs forever
            except asyncio.CancelledError:
                cancelled.set()
                raise

    w = workload(backend, topic, "g-hang", handler, timeout=1.0, retry=FAST_RETRY)
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)

    assert cancelled.is_set() and calls == 2
    assert summary.counters["timeouts"] == 1 and summary.counters["completed"] == 1
    assert backend.committed("g-hang", topic, 1) == {0: 1}


async def test_batch_mode_gets_lane_ordered_batches_and_flushes_partial_ones(
    backend: Backend,
) -> None:
    topic = backend.make_topic(2)
    records = keyed_stream(1030, keys=20, seed=12)
    backend.produce(topic, records)
    batches: list[list[Record]] = []
    last: dict[bytes | None, int] = {}
    violations = 0

    async def handler(batch: list[Record]) -> None:
        nonlocal violations
        batches.append(batch)
        for rec in batch:
            seq = rec.json()["seq"]
            violations += seq != last.get(rec.key, -1) + 1
            last[rec.key] = seq

    w = workload(
        backend,
        topic,
        "g-batch",
        handler,
        mode="batch",
        batch_size=100,
        batch_max_wait=0.3,
        concurrency=2,
    )
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)

    assert violations == 0
    assert sum(len(b) for b in batches) == len(records) == summary.counters["completed"]
    assert max(len(b) for b in batches) == 100
    assert any(len(b) < 100 for b in batches), "the partial tail was never flushed"
    assert backend.committed("g-batch", topic, 2) == backend.log_end(topic, 2)


async def test_batch_outcomes_retry_one_record_and_keep_its_key_in_order(
    backend: Backend,
) -> None:
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(200, keys=4, seed=13))
    batches: list[list[tuple[bytes | None, int]]] = []
    done: set[tuple[bytes | None, int]] = set()
    failed_once: set[int] = set()

    async def handler(batch: list[Record]) -> list[Retry | None]:
        batches.append([(rec.key, rec.json()["seq"]) for rec in batch])
        outcomes: list[Retry | None] = []
        for rec in batch:
            if rec.offset % 50 == 10 and rec.offset not in failed_once:
                failed_once.add(rec.offset)
                outcomes.append(Retry(after=0.05))
            else:
                done.add((rec.key, rec.json()["seq"]))
                outcomes.append(None)
        return outcomes

    w = workload(
        backend,
        topic,
        "g-batch-retry",
        handler,
        mode="batch",
        batch_size=64,
        batch_max_wait=0.1,
        retry=FAST_RETRY,
    )
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)

    # A Retry behind another held record of its key is re-run rather than resolved.
    assert 1 <= summary.counters["retries"] <= len(failed_once) == 4
    highest: dict[bytes | None, int] = {}
    for batch in batches:
        per_key: dict[bytes | None, list[int]] = {}
        for key, seq in batch:
            per_key.setdefault(key, []).append(seq)
        for key, seqs in per_key.items():
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "out of lane order"
            assert seqs[0] <= highest.get(key, -1) + 1, f"key {key!r} skipped ahead"
            highest[key] = max(highest.get(key, -1), seqs[-1])
    assert len(done) == 200  # every record handled (at least once)
    assert backend.committed("g-batch-retry", topic, 1) == {0: 200}


async def test_unique_mode_handles_only_the_latest_record_per_key(backend: Backend) -> None:
    topic = backend.make_topic(1)
    records = keyed_stream(600, keys=6, seed=14)
    backend.produce(topic, records)
    handled: list[Record] = []

    async def handler(batch: list[Record]) -> None:
        keys = [r.key for r in batch]
        assert len(keys) == len(set(keys)), "a key appeared twice in a unique batch"
        handled.extend(batch)

    w = workload(
        backend, topic, "g-unique", handler, mode="unique", batch_size=1000, batch_max_wait=0.5
    )
    [summary] = await ConsumerApp([w]).run(until_idle=1.0)

    latest = {key: i for i, (key, _) in enumerate(records)}  # last offset of every key
    assert {r.offset for r in handled} >= set(latest.values())
    assert summary.counters["superseded"] == 600 - len(handled) > 0
    assert backend.committed("g-unique", topic, 1) == {0: 600}
