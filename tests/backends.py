"""One test-side interface over the in-memory broker, a real Tansu broker and a real
pulsar-lite broker.

Contract tests take the ``backend`` fixture and run unchanged on all three; where a backend has
a known gap (Tansu drops commit metadata), the test marks it ``xfail(strict=True)`` so the gap
closing is noticed too.

Pulsar has no committed offsets: :meth:`PulsarBackend.committed` reports, in the Kafka shape,
the produced index of the first message the subscription has not acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pulsar
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from consumers import ConsumerApp, WorkloadSummary
from consumers.backends.base import ConsumerFactory, ProducerFactory
from consumers.backends.kafka.consumer import (
    committed_offsets,
    kafka_consumer_factory,
    kafka_producer_factory,
    log_end_offsets,
)
from consumers.backends.memory import MemoryBroker
from consumers.backends.pulsar.client import PulsarSettings
from consumers.backends.pulsar.consumer import pulsar_consumer_factory
from consumers.backends.pulsar.probe import PROBE_PROPERTY, MessageKey, message_key
from consumers.backends.pulsar.probe import unacknowledged as pulsar_unacknowledged
from consumers.backends.pulsar.producer import pulsar_producer_factory
from consumers.dev.embedded.pulsar import (
    PULSAR_TEST_CLIENT_KWARGS,
    PulsarLiteBroker,
    validate_pulsar_topic,
)
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker, create_topic

Produced = Sequence[tuple[bytes | None, bytes | None]]


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
    #: A restart does not hand back records completed above the committed position: Kafka
    #: through commit metadata (Tansu drops it), Pulsar through per-message acknowledgements.
    remembers_done_work: bool
    #: How it remembers: Kafka hands completed records back after a restart and the engine skips
    #: them (counted as ``skipped``); Pulsar's broker never delivers acknowledged ones again.
    hands_back_done_work: bool

    def make_topic(self, partitions: int) -> str: ...
    def produce(self, topic: str, records: Produced) -> None: ...
    def factory(self, group: str) -> ConsumerFactory: ...
    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]: ...
    def log_end(self, topic: str, partitions: int) -> dict[int, int]: ...
    def producer_factory(self) -> ProducerFactory: ...
    def read(self, topic: str, partitions: int) -> list[list[Stored]]: ...


class MemoryBackend:
    name = "memory"
    remembers_done_work = True
    hands_back_done_work = True

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
    remembers_done_work = False
    hands_back_done_work = True

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
            while len(at_eof) < partitions:
                assert time.monotonic() < deadline, f"{topic} not read to its end within 30 s"
                for m in consumer.consume(10_000, 0.2):
                    error = m.error()
                    partition = m.partition()
                    assert partition is not None  # records and EOF events carry one
                    if error is not None:
                        assert error.code() == KafkaError._PARTITION_EOF, error
                        at_eof.add(partition)
                    else:
                        offset = m.offset()
                        assert offset is not None
                        out[partition].append(
                            Stored(partition, offset, m.key(), m.value(), _kafka_headers(m))
                        )
            return out
        finally:
            consumer.close()


def _kafka_headers(message: Message) -> dict[str, bytes]:
    """A consumed record's headers; the tests write only bytes values."""
    headers = message.headers() or []
    assert isinstance(headers, list), headers  # consumed records carry a list of pairs
    out: dict[str, bytes] = {}
    for name, value in headers:
        assert isinstance(value, bytes), (name, value)
        out[name] = value
    return out


def unacknowledged(broker: PulsarLiteBroker, subscription: str, topic: str) -> list[MessageKey]:
    return pulsar_unacknowledged(broker.url, subscription, topic)


