"""List and replay a workload's dead letters (``lanehouse dead-letters list|replay``).

A dead-letter topic may hold the dead letters of several workloads; each record says whose it
is in its ``lanehouse.workload`` header (:mod:`consumers.dead_letters.headers`).

:func:`list_dead_letters` reads the topic from the beginning to its end and commits nothing.

:func:`replay_dead_letters` republishes a workload's dead letters (original key, value and
headers, plus ``lanehouse.replay.count`` one higher) and keeps its progress in the consumer group
``lanehouse.<workload>.dlq-replay`` on the dead-letter topic. A batch's offsets are committed
only after the broker acknowledged every record republished from it, so:

- running replay twice never republishes the same dead letter twice;
- a crash mid-replay at worst republishes part of one batch again (at-least-once, no loss);
- a dead letter replayed ``max_replays`` times already is not republished (``exhausted``): a
  record that keeps failing cannot loop between the source and the dead-letter topic forever.

Every record the replay reads is passed over for good by its group, whatever happened to it:
other workloads' dead letters, exhausted ones, unreadable ones and, with ``since_ms``, those
whose last failure is older. They stay in the topic, so ``list`` still shows them.

The end of a partition is found with ``enable.partition.eof`` (never with broker-side watermark
queries, which are wrong on Tansu). Both functions read all partitions at once: ``list``
sorts what it found by partition and offset before applying ``limit``; replay's ``limit`` takes
dead letters oldest first within each partition, in the order they arrive.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
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

from consumers.backends.kafka import ENGINE_OWNED, producer_properties
from consumers.config.loading import parse_duration
from consumers.config.spec import WorkloadSpec
from consumers.dead_letters.headers import (
    DeadLetterInfo,
    decode_dead_letter,
    replay_headers,
)
from consumers.errors import BrokerError

__all__ = [
    "DeadLetterEntry",
    "ReplaySummary",
    "list_dead_letters",
    "parse_since",
    "replay_client_config",
    "replay_dead_letters",
    "replay_group",
]

log = logging.getLogger(__name__)

#: Records read (and, for replay, republished then committed) per batch.
_BATCH: Final = 500
_POLL: Final = 0.1  # seconds per consume() call

#: Reading to the end is a one-off: answer fast at the end of a partition instead of idling.
_CONSUMER_DEFAULTS: Final[Mapping[str, Any]] = {
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}

ClientConfig = Mapping[str, str | int | float | bool]
#: ``progress(scanned, total)``: dead-letter records read so far, and how many this run will
#: read (``None`` until every partition answered once; it grows if dead letters keep arriving).
ProgressCallback = Callable[[int, int | None], None]


def replay_client_config(spec: WorkloadSpec) -> dict[str, str | int | float | bool]:
    """The workload's client properties (security, timeouts) without the ones these tools set."""
    owned = {"group.id", "bootstrap.servers", *ENGINE_OWNED}
    return {k: v for k, v in spec.client_config().items() if k not in owned}


