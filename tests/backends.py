"""One test-side interface over the in-memory broker and a real Tansu broker.

Contract tests take the ``backend`` fixture and run unchanged on both; where a backend has a
known gap (Tansu drops commit metadata), the test marks it ``xfail(strict=True)`` so the gap
closing is noticed too.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from confluent_kafka import Producer

from consumers.backends.kafka import committed_offsets, kafka_consumer_factory, log_end_offsets
from consumers.backends.memory import MemoryBroker
from consumers.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker, create_topic
from consumers.source import ConsumerFactory

Produced = list[tuple[bytes | None, bytes | None]]


class Backend(Protocol):
    name: str
    returns_commit_metadata: bool

    def make_topic(self, partitions: int) -> str: ...
    def produce(self, topic: str, records: Produced) -> None: ...
    def factory(self, group: str) -> ConsumerFactory: ...
    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]: ...
    def log_end(self, topic: str, partitions: int) -> dict[int, int]: ...


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


def assert_all_committed(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """The group's committed offsets equal the log end of every partition."""
    committed = committed_offsets(bootstrap, group, topic, partitions)
    assert committed == log_end_offsets(bootstrap, topic, partitions), committed
