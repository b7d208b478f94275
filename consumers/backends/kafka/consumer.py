"""confluent-kafka behind the broker contract (:mod:`consumers.backends.base`), with the engine's
defaults.

:class:`KafkaConsumer` is the only place a ``TopicPartition`` or a ``KafkaException`` meets the
engine: positions and partitions go in and out as tuples, failures as ``BrokerError``. Its
``consume`` hands confluent's own messages through (they are ``MessageLike``), so the hot path
pays one Python call per batch for the adapter, not one per record.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from consumers.backends.base import (
    Backend,
    CommitOffset,
    CommitResult,
    ConsumerFactory,
    MessageLike,
    PartitionKey,
    ProducerFactory,
    ProducerLike,
    Rebalance,
)
from consumers.backends.kafka.producer import KafkaProducer, record_limit
from consumers.errors import BrokerError, TopicMissing
from consumers.record import SourceIdentity

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


#: Client properties that only a consumer understands (a producer logs a warning for each).
CONSUMER_ONLY = frozenset(
    {
        "auto.commit.enable",
        "auto.commit.interval.ms",
        "auto.offset.reset",
        "check.crcs",
        "consume.callback.max.messages",
        "coordinator.query.interval.ms",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.protocol.type",
        "group.remote.assignor",
        "heartbeat.interval.ms",
        "isolation.level",
        "max.partition.fetch.bytes",
        "max.poll.interval.ms",
        "offset.store.method",
        "partition.assignment.strategy",
        "session.timeout.ms",
    }
)
CONSUMER_ONLY_PREFIXES = ("fetch.", "queued.")


def producer_properties(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """A consumer's client properties without the ones a producer does not know (it would warn
    about each): the same security and connection settings reach the workload's producers."""
    return {
        k: v
        for k, v in client_config.items()
        if k not in CONSUMER_ONLY and not k.startswith(CONSUMER_ONLY_PREFIXES)
    }


def kafka_producer_factory(
    client_config: Mapping[str, Any], source_config: Mapping[str, Any] | None = None
) -> ProducerFactory:
    """An idempotent producer (ordered, no duplicates on internal retries) for a workload;
    ``linger.ms`` is 5 and ``message.max.bytes`` fits any record the source's consumer
    (``source_config``, else ``client_config``) can deliver (:func:`record_limit`), unless the
    properties say otherwise."""
    limit = record_limit(client_config if source_config is None else source_config)
    config = {
        "linger.ms": 5,
        "message.max.bytes": limit,
        **producer_properties(client_config),
        "enable.idempotence": True,
    }
    return lambda: cast(ProducerLike, KafkaProducer(config))


def kafka_backend(client_config: Mapping[str, Any], landing: bool) -> Backend:
    """A workload's Kafka clients, and topic ids: watched while it runs, and naming the lake's
    files when it lands."""
    identities = kafka_identities(client_config)
    return Backend(
        kafka_consumer_factory(client_config),
        kafka_producer_factory(client_config),
        identify=identities if landing else None,
        incarnations=identities,
    )


