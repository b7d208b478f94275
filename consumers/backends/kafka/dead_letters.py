"""Kafka's :class:`~consumers.backends.admin.DeadLetterStore`: dead-letter topics read to their
end, replay progress kept in a consumer group, records republished by an idempotent producer.

The end of a partition is found with ``enable.partition.eof`` (never with broker-side watermark
queries, which are wrong on Tansu). Reading covers all partitions at once. A replay's progress
is the group's committed offsets: :meth:`_GroupReader.mark_done` commits past the records
handled, after the caller confirmed their republishing, so a crash republishes at most part of
one batch again and a second run never repeats what the first finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_STORED,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from consumers.backends.admin import Outgoing, StoredRecord
from consumers.backends.kafka.consumer import ENGINE_OWNED, producer_properties
from consumers.errors import BrokerError

log = logging.getLogger(__name__)

#: Records read (and, for replay, republished then committed) per batch.
BATCH: Final = 500
POLL: Final = 0.1  # seconds per consume() call

#: Reading to the end is a one-off: answer fast at the end of a partition instead of idling.
_CONSUMER_DEFAULTS: Final[Mapping[str, Any]] = {
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}
#: Set by the store itself, never taken from a spec's client properties.
_OWNED: Final = frozenset({"group.id", "bootstrap.servers", *ENGINE_OWNED})

ClientConfig = Mapping[str, str | int | float | bool]


class KafkaDeadLetters:
    """Dead-letter topics on one Kafka cluster; ``config`` adds librdkafka properties (security,
    ...; those the store sets are dropped). ``timeout``: how long the broker may stay silent."""

    def __init__(
        self, bootstrap: str, config: ClientConfig | None = None, *, timeout: float = 30.0
    ) -> None:
        self.address = bootstrap
        self.config = {k: v for k, v in (config or {}).items() if k not in _OWNED}
        self.timeout = timeout

    def read_to_end(self, topic: str, reader: str) -> Iterator[StoredRecord]:
        consumer = Consumer(self._consumer_config(reader))
        try:
            partitions = _require(self._topics(consumer), topic, self.address, "dead-letter topic")
            for batch in _ToEnd(consumer, topic, partitions, OFFSET_BEGINNING, self.timeout):
                yield from batch
        finally:
            consumer.close()

    @contextmanager
    def progress_reader(self, topic: str, progress: str) -> Iterator[_GroupReader]:
        consumer = Consumer(self._consumer_config(progress))
        try:
            partitions = _require(self._topics(consumer), topic, self.address, "dead-letter topic")
            yield _GroupReader(consumer, topic, partitions, progress, self.timeout)
        finally:
            consumer.close()

    @contextmanager
    def republisher(self) -> Iterator[_Republisher]:
        sender = _Republisher(self)
        try:
            yield sender
        finally:
            # Anything still queued was never marked done: a rerun republishes it.
            sender.producer.flush(min(self.timeout, 5.0))

    def _consumer_config(self, group: str) -> dict[str, Any]:
        return {
            **_CONSUMER_DEFAULTS,
            **self.config,
            "bootstrap.servers": self.address,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }

    def _topics(self, client: Consumer | Producer) -> dict[str, int]:
        """Every topic's partition count (asking for all topics never auto-creates one)."""
        try:
            metadata = client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise BrokerError(f"cannot read topic metadata from {self.address}: {exc}") from exc
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def _require(topics: Mapping[str, int], topic: str, bootstrap: str, role: str) -> int:
    partitions = topics.get(topic, 0)
    if partitions < 1:
        raise BrokerError(
            f"{role} {topic!r} does not exist on {bootstrap}", topic=topic, retriable=False
        )
    return partitions


class _ToEnd:
    """Reads every partition of a topic from ``start`` until each one reported its end."""

    def __init__(
        self, consumer: Consumer, topic: str, partitions: int, start: int, timeout: float
    ) -> None:
        self._consumer = consumer
        self._topic = topic
        self._partitions = partitions
        self._start = start
        self._timeout = timeout
        self._first: dict[int, int] = {}  # partition -> first offset read (or its end if empty)
        self.scanned = 0

    def __iter__(self) -> Iterator[list[StoredRecord]]:
        """Batches of records (no error events) until every partition reached its end."""
        consumer, topic = self._consumer, self._topic
        consumer.assign([TopicPartition(topic, p, self._start) for p in range(self._partitions)])
        at_end: set[int] = set()
        last_progress = time.monotonic()
        while len(at_end) < self._partitions:
            messages = consumer.consume(BATCH, POLL)
            reached = len(at_end)
            records: list[StoredRecord] = []
            for msg in messages:
                partition, offset, err = msg.partition(), msg.offset(), msg.error()
                if partition is not None and offset is not None:
                    self._first.setdefault(partition, offset)
                if err is None:
                    records.append(_stored(msg))
                elif err.code() == KafkaError._PARTITION_EOF:
                    if partition is not None:
                        at_end.add(partition)
                elif err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise BrokerError(
                        f"reading {topic!r}: {err.str()}", topic=topic, partition=partition
                    )
                else:  # librdkafka retries transient errors itself; the timeout bounds them
                    log.warning("reading %r: %s", topic, err.str())
            self.scanned += len(records)
            now = time.monotonic()
            if records or len(at_end) > reached:
                last_progress = now
            elif now - last_progress > self._timeout:  # error events do not count as progress
                raise BrokerError(
                    f"reading {topic!r}: no progress for {self._timeout:.0f} s "
                    f"({len(at_end)} of {self._partitions} partitions read to their end)",
                    topic=topic,
                    retriable=True,
                )
            if records:
                yield records
                last_progress = time.monotonic()  # the caller's time is not the broker's

    def total(self) -> int | None:
        """Records this run reads in all, from the consumer's cached high watermarks."""
        if len(self._first) < self._partitions:
            return None
        total = 0
        for partition, first in self._first.items():
            tp = TopicPartition(self._topic, partition)
            _, high = self._consumer.get_watermark_offsets(tp, cached=True)
            if high < 0:
                return None
            total += max(0, high - first)
        return max(total, self.scanned)


