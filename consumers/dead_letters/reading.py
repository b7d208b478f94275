"""Reading a dead-letter topic to its end: ``lanehouse dead-letters list``, and the reader
replay (:mod:`consumers.dead_letters.replay`) builds on.

A dead-letter topic may hold the dead letters of several workloads; each record says whose it
is in its ``lanehouse.workload`` header (:mod:`consumers.engine.dead_letter_headers`).
:func:`list_dead_letters` reads the topic from the beginning to its end and commits nothing.

The end of a partition is found with ``enable.partition.eof`` (never with broker-side watermark
queries, which are wrong on Tansu). Reading covers all partitions at once: ``list`` sorts what
it found by partition and offset before applying ``limit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from consumers.dead_letters.selection import (
    DeadLetterEntry,
    ProgressCallback,
    check_limit,
    entry_from,
    first_entries,
    listed,
    parse_since,
)
from consumers.errors import BrokerError

__all__ = [  # the shared names stay importable from here, where they used to live
    "BATCH",
    "POLL",
    "ClientConfig",
    "DeadLetterEntry",
    "ProgressCallback",
    "ToEnd",
    "check_limit",
    "list_dead_letters",
    "parse_since",
    "read_entry",
]

log = logging.getLogger(__name__)

#: Records read (and, for replay, republished then committed) per batch.
BATCH: Final = 500
POLL: Final = 0.1  # seconds per consume() call

#: Reading to the end is a one-off: answer fast at the end of a partition instead of idling.
_CONSUMER_DEFAULTS: Final[Mapping[str, Any]] = {
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}

ClientConfig = Mapping[str, str | int | float | bool]


def list_dead_letters(
    bootstrap: str,
    dlq_topic: str,
    workload: str,
    limit: int | None = None,
    since_ms: int | None = None,
    client_config: ClientConfig | None = None,
    *,
    timeout: float = 30.0,
) -> list[DeadLetterEntry]:
    """The dead letters of ``workload`` in ``dlq_topic``, ordered by partition then offset.

    Reads the whole topic from the beginning to its end; keeps the records whose
    ``lanehouse.workload`` is ``workload`` and whose last failure is at or after ``since_ms``
    (epoch ms); returns the first ``limit`` of them. Commits nothing. Records without readable
    dead-letter headers are logged and left out. ``client_config`` adds librdkafka properties
    (security, ...). Raises :class:`BrokerError` if the topic does not exist or the broker
    stops answering for ``timeout`` seconds.
    """
    check_limit(limit)
    group = f"lanehouse.{workload}.dlq-list"
    consumer = Consumer(consumer_config(bootstrap, group, client_config))
    try:
        topics = topic_partitions(consumer, bootstrap, timeout)
        partitions = require_topic(topics, dlq_topic, bootstrap, "dead-letter topic")
        reader = ToEnd(consumer, dlq_topic, partitions, OFFSET_BEGINNING, timeout)
        entries: list[DeadLetterEntry] = []
        for batch in reader.batches():
            for msg in batch:
                entry = read_entry(msg, dlq_topic)
                if entry is not None and listed(entry, workload, since_ms):
                    entries.append(entry)
    finally:
        consumer.close()
    return first_entries(entries, limit)


class ToEnd:
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

    def batches(self) -> Iterator[list[Message]]:
        """Batches of records (no error events) until every partition reached its end."""
        consumer, topic = self._consumer, self._topic
        consumer.assign([TopicPartition(topic, p, self._start) for p in range(self._partitions)])
        at_end: set[int] = set()
        last_progress = time.monotonic()
        while len(at_end) < self._partitions:
            messages = consumer.consume(BATCH, POLL)
            reached = len(at_end)
            records: list[Message] = []
            for msg in messages:
                partition, offset, err = msg.partition(), msg.offset(), msg.error()
                if partition is not None and offset is not None:
                    self._first.setdefault(partition, offset)
                if err is None:
                    records.append(msg)
                elif err.code() == KafkaError._PARTITION_EOF:
                    if partition is not None:
                        at_end.add(partition)
                elif err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise BrokerError(f"reading {topic!r}: {err.str()}")
                else:  # librdkafka retries transient errors itself; the timeout bounds them
                    log.warning("reading %r: %s", topic, err.str())
            self.scanned += len(records)
            now = time.monotonic()
            if records or len(at_end) > reached:
                last_progress = now
            elif now - last_progress > self._timeout:  # error events do not count as progress
                raise BrokerError(
                    f"reading {topic!r}: no progress for {self._timeout:.0f} s "
                    f"({len(at_end)} of {self._partitions} partitions read to their end)"
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


def partition_of(msg: Message) -> int:
    partition = msg.partition()
    assert partition is not None  # records (not events) always carry one
    return partition


def offset_of(msg: Message) -> int:
    offset = msg.offset()
    assert offset is not None
    return offset


def read_entry(msg: Message, topic: str) -> DeadLetterEntry | None:
    """The record as a dead letter, or ``None`` (logged) when its headers are not readable."""
    kind, timestamp = msg.timestamp()
    return entry_from(
        topic,
        partition_of(msg),
        offset_of(msg),
        timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        key=msg.key(),
        value=msg.value(),
        headers=headers_of(msg),
    )


def headers_of(msg: Message) -> list[tuple[str, bytes | None]]:
    raw = msg.headers()
    if raw is None:
        return []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]


def consumer_config(
    bootstrap: str, group: str, client_config: ClientConfig | None
) -> dict[str, Any]:
    return {
        **_CONSUMER_DEFAULTS,
        **(client_config or {}),
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }


def topic_partitions(client: Consumer | Producer, bootstrap: str, timeout: float) -> dict[str, int]:
    """Every topic's partition count (asking for all topics never auto-creates one)."""
    try:
        metadata = client.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot read topic metadata from {bootstrap}: {exc}") from exc
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def require_topic(topics: Mapping[str, int], topic: str, bootstrap: str, role: str) -> int:
    partitions = topics.get(topic, 0)
    if partitions < 1:
        raise BrokerError(f"{role} {topic!r} does not exist on {bootstrap}")
    return partitions