def replay_group(workload: str) -> str:
    """The consumer group holding a workload's replay progress on its dead-letter topic."""
    return f"lanehouse.{workload}.dlq-replay"


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """One dead letter: where it sits in the dead-letter topic, its record, its headers decoded."""

    partition: int
    offset: int
    #: The dead-letter record's own timestamp (when it was written), if the broker kept one.
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    info: DeadLetterInfo


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What one :func:`replay_dead_letters` run did with the records it read."""

    #: Republished and acknowledged by the broker.
    replayed: int = 0
    #: This workload's dead letters already replayed ``max_replays`` times: not republished.
    exhausted: int = 0
    #: Dead letters of other workloads sharing the topic.
    skipped_other_workloads: int = 0
    #: This workload's dead letters whose last failure is before ``since_ms``.
    skipped_older: int = 0
    #: Records whose ``lanehouse.*`` headers are missing or unreadable (each one is logged).
    malformed: int = 0
    #: The exhausted dead letters themselves, in the order read.
    exhausted_entries: tuple[DeadLetterEntry, ...] = field(default=(), repr=False)


_SINCE_DURATION = re.compile(r"\s*\d+(?:\.\d*)?\s*(?:ms|s|m|h)\s*")


def parse_since(value: str, *, now_ms: int | None = None) -> int:
    """``--since``: a duration ago (``30m``, ``2h``, ``1.5h``, ``500ms``) or an ISO 8601 time
    (``2024-05-01T12:00:00+02:00``; UTC when it has no offset). Returns epoch milliseconds.

    A bare number is refused: neither "seconds ago" nor "epoch" would be obvious.
    """
    if _SINCE_DURATION.fullmatch(value):
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return now - round(parse_duration(value.strip()) * 1000)
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"invalid time {value!r}: give a duration ago such as '30m' or '2h', or an ISO 8601 "
            "timestamp such as '2024-05-01T12:00:00Z'"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


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
    _check_limit(limit)
    group = f"lanehouse.{workload}.dlq-list"
    consumer = Consumer(_consumer_config(bootstrap, group, client_config))
    try:
        topics = _topic_partitions(consumer, bootstrap, timeout)
        partitions = _require_topic(topics, dlq_topic, bootstrap, "dead-letter topic")
        reader = _ToEnd(consumer, dlq_topic, partitions, OFFSET_BEGINNING, timeout)
        entries: list[DeadLetterEntry] = []
        for batch in reader.batches():
            for msg in batch:
                entry = _entry(msg, dlq_topic)
                if entry is None or entry.info.workload != workload:
                    continue
                if since_ms is not None and entry.info.last_failure_ms < since_ms:
                    continue
                entries.append(entry)
    finally:
        consumer.close()
    entries.sort(key=lambda e: (e.partition, e.offset))
    return entries if limit is None else entries[:limit]


def replay_dead_letters(
    bootstrap: str,
    dlq_topic: str,
    workload: str,
    to_topic: str | None,
    limit: int | None = None,
    since_ms: int | None = None,
    max_replays: int = 3,
    client_config: ClientConfig | None = None,
    *,
    progress: ProgressCallback | None = None,
    timeout: float = 30.0,
) -> ReplaySummary:
    """Republish the not yet replayed dead letters of ``workload`` from ``dlq_topic``.

    Each dead letter goes to ``to_topic`` (``None``: back to its own ``lanehouse.source.topic``)
    with its original key, value and headers plus ``lanehouse.replay.count`` = previous + 1; when
    the target is its source topic it goes to its source partition. One whose replay count is
    already ``>= max_replays`` is not republished but counted as exhausted. ``limit`` caps the
    dead letters of this workload handled (republished or exhausted) in this run; ``since_ms``
    passes over those whose last failure is older. Progress is committed to
    :func:`replay_group` after each batch the broker acknowledged (idempotent producer), so a
    second run continues where this one stopped. Do not run two replays of one workload at
    the same time: the group only records progress, it does not lock.

    Raises :class:`BrokerError` when a topic is missing, a delivery or commit fails (that batch is
    not committed: a rerun republishes it again), or the broker stops answering for
    ``timeout`` seconds.
    """
    _check_limit(limit)
    if max_replays < 1:
        raise ValueError(f"max_replays must be at least 1, got {max_replays}")
    consumer = Consumer(_consumer_config(bootstrap, replay_group(workload), client_config))
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(
        {
            "linger.ms": 5,
            **producer_properties(client_config or {}),
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "on_delivery": on_delivery,
        }
    )
    tally = _Tally()
    try:
        # Asked of the producer: connecting it now overlaps its idempotent-producer set-up
        # (about 0.5 s) with the reading, instead of paying for it at the first flush.
        topics = _topic_partitions(producer, bootstrap, timeout)
        partitions = _require_topic(topics, dlq_topic, bootstrap, "dead-letter topic")
        if to_topic is not None:
            _require_topic(topics, to_topic, bootstrap, "target topic")
        reader = _ToEnd(consumer, dlq_topic, partitions, OFFSET_STORED, timeout)
        for batch in reader.batches():
            positions: dict[int, int] = {}
            republished = 0
            for msg in batch:
                if limit is not None and tally.handled + republished >= limit:
                    break
                entry = _entry(msg, dlq_topic)
                if entry is None:
                    tally.malformed += 1
                elif entry.info.workload != workload:
                    tally.skipped_other_workloads += 1
                elif since_ms is not None and entry.info.last_failure_ms < since_ms:
                    tally.skipped_older += 1
                elif entry.info.replay_count >= max_replays:
                    tally.exhausted.append(entry)
                    log.info(  # the summary lists them too
                        "dead letter %s[%d]@%d (from %s[%d]@%d) was replayed %d times already "
                        "(max %d): not republished",
                        dlq_topic,
                        entry.partition,
                        entry.offset,
                        entry.info.source_topic,
                        entry.info.source_partition,
                        entry.info.source_offset,
                        entry.info.replay_count,
                        max_replays,
                    )
                else:
                    target = to_topic or entry.info.source_topic
                    _republish(producer, topics, bootstrap, target, entry)
                    republished += 1
                positions[_partition(msg)] = _offset(msg) + 1
            _await_deliveries(producer, failures, republished, timeout)
            tally.replayed += republished
            _commit(consumer, dlq_topic, positions, replay_group(workload))
            if progress is not None:
                progress(reader.scanned, reader.total())
            if limit is not None and tally.handled >= limit:
                break
    finally:
        # Anything still queued was never committed: a rerun republishes it (at-least-once).
        producer.flush(min(timeout, 5.0))
        consumer.close()
    return tally.summary()


@dataclass
class _Tally:
    replayed: int = 0
    skipped_other_workloads: int = 0
    skipped_older: int = 0
    malformed: int = 0
    exhausted: list[DeadLetterEntry] = field(default_factory=list)

    @property
    def handled(self) -> int:
        return self.replayed + len(self.exhausted)

    def summary(self) -> ReplaySummary:
        return ReplaySummary(
            replayed=self.replayed,
            exhausted=len(self.exhausted),
            skipped_other_workloads=self.skipped_other_workloads,
            skipped_older=self.skipped_older,
            malformed=self.malformed,
            exhausted_entries=tuple(self.exhausted),
        )


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

    def batches(self) -> Iterator[list[Message]]:
        """Batches of records (no error events) until every partition reached its end."""
        consumer, topic = self._consumer, self._topic
        consumer.assign([TopicPartition(topic, p, self._start) for p in range(self._partitions)])
        at_end: set[int] = set()
        last_progress = time.monotonic()
        while len(at_end) < self._partitions:
            messages = consumer.consume(_BATCH, _POLL)
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


def _partition(msg: Message) -> int:
    partition = msg.partition()
    assert partition is not None  # records (not events) always carry one
    return partition


def _offset(msg: Message) -> int:
    offset = msg.offset()
    assert offset is not None
    return offset


def _entry(msg: Message, topic: str) -> DeadLetterEntry | None:
    """The record as a dead letter, or ``None`` (logged) when its headers are not readable."""
    partition, offset = _partition(msg), _offset(msg)
    try:
        info = decode_dead_letter(_headers(msg))
    except ValueError as exc:
        log.warning("%s[%d]@%d is not a readable dead letter: %s", topic, partition, offset, exc)
        return None
    kind, timestamp = msg.timestamp()
    return DeadLetterEntry(
        partition=partition,
        offset=offset,
        timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        key=msg.key(),
        value=msg.value(),
        info=info,
    )


def _headers(msg: Message) -> list[tuple[str, bytes | None]]:
    raw = msg.headers()
    if raw is None:
        return []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]


def _republish(
    producer: Producer,
    topics: dict[str, int],
    bootstrap: str,
    target: str,
    entry: DeadLetterEntry,
) -> None:
    info = entry.info
    count = _require_topic(topics, target, bootstrap, "target topic")
    # Back to its own partition keeps the key's partition whatever partitioner wrote it.
    same = target == info.source_topic and info.source_partition < count
    partition = info.source_partition if same else -1
    headers: list[tuple[str, str | bytes | None]] = list(replay_headers(info))
    while True:
        try:
            producer.produce(target, entry.value, entry.key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(_POLL)
        except KafkaException as exc:  # refused before sending, e.g. larger than message.max.bytes
            raise BrokerError(
                f"cannot republish dead letter [{entry.partition}]@{entry.offset} to "
                f"{target!r}: {exc}; this batch stays unreplayed, a rerun republishes it"
            ) from exc


def _await_deliveries(
    producer: Producer, failures: list[KafkaError], sent: int, timeout: float
) -> None:
    """Wait until the broker acknowledged every record sent; raise if any delivery failed."""
    if not sent:
        return
    remaining = producer.flush(timeout)
    if failures:
        first = failures[0]
        failures.clear()
        raise BrokerError(
            f"republishing failed ({first.str()}); this batch stays unreplayed in the group, "
            "so a rerun republishes it (some of its records may then arrive twice)"
        )
    if remaining:
        raise BrokerError(
            f"{remaining} republished records not acknowledged after {timeout:.0f} s; "
            "this batch stays unreplayed, a rerun republishes it"
        )


def _commit(consumer: Consumer, topic: str, positions: dict[int, int], group: str) -> None:
    if not positions:
        return
    offsets = [TopicPartition(topic, p, o) for p, o in sorted(positions.items())]
    try:
        committed = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:  # the records were republished but not recorded
        raise BrokerError(f"committing replay progress to group {group!r} failed: {exc}") from exc
    errors = [tp for tp in committed if tp.error is not None]
    if errors:
        raise BrokerError(
            f"committing replay progress to group {group!r} failed for partition "
            f"{errors[0].partition}: {errors[0].error}"
        )


def _consumer_config(
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


def _topic_partitions(
    client: Consumer | Producer, bootstrap: str, timeout: float
) -> dict[str, int]:
    """Every topic's partition count (asking for all topics never auto-creates one)."""
    try:
        metadata = client.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"cannot read topic metadata from {bootstrap}: {exc}") from exc
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def _require_topic(topics: Mapping[str, int], topic: str, bootstrap: str, role: str) -> int:
    partitions = topics.get(topic, 0)
    if partitions < 1:
        raise BrokerError(f"{role} {topic!r} does not exist on {bootstrap}")
    return partitions


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
