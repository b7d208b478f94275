"""Dead letters and outputs that cannot be written stop the workload within a bound, on the
in-memory broker: a record over the dead-letter topic's size limit (refused for good), a
dead-letter topic that keeps failing past ``write_timeout``, an output over its topic's limit.
Nothing at or above the failing record is committed; records below it are."""

from __future__ import annotations

import time

import pytest

from consumers import (
    ConsumerApp,
    DeadLetterPolicy,
    Forward,
    OutputRecord,
    Record,
    RetryPolicy,
    RunnerSettings,
    SinkWriteError,
    Workload,
)
from tests.backends import MemoryBackend

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

BIG = 5 * 1024 * 1024
LIMIT = 1024 * 1024
#: The offset of the large record among small ones in partition 0.
BIG_AT = 3


def stream(backend: MemoryBackend) -> tuple[str, list[tuple[bytes, bytes]]]:
    """One partition: small records around one 5 MiB record at offset ``BIG_AT``."""
    topic = backend.make_topic(1)
    records = [(b"k%d" % i, b"x" * (BIG if i == BIG_AT else 10)) for i in range(8)]
    backend.produce(topic, records)
    return topic, records


def workload(backend: MemoryBackend, topic: str, handler, **settings) -> Workload:
    defaults = {
        "name": "sizes",
        "commit_interval": 0.02,
        "drain_timeout": 5.0,
        "ordering": "partition",
        "retry": RetryPolicy(max_attempts=1, backoff=0.02, max_backoff=0.05, jitter=False),
    }
    return Workload(
        RunnerSettings(**{**defaults, **settings}),
        handler,
        [topic],
        backend.factory("g"),
        producer_factory=backend.producer_factory(),
    )


async def fails_the_big_one(rec: Record) -> None:
    if len(rec.value or b"") > LIMIT:
        raise ValueError("too big to handle")


async def test_a_dead_letter_over_the_topics_limit_stops_the_workload_at_once() -> None:
    backend = MemoryBackend()
    topic, _ = stream(backend)
    dlq = backend.make_topic(1)
    backend.broker.max_message_bytes[dlq] = LIMIT
    policy = DeadLetterPolicy(dlq, max_ratio=1.0, window=10, write_timeout=60.0)
    app = ConsumerApp([workload(backend, topic, fails_the_big_one, dead_letter=policy)])

    started = time.monotonic()
    with pytest.raises(SinkWriteError) as raised:
        await app.run(until_idle=5.0)
    took = time.monotonic() - started

    error = raised.value
    assert (error.workload, error.kind, error.sink) == ("sizes", "dead letter", dlq)
    assert (error.topic, error.partition, error.offset) == (topic, 0, BIG_AT)
    assert "refused for good" in str(error) and f"{topic}[0]@{BIG_AT}" in str(error)
    assert took < 5.0, "a permanent refusal does not wait for the write timeout"
    assert app.runners["sizes"].counters.dead_letter_write_failures == 1  # sent once, no storm
    assert backend.read(dlq, 1) == [[]]
    assert backend.committed("g", topic, 1) == {0: BIG_AT}  # below the record, never past it


async def test_a_dead_letter_failing_past_its_write_timeout_stops_the_workload() -> None:
    backend = MemoryBackend()
    topic, _ = stream(backend)
    dlq = backend.make_topic(1)
    backend.broker.unavailable.add(dlq)  # transient: each failure is worth another send
    policy = DeadLetterPolicy(dlq, max_ratio=1.0, window=10, write_timeout=0.5)
    app = ConsumerApp([workload(backend, topic, fails_the_big_one, dead_letter=policy)])

    started = time.monotonic()
    with pytest.raises(SinkWriteError, match=r"past dead_letter.write_timeout \(0.5s\)") as raised:
        await app.run(until_idle=10.0)
    took = time.monotonic() - started

    assert raised.value.offset == BIG_AT
    assert app.runners["sizes"].counters.dead_letter_write_failures > 3  # it did send again
    assert 0.5 <= took < 5.0
    assert backend.committed("g", topic, 1) == {0: BIG_AT}


async def test_a_dead_letter_within_the_limits_is_written_whole_and_the_workload_goes_on() -> None:
    backend = MemoryBackend()
    topic, records = stream(backend)
    dlq = backend.make_topic(1)
    backend.broker.max_message_bytes[dlq] = BIG + 65_536
    policy = DeadLetterPolicy(dlq, max_ratio=1.0, window=10)
    app = ConsumerApp([workload(backend, topic, fails_the_big_one, dead_letter=policy)])

    await app.run(until_idle=0.5)

    [[dead]] = backend.read(dlq, 1)
    assert (dead.key, dead.value) == records[BIG_AT]
    assert backend.committed("g", topic, 1) == {0: len(records)}


async def test_an_output_over_its_topics_limit_stops_the_workload() -> None:
    backend = MemoryBackend()
    topic, _ = stream(backend)
    out = backend.make_topic(1)
    backend.broker.max_message_bytes[out] = LIMIT

    async def forward(rec: Record) -> Forward:
        return Forward(OutputRecord(rec.value))

    app = ConsumerApp([workload(backend, topic, forward, output_topic=out)])
    with pytest.raises(SinkWriteError, match="output order is never broken") as raised:
        await app.run(until_idle=5.0)

    assert (raised.value.kind, raised.value.sink, raised.value.offset) == ("output", out, BIG_AT)
    assert backend.committed("g", topic, 1) == {0: BIG_AT}
    assert all(len(stored.value or b"") < LIMIT for stored in backend.read(out, 1)[0])
