"""Dead letters for tests: write them as the engine does (to Kafka or Pulsar), read a topic back,
a spec naming one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pulsar
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from consumers.dev.embedded.pulsar import PULSAR_TEST_CLIENT_KWARGS
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG
from consumers.engine.dead_letter_headers import Headers, encode_dead_letter_headers

CLIENT = dict(TEST_CLIENT_CONFIG)
HOUR_MS = 3_600_000


def now_ms() -> int:
    """Now, read when called: a time taken at import would age over a long test run."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Dead:
    """One dead letter to write: the failed record and where it came from."""

    workload: str
    key: bytes | None
    value: bytes | None
    source_topic: str
    source_partition: int = 0
    source_offset: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()
    last_failure_ms: int = field(default_factory=lambda: now_ms())
    dlq_partition: int = 0


def write(bootstrap: str, dlq: str, letters: list[Dead], raw: tuple[bytes, ...] = ()) -> None:
    """Write dead letters as the engine does (plus ``raw`` records without any headers)."""
    failures: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "on_delivery": lambda err, _msg: failures.append(err) if err else None,
        }
    )
    for d in letters:
        headers: list[tuple[str, str | bytes | None]] = list(headers_of(d))
        producer.produce(dlq, d.value, d.key, partition=d.dlq_partition, headers=headers)
    for value in raw:
        producer.produce(dlq, value, b"raw", partition=0)
    assert producer.flush(10) == 0 and not failures, failures


def write_pulsar(url: str, dlq: str, letters: list[Dead], raw: tuple[bytes, ...] = ()) -> None:
    """:func:`write` for a Pulsar topic: headers as properties, one message per entry (no
    producer batching), raw records after the dead letters."""
    client = pulsar.Client(url, **PULSAR_TEST_CLIENT_KWARGS)
    try:
        producer = client.create_producer(dlq, batching_enabled=False)
        for d in letters:
            properties = {name: value.decode() for name, value in headers_of(d)}
            key = d.key.decode() if d.key else None
            producer.send(d.value or b"", properties=properties, partition_key=key)
        for value in raw:
            producer.send(value, partition_key="raw")
        producer.close()
    finally:
        client.close()


def headers_of(d: Dead) -> Headers:
    """The headers the engine gives the dead letter ``d`` (3 attempts, a ``ValueError``)."""
    return encode_dead_letter_headers(
        list(d.headers),
        workload=d.workload,
        source_topic=d.source_topic,
        source_partition=d.source_partition,
        source_offset=d.source_offset,
        attempts=3,
        error_type="ValueError",
        error_message=f"bad record {d.key!r}",
        first_failure_ms=d.last_failure_ms - 1000,
        last_failure_ms=d.last_failure_ms,
    )


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[Any, ...]]:
    """Every record of ``topic`` as (partition, key, value, headers), by partition then offset."""
    consumer = Consumer(
        {
            **CLIENT,
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.list_topics(timeout=10)  # metadata first: the first fetch then starts at once
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[tuple[Any, ...]] = []
    at_end: set[int | None] = set()
    deadline = time.monotonic() + 20
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end"
            for msg in consumer.consume(1000, 0.1):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_end.add(msg.partition())
                else:
                    records.append(
                        (msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers())
                    )
    finally:
        consumer.close()
    return [(p, k, v, h) for p, _, k, v, h in sorted(records, key=lambda r: r[:2])]


def spec_text(bootstrap: str, name: str, source: str, dlq: str | None) -> str:
    config = "".join(f"\n    {k}: {v}" for k, v in TEST_CLIENT_CONFIG.items())
    dead_letter = f"dead_letter:\n  topic: {dlq}\n" if dlq else ""
    return (
        f"name: {name}\n"
        f"source:\n  kind: kafka\n  bootstrap_servers: {bootstrap}\n  topics: [{source}]\n"
        f"  config:{config}\n"
        f"handler: consumers.dev.examples:enrich\n{dead_letter}"
    )
