"""confluent-kafka clients with the engine's defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.engine.producer import producer_properties
from consumers.engine.source import ConsumerFactory, ConsumerLike
from consumers.errors import BrokerError
from consumers.landing.files import SourceIdentity

#: Defaults the engine relies on; a workload's ``source.config`` may override the tunables.
CONSUMER_DEFAULTS: dict[str, Any] = {
    # A new group starts at the beginning: landing data must not silently skip history.
    "auto.offset.reset": "earliest",
    # librdkafka's 1 s default idles a fast consumer whenever its local queue is full.
    "fetch.queue.backoff.ms": 10,
    # Eager range rebalances are clean on every broker we run; see docs/operations.md.
    "partition.assignment.strategy": "range",
    "enable.partition.eof": False,
}

#: Properties only the engine sets: it commits explicitly, and only what is durably done.
ENGINE_OWNED: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}


def kafka_consumer_factory(config: Mapping[str, Any]) -> ConsumerFactory:
    """A factory for :class:`consumers.engine.source.SourceThread`: engine defaults < ``config``."""

    def build(on_commit: Callable[[Any, list[TopicPartition]], None]) -> ConsumerLike:
        merged = {**CONSUMER_DEFAULTS, **config, **ENGINE_OWNED, "on_commit": on_commit}
        # confluent-kafka's stubs spell some optional arguments differently than the protocol.
        return cast(ConsumerLike, Consumer(merged))

    return build


def kafka_identities(config: Mapping[str, Any]) -> Callable[[list[str]], dict[str, SourceIdentity]]:
    """Looks up the current incarnation (topic id) of topics, for the lake's file names.

    A topic deleted and recreated under its name gets a new id, so its offsets (restarting at
    0) never collide with the old incarnation's landed files.
    """
    cluster = str(config["bootstrap.servers"])

    def identify(topics: list[str]) -> dict[str, SourceIdentity]:
        admin = AdminClient(producer_properties(config))
        futures = admin.describe_topics(TopicCollection(topics), request_timeout=10)
        found = {}
        for topic, future in futures.items():
            try:
                topic_id = str(future.result().topic_id)
            except KafkaException as exc:
                raise BrokerError(f"describing topic {topic!r} for landing failed: {exc}") from exc
            found[topic] = SourceIdentity("kafka", cluster, topic, topic_id)
        return found

    return identify


def committed_offsets(
    bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 10.0
) -> dict[int, int]:
    """The group's committed position per partition (``-1001`` where nothing is committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=timeout)}
    finally:
        consumer.close()


def log_end_offsets(
    bootstrap: str, topic: str, partitions: int, timeout: float = 30.0
) -> dict[int, int]:
    """Per-partition log end, found by reading each partition to its end.

    Broker-side watermark queries are wrong on Tansu (see docs/operations.md); the offsets of
    the records actually stored are not, and the consumer's *cached* high watermark comes with
    every fetch.
    """
    import time

    from confluent_kafka import OFFSET_BEGINNING

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "lanehouse.log-end-probe",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    ends = {p: 0 for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} to its end took over {timeout:.0f}s")
            for msg in consumer.consume(10_000, 0.5):
                err, partition, offset = msg.error(), msg.partition(), msg.offset()
                if partition is None or offset is None:
                    continue
                if err is None:
                    ends[partition] = max(ends[partition], offset + 1)
                elif err.code() == err._PARTITION_EOF:
                    at_eof.add(partition)
                    ends[partition] = max(ends[partition], offset)
        return ends
    finally:
        consumer.close()