class KafkaConsumer:
    """A ``confluent_kafka.Consumer`` speaking the engine's contract."""

    def __init__(self, config: Mapping[str, Any], on_commit: CommitResult) -> None:
        def committed(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            on_commit(_failure(err, partitions))

        merged = {**CONSUMER_DEFAULTS, **config, **ENGINE_OWNED, "on_commit": committed}
        self._client = Consumer(merged)

    def subscribe(
        self,
        topics: list[str],
        *,
        on_assign: Rebalance,
        on_revoke: Rebalance,
        on_lost: Rebalance,
    ) -> None:
        def relay(callback: Rebalance) -> Callable[[Any, list[TopicPartition]], None]:
            return lambda _client, partitions: callback(_keys(partitions))

        self._client.subscribe(
            topics, on_assign=relay(on_assign), on_revoke=relay(on_revoke), on_lost=relay(on_lost)
        )

    def consume(self, num_messages: int, timeout: float) -> Sequence[MessageLike]:
        return cast(Sequence[MessageLike], self._client.consume(num_messages, timeout))

    def commit(self, offsets: list[CommitOffset], asynchronous: bool) -> None:
        tps = [
            TopicPartition(t, p, off, metadata) if metadata else TopicPartition(t, p, off)
            for t, p, off, metadata in offsets
        ]
        try:
            if asynchronous:
                self._client.commit(offsets=tps, asynchronous=True)
                return
            failure = _failure(None, self._client.commit(offsets=tps, asynchronous=False))
        except KafkaException as exc:
            raise BrokerError(f"commit failed: {exc}", retriable=exc.args[0].retriable()) from exc
        if failure is not None:
            raise BrokerError(f"commit failed: {failure}")

    def committed(self, parts: list[PartitionKey], timeout: float) -> list[CommitOffset]:
        try:
            found = self._client.committed([TopicPartition(t, p) for t, p in parts], timeout)
        except KafkaException as exc:
            raise BrokerError(f"reading committed offsets failed: {exc}") from exc
        return [(tp.topic, tp.partition, tp.offset, tp.metadata or "") for tp in found]

    def pause(self, parts: list[PartitionKey]) -> None:
        self._call(self._client.pause, parts)

    def resume(self, parts: list[PartitionKey]) -> None:
        self._call(self._client.resume, parts)

    def seek(self, part: PartitionKey, offset: int) -> None:
        try:
            self._client.seek(TopicPartition(part[0], part[1], offset))
        except KafkaException as exc:
            raise BrokerError(
                f"seek of {part[0]}[{part[1]}] to {offset} failed: {exc}",
                topic=part[0],
                partition=part[1],
                offset=offset,
            ) from exc

    def high_watermark(self, part: PartitionKey) -> int:
        try:
            _, high = self._client.get_watermark_offsets(TopicPartition(*part), cached=True)
        except KafkaException:
            return -1
        return int(high)

    def low_watermark(self, part: PartitionKey) -> int:
        try:
            low, _ = self._client.get_watermark_offsets(TopicPartition(*part), timeout=10)
        except KafkaException:
            return -1
        return int(low)

    def positions(self, parts: list[PartitionKey]) -> dict[PartitionKey, int]:
        try:
            found = self._client.position([TopicPartition(t, p) for t, p in parts])
        except KafkaException:
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def close(self) -> None:
        self._client.close()

    @staticmethod
    def _call(verb: Callable[[list[TopicPartition]], None], parts: list[PartitionKey]) -> None:
        try:
            verb([TopicPartition(t, p) for t, p in parts])
        except KafkaException as exc:
            raise BrokerError(f"{verb.__name__} failed: {exc}") from exc


def _keys(partitions: list[TopicPartition]) -> list[PartitionKey]:
    return [(tp.topic, tp.partition) for tp in partitions]


def _failure(err: KafkaError | None, partitions: list[TopicPartition]) -> str | None:
    """Why a commit failed (the request, or the first partition that failed), or None."""
    if err is not None:
        return str(err)
    for tp in partitions:
        if tp.error is not None:
            return f"{tp.topic}[{tp.partition}]: {tp.error}"
    return None


def kafka_consumer_factory(config: Mapping[str, Any]) -> ConsumerFactory:
    """A factory for :class:`consumers.engine.source.SourceThread`: engine defaults < ``config``."""
    return lambda on_commit: KafkaConsumer(config, on_commit)


#: Errors that mean "no such topic" (by name, by id, or as the client found in metadata).
_MISSING = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID, KafkaError._UNKNOWN_TOPIC}
)


class _SharedAdmin:
    """An admin client shared by every workload of a process that has the same settings (the
    client is thread-safe). One per workload cost a host of 50 workloads 50 more librdkafka
    instances, about 200 threads. It lives while a workload's lookups hold it."""

    __slots__ = ("__weakref__", "client")

    def __init__(self, properties: Mapping[str, Any]) -> None:
        self.client = AdminClient(dict(properties))


_ADMINS: weakref.WeakValueDictionary[str, _SharedAdmin] = weakref.WeakValueDictionary()
_ADMINS_LOCK = threading.Lock()


def _shared_admin(properties: Mapping[str, Any]) -> _SharedAdmin:
    key = repr(sorted(properties.items()))
    with _ADMINS_LOCK:
        admin = _ADMINS.get(key)
        if admin is None:
            admin = _ADMINS[key] = _SharedAdmin(properties)
        return admin


def kafka_identities(config: Mapping[str, Any]) -> Callable[[list[str]], dict[str, SourceIdentity]]:
    """Looks up the current incarnation (topic id) of topics, for the lake's file names and the
    engine's watch on replaced topics; raises :class:`TopicMissing` for a topic the broker does
    not have.

    A topic deleted and recreated under its name gets a new id, so its offsets (restarting at
    0) never collide with the old incarnation's landed files.
    """
    cluster = str(config["bootstrap.servers"])
    properties = producer_properties(config)

    @functools.cache
    def admin() -> _SharedAdmin:
        """Made at the first lookup (the watch asks every few seconds), then kept."""
        return _shared_admin(properties)

    def identify(topics: list[str]) -> dict[str, SourceIdentity]:
        futures = admin().client.describe_topics(TopicCollection(topics), request_timeout=10)
        found = {}
        for topic, future in futures.items():
            try:
                topic_id = str(future.result().topic_id)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() in _MISSING:
                    raise TopicMissing(
                        f"topic {topic!r} does not exist on {cluster}", topic=topic
                    ) from exc
                raise BrokerError(f"describing topic {topic!r} failed: {exc}") from exc
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