class _GroupReader:
    """A topic read from a consumer group's committed offsets; marking commits past them."""

    def __init__(
        self, consumer: Consumer, topic: str, partitions: int, group: str, timeout: float
    ) -> None:
        self._consumer = consumer
        self._topic = topic
        self._group = group
        self._reader = _ToEnd(consumer, topic, partitions, OFFSET_STORED, timeout)

    @property
    def scanned(self) -> int:
        return self._reader.scanned

    def batches(self) -> Iterator[list[StoredRecord]]:
        return iter(self._reader)

    def total(self) -> int | None:
        return self._reader.total()

    def mark_done(self, records: Sequence[StoredRecord]) -> None:
        positions = {r.partition: r.position + 1 for r in records}
        if not positions:
            return
        offsets = [TopicPartition(self._topic, p, o) for p, o in sorted(positions.items())]
        group = self._group
        try:
            committed = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # the records were republished but not recorded
            raise BrokerError(
                f"committing replay progress to group {group!r} failed: {exc}",
                topic=self._topic,
                retriable=True,
            ) from exc
        errors = [tp for tp in committed if tp.error is not None]
        if errors:
            raise BrokerError(
                f"committing replay progress to group {group!r} failed for partition "
                f"{errors[0].partition}: {errors[0].error}",
                topic=self._topic,
                partition=errors[0].partition,
                offset=errors[0].offset,
                retriable=True,
            )


class _Republisher:
    """An idempotent producer (``acks=all``) to the store's cluster."""

    def __init__(self, store: KafkaDeadLetters) -> None:
        self._address = store.address
        self._timeout = store.timeout
        self._failures: list[KafkaError] = []
        self.producer = Producer(
            {
                "linger.ms": 5,
                **producer_properties(store.config),
                "bootstrap.servers": store.address,
                "enable.idempotence": True,
                "acks": "all",
                "on_delivery": self._delivered,
            }
        )
        # Asked of the producer: connecting it now overlaps its idempotent-producer set-up
        # (about 0.5 s) with the reading, instead of paying for it at the first flush.
        self._topics = store._topics(self.producer)

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failures.append(err)

    def require(self, topic: str) -> None:
        _require(self._topics, topic, self._address, "target topic")

    def send(self, topic: str, record: Outgoing) -> None:
        count = _require(self._topics, topic, self._address, "target topic")
        # Back to its own partition keeps the key's partition whatever partitioner wrote it.
        keep = record.keep_partition
        partition = keep if keep is not None and keep < count else -1
        headers: list[tuple[str, str | bytes | None]] = list(record.headers)
        while True:
            try:
                self.producer.produce(
                    topic, record.value, record.key, partition=partition, headers=headers
                )
                return
            except BufferError:
                self.producer.poll(POLL)
            except KafkaException as exc:  # refused before sending: larger than message.max.bytes
                raise BrokerError(
                    f"cannot republish to {topic!r}: {exc}; this batch stays unreplayed, a "
                    "rerun republishes it",
                    topic=topic,
                ) from exc

    def confirm(self, sent: int) -> None:
        if not sent:
            return
        remaining = self.producer.flush(self._timeout)
        if self._failures:
            first = self._failures[0]
            self._failures.clear()
            raise BrokerError(
                f"republishing failed ({first.str()}); this batch stays unreplayed in the group, "
                "so a rerun republishes it (some of its records may then arrive twice)"
            )
        if remaining:
            raise BrokerError(
                f"{remaining} republished records not acknowledged after {self._timeout:.0f} s; "
                "this batch stays unreplayed, a rerun republishes it",
                retriable=True,
            )


def _stored(msg: Message) -> StoredRecord:
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None  # records (not events) carry both
    kind, timestamp = msg.timestamp()
    raw = msg.headers()
    pairs = [] if raw is None else (raw.items() if isinstance(raw, dict) else raw)
    return StoredRecord(
        partition,
        offset,
        timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        key=msg.key(),
        value=msg.value(),
        headers=[(n, v.encode() if isinstance(v, str) else v) for n, v in pairs],
    )