class PulsarBackend:
    """pulsar-lite: non-partitioned topics (it has no per-topic partition count), so a test's
    ``partitions`` all map to partition 0 and the others stay empty."""

    name = "pulsar"
    remembers_done_work = True
    hands_back_done_work = False

    def __init__(self, broker: PulsarLiteBroker) -> None:
        self.broker = broker
        self._produced: dict[str, dict[MessageKey, int]] = {}

    def _client(self) -> pulsar.Client:
        return pulsar.Client(self.broker.url, **PULSAR_TEST_CLIENT_KWARGS)

    def make_topic(self, partitions: int) -> str:
        return validate_pulsar_topic(f"t-{uuid.uuid4().hex[:8]}")

    def produce(self, topic: str, records: Produced) -> None:
        """Unbatched, so each message is its own entry and acknowledgements are exact."""
        client = self._client()
        try:
            producer = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            ids: list[pulsar.MessageId | None] = [None] * len(records)
            failures: list[str] = []

            def sent(index: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
                def done(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
                    if result == pulsar.Result.Ok:
                        ids[index] = message_id
                    else:
                        failures.append(str(result))

                return done

            for index, (key, value) in enumerate(records):
                producer.send_async(
                    value or b"", sent(index), partition_key=key.decode() if key else None
                )
            producer.flush()
            producer.close()
        finally:
            client.close()
        if failures or any(message_id is None for message_id in ids):
            raise AssertionError(f"produce failed: {failures[:3]}")
        produced = self._produced.setdefault(topic, {})
        for message_id in ids:
            assert message_id is not None
            produced[message_key(message_id)] = len(produced)

    def settings(self, group: str, **consumer_options: object) -> PulsarSettings:
        return PulsarSettings(self.broker.url, group, consumer_options=consumer_options)

    def factory(self, group: str, **consumer_options: object) -> ConsumerFactory:
        return pulsar_consumer_factory(self.settings(group, **consumer_options))

    def produced_indices(self, topic: str, keys: list[MessageKey]) -> list[int]:
        """Which of the produced messages (0, 1, ... in produce order) ``keys`` are, sorted;
        keys of messages this backend did not produce (markers) are left out."""
        produced = self._produced.get(topic, {})
        return sorted(produced[key] for key in keys if key in produced)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """The produced index of the first message ``group`` has not acknowledged (the Kafka
        shape); run only while the engine's consumer is closed."""
        produced = self._produced.get(topic, {})
        unacked = self.produced_indices(topic, unacknowledged(self.broker, group, topic))
        first = min(unacked, default=len(produced))
        return {p: (first if p == 0 else 0) for p in range(partitions)}

    def log_end(self, topic: str, partitions: int) -> dict[int, int]:
        produced = len(self._produced.get(topic, {}))
        return {p: (produced if p == 0 else 0) for p in range(partitions)}

    def producer_factory(self) -> ProducerFactory:
        return pulsar_producer_factory(self.settings("unused"))

    def read(self, topic: str, partitions: int) -> list[list[Stored]]:
        """Every message of ``topic`` (markers left out), in order, on a fresh subscription."""
        out: list[list[Stored]] = [[] for _ in range(partitions)]
        client = self._client()
        try:
            consumer = client.subscribe(
                topic,
                f"reader-{uuid.uuid4().hex[:8]}",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            last = consumer.get_last_message_id()
            end = (last.ledger_id(), last.entry_id())
            offset = 0
            at_end = end[1] < 0
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, f"{topic} not read to its end within 30 s"
                try:  # the rest of the last entry's batch is already in the client's queue
                    msg = consumer.receive(200 if at_end else 5000)
                except pulsar.Timeout:
                    if at_end:
                        break
                    raise
                mid = msg.message_id()
                at_end = at_end or (mid.ledger_id(), mid.entry_id()) >= end
                properties = msg.properties()
                if PROBE_PROPERTY in properties:
                    continue
                key = msg.partition_key()
                out[0].append(
                    Stored(
                        0,
                        offset,
                        key.encode() if key else None,
                        None if msg.has_null_value() else msg.data(),
                        {k: v.encode() for k, v in properties.items()},
                    )
                )
                offset += 1
            consumer.unsubscribe()
        finally:
            client.close()
        return out


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


async def run_sampling_shares(
    app: ConsumerApp, first: str, second: str
) -> tuple[list[WorkloadSummary], list[tuple[int, int]]]:
    """Run ``app`` until idle, sampling the permits two workloads hold every 10 ms while both
    have lanes waiting for one (that is when their weights decide)."""
    samples: list[tuple[int, int]] = []

    async def sample() -> None:
        while True:
            await asyncio.sleep(0.01)
            runners = app.runners
            if len(runners) == 2 and all(r.waiting_lanes > 0 for r in runners.values()):
                samples.append((runners[first].permits_held, runners[second].permits_held))

    sampler = asyncio.ensure_future(sample())
    try:
        summaries = await app.run(until_idle=1.0)
    finally:
        sampler.cancel()
    return summaries, samples
