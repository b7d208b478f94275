"""An oversize dead letter among normal records, checked by the suite's one verifier
(``verifier.py``) on a real broker (Tansu): two 5 MB records whose handler always fails sit in
the middle of 6,000 small ones, and the spec sets no size anywhere (librdkafka's producer keeps a
1 MB limit by default). Each big record reaches the dead-letter topic once and whole, every other
record is handled, and the committed positions reach the log end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from consumers import Record
from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.backends import TansuBackend
from tests.reliability.faults import produced
from tests.reliability.verifier import CommitSampler, verify
from tests.support.processes import finish, source_yaml, start_consumer
from tests.support.recording import record

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 100
#: Small records before the big ones, and as many after them.
HALF = 3_000
BIG = 5_000_000
#: The big records: the first record of two keys (each key has a small second record).
BIG_KEYS = ("big0", "big1")


async def record_or_fail_large(rec: Record) -> None:
    """The consumer's handler: like ``recording.record``, but a record over 1 MiB always fails."""
    if len(rec.value or b"") > 1024 * 1024:
        raise ValueError(f"{len(rec.value or b'')} bytes is more than this handler takes")
    await record(rec)


def write_big(broker: TansuBroker, topic: str) -> None:
    """Each big key's 5 MB record (seq 0), then a small one (seq 1) behind it."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 10_000_000})
    for key in BIG_KEYS:
        big = {"key": key, "seq": 0, "pad": "x" * BIG}
        producer.produce(topic, json.dumps(big).encode(), key.encode())
        producer.produce(topic, json.dumps({"key": key, "seq": 1}).encode(), key.encode())
    assert producer.flush(30) == 0


def test_an_oversize_dead_letter_among_normal_records(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic, dlq = topic_factory(PARTITIONS), topic_factory(1)
    produce_sample(kafka_broker.bootstrap, topic, HALF, KEYS)
    write_big(kafka_broker, topic)
    produce_sample(kafka_broker.bootstrap, topic, HALF, KEYS, key_prefix="m")
    records = produced(kafka_broker, topic, PARTITIONS)
    group = "g-oversize"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"""name: recorder
{source_yaml(kafka_broker, topic, group)}handler: {__name__}:record_or_fail_large
ordering: key
concurrency: 50
commit_interval: 200ms
retries: {{max_attempts: 2, backoff: 100ms, jitter: false}}
dead_letter: {{topic: {dlq}, max_ratio: 0.5}}
"""
    )
    run = tmp_path / "run0.txt"
    started = time.monotonic()
    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        # Before the fix the dead letter was refused 6-7 times a second forever: never idle.
        finish(start_consumer(spec, run, 0.002, "--until-idle", "2"), timeout=60)
        committed = committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS)
        ends = log_end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        verdict = verify(records - {(key, 0) for key in BIG_KEYS}, [run], sampler, committed, ends)
    took = time.monotonic() - started

    dead = [stored for part in TansuBackend(kafka_broker).read(dlq, 1) for stored in part]
    print(
        verdict.line(
            f"oversize dead letter: {len(BIG_KEYS)} records of {BIG:,} bytes dead-lettered "
            f"{len(dead)} times, run to idleness {took:.1f}s"
        )
    )
    assert sorted((s.key, len(s.value or b"")) for s in dead) == [
        (key.encode(), len(json.dumps({"key": key, "seq": 0, "pad": "x" * BIG})))
        for key in BIG_KEYS
    ], "each big record dead-lettered once, whole"
    assert verdict.ok, verdict
