"""One test-side interface over the in-memory broker and a real Tansu broker.

Contract tests take the ``backend`` fixture and run unchanged on both; where a backend has a
known gap (Tansu drops commit metadata), the test marks it ``xfail(strict=True)`` so the gap
closing is noticed too.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from consumers.backends.kafka import committed_offsets, kafka_consumer_factory, log_end_offsets
from consumers.backends.memory import MemoryBroker
from consumers.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker, create_topic
from consumers.producer import ProducerFactory, kafka_producer_factory
from consumers.source import ConsumerFactory

Produced = list[tuple[bytes | None, bytes | None]]


@dataclass(frozen=True)
class Stored:
    """A record as read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


class Backend(Protocol):
    name: str
    returns_commit_metadata: bool

    def make_topic(self, partitions: int) -> str: ...
    def produce(self, topic: str, records: Produced) -> None: ...
    def factory(self, group: str) -> ConsumerFactory: ...
    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]: ...
    def log_end(self, topic: str, partitions: int) -> dict[int, int]: ...
    def producer_factory(self) -> ProducerFactory: ...
    def read(self, topic: str, partitions: int) -> list[list[Stored]]: ...


class MemoryBackend:
    name = "memory"
    returns_commit_metadata = True

    def __init__(self) -> None:
        self.broker = MemoryBroker()

    def make_topic(self, partitions: int) -> str:
        topic = f"t-{uuid.uuid4().hex[:8]}"
        self.broker.create_topic(topic, partitions)
        return topic

    def produce(self, topic: str, records: Produced) -> None:
        for key, value in records:
            self.broker.produce(topic, value, key)

    def factory(self, group: str) -> ConsumerFactory:
        return lambda on_commit: self.broker.consumer(group, on_commit)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        offsets = self.broker.committed_offsets(group, topic)
        return {p: (-1001 if o is None else o) for p, o in enumerate(offsets)}

    def log_end(self, topic: str, partitions: int) -> dict[int, int]:
        return dict(enumerate(self.broker.end_offsets(topic)))

    def producer_factory(self) -> ProducerFactory:
        return self.broker.producer

    def read(self, topic: str, partitions: int) -> list[list[Stored]]:
        return [
            [
                Stored(m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or []))
                for m in part
            ]
            for part in self.broker.read(topic)
        ]


class TansuBackend:
    name = "tansu"
    returns_commit_metadata = False

    def __init__(self, broker: TansuBroker) -> None:
        self.broker = broker

    def make_topic(self, partitions: int) -> str:
        topic = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(self.broker.bootstrap, topic, partitions)
        return topic

    def produce(self, topic: str, records: Produced) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "linger.ms": 5,
                "enable.idempotence": True,
                "message.max.bytes": 10_000_000,
            }
        )
        failures: list[object] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                failures.append(err)

        for key, value in records:
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(30) or failures:
            raise AssertionError(f"produce failed: {failures[:3]}")

    def factory(self, group: str, **config: object) -> ConsumerFactory:
        return kafka_consumer_factory(
            {
                **TEST_CLIENT_CONFIG,
                "bootstrap.servers": self.broker.bootstrap,
                "group.id": group,
                "fetch.max.bytes": 20_000_000,
                **config,
            }
        )

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        return committed_offsets(self.broker.bootstrap, group, topic, partitions)

    def log_end(self, topic: str, partitions: int) -> dict[int, int]:
        return log_end_offsets(self.broker.bootstrap, topic, partitions)

    def producer_factory(self) -> ProducerFactory:
        return kafka_producer_factory(
            {"bootstrap.servers": self.broker.bootstrap, "message.max.bytes": 10_000_000}
        )

    def read(self, topic: str, partitions: int) -> list[list[Stored]]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            }
        )
        out: list[list[Stored]] = [[] for _ in range(partitions)]
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            at_eof: set[int] = set()
            deadline = time.monotonic() + 30
            while len(at_eof) < partitions and time.monotonic() < deadline:
                for m in consumer.consume(10_000, 0.2):
                    if m.error() is None:
                        out[m.partition()].append(
                            Stored(
                                m.partition(),
                                m.offset(),
                                m.key(),
                                m.value(),
                                dict(m.headers() or []),
                            )
                        )
                    else:
                        at_eof.add(m.partition())
            return out
        finally:
            consumer.close()


def assert_all_committed(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """The group's committed offsets equal the log end of every partition."""
    committed = committed_offsets(bootstrap, group, topic, partitions)
    assert committed == log_end_offsets(bootstrap, topic, partitions), committed


def keyed_stream(count: int, keys: int, seed: int = 1) -> list[tuple[bytes, bytes]]:
    """``count`` JSON records over ``keys`` keys, each key numbered 0, 1, 2, ..."""
    rng = random.Random(seed)
    seqs: dict[str, int] = {}
    out = []
    for _ in range(count):
        key = f"k{rng.randrange(keys)}"
        seq = seqs.get(key, 0)
        seqs[key] = seq + 1
        out.append((key.encode(), json.dumps({"key": key, "seq": seq}).encode()))
    return out


async def until(predicate: Callable[[], bool], within: float = 20.0) -> None:
    """Wait for a condition with a deadline, yielding to the loop in between."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.005)
