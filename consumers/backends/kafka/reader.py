"""Reading a Kafka group's positions, log ends and record timestamps without joining the group.

A rewind plans with it (:mod:`consumers.backends.kafka.rewind`) and autoscaling measures lag with it
(:mod:`consumers.scaling.lag`). Both must leave the group alone, so :class:`PartitionReader`
never subscribes and never commits: its consumer carries a group id of its own (random, so it
can never be a workload's), auto-commit off, and it only assigns partitions. The group's
committed offsets come from a second, short-lived consumer of the group that only asks for them
(OffsetFetch: no membership, no commit).

Tansu's broker-side watermarks are wrong (``get_watermark_offsets``, ``list_offsets(latest)``)
and ``offsets_for_times`` answers 0 for every time (docs/operations.md). So log ends are read:
either to the end (``enable.partition.eof``) from the broker's claim, or from the high watermark
every fetch response carries, which the consumer caches and which is right.

Every wait is bounded by the per-call ``timeout`` and, when given, by a ``deadline`` shared by
all calls; broker failures and timeouts raise :class:`~consumers.errors.BrokerError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from consumers.errors import BrokerError

__all__ = ["Head", "Key", "PartitionReader"]

#: (topic, partition)
Key = tuple[str, int]

_READ_DEFAULTS: Final[Mapping[str, Any]] = {
    "enable.partition.eof": True,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # Past the log's real end (Tansu's claimed watermark can be), reading starts at the end.
    "auto.offset.reset": "latest",
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}
#: Seconds per consume() call: short, so a read returns soon after its last answer.
_POLL: Final = 0.05


@dataclass(frozen=True)
class Head:
    """The first record at a position, or the end when there is none."""

    #: The record's offset; the log end (``offset == end``) when there is no record.
    offset: int
    #: The record's timestamp (ms since the epoch); None at the end or when the record has none.
    timestamp_ms: int | None
    #: The partition's log end, from the same fetch.
    end: int


class PartitionReader:
    """Reads positions, ends and timestamps; joins no group and commits nothing.

    ``config`` is the workload's librdkafka properties (its ``group.id`` is replaced). Call
    :meth:`close` when done.
    """

    def __init__(
        self, config: Mapping[str, Any], timeout: float, *, deadline: float | None = None
    ) -> None:
        self._timeout = timeout
        self._deadline = deadline
        self._config = dict(config)
        reader_group = f"lanehouse.reader.{uuid.uuid4().hex}"
        self._consumer = _consumer({**config, **_READ_DEFAULTS, "group.id": reader_group})

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, topics: Iterable[str]) -> list[Key]:
        """Every partition of ``topics``, in topic then partition order."""
        keys: list[Key] = []
        for topic in topics:
            wait = self._wait(f"listing topic {topic!r}")
            try:
                meta = self._consumer.list_topics(topic, timeout=wait)
            except KafkaException as exc:
                raise BrokerError(
                    f"listing topic {topic!r} (waited up to {wait:.1f} s): {exc.args[0].str()}",
                    topic=topic,
                    retriable=exc.args[0].retriable(),
                ) from exc
            found = meta.topics[topic]
            if found.error is not None:
                raise BrokerError(f"topic {topic!r}: {found.error.str()}", topic=topic)
            keys += [(topic, p) for p in sorted(found.partitions)]
        return keys

    def committed(self, group: str, keys: list[Key]) -> dict[Key, int]:
        """``group``'s committed offsets; a partition with none is left out.

        Asked by a consumer of ``group`` that only sends OffsetFetch: it never subscribes (no
        membership) and never commits. Not the admin client: with confluent-kafka 2.16 a
        ``list_consumer_group_offsets`` that times out while the broker hangs (Tansu under
        SIGSTOP) can abort the whole process (assertion ``eonce->refcnt > 0`` in
        ``rd_kafka_enq_once_del_source_return``), and the caller may be Dagster's daemon."""
        wait = self._wait(f"reading group {group!r}'s offsets")
        consumer = _consumer({**self._config, **_READ_DEFAULTS, "group.id": group})
        try:
            found = consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=wait)
        except KafkaException as exc:
            raise BrokerError(
                f"reading group {group!r}'s offsets (waited up to {wait:.1f} s): "
                f"{exc.args[0].str()}"
            ) from exc
        finally:
            consumer.close()
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in found if tp.error]
        if failed:
            raise BrokerError(f"reading group {group!r}'s offsets: {'; '.join(failed)}")
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset != OFFSET_INVALID}

    def bounds(self, keys: list[Key]) -> dict[Key, tuple[int, int]]:
        """(first, end) per partition: the end read to, starting at the broker's claim."""
        lows: dict[Key, int] = {}
        start: list[TopicPartition] = []
        for topic, p in keys:
            try:
                low, claimed = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self._wait(f"reading {topic}[{p}]'s bounds")
                )
            except KafkaException as exc:
                raise BrokerError(
                    f"reading {topic}[{p}]'s bounds: {exc.args[0].str()}",
                    topic=topic,
                    partition=p,
                    retriable=exc.args[0].retriable(),
                ) from exc
            lows[(topic, p)] = low
            start.append(TopicPartition(topic, p, max(low, claimed)))
        ends = self._read(start, until_end=True)
        return {key: (lows[key], ends[key]) for key in keys}

    def heads(self, starts: Mapping[Key, int]) -> dict[Key, Head]:
        """Per partition, the first record at or after ``starts[key]`` (an offset, or
        ``OFFSET_BEGINNING``) and the log end from the same fetch: one record per partition is
        read, however far behind the position is."""
        self._consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
        pending = set(starts)
        found: dict[Key, Head] = {}
        try:
            while pending:
                wait = self._wait(f"reading {_names(pending)}", _POLL)
                for msg in self._consumer.consume(10_000, wait):
                    key = (msg.topic(), msg.partition())
                    if key in pending:
                        found[key] = self._head(msg, key)
                        pending.discard(key)
                        self._consumer.pause([TopicPartition(*key)])
        finally:
            self._consumer.unassign()
        return found

    def first_at_or_after(self, key: Key, at_ms: int, low: int, end: int) -> int:
        """The offset of the first record at or after ``at_ms`` (``end`` when there is none)."""
        tp = TopicPartition(key[0], key[1], at_ms)
        try:
            answer = self._consumer.offsets_for_times([tp], timeout=self._wait("offsets_for_times"))
        except KafkaException as exc:
            raise BrokerError(
                f"offsets_for_times on {key[0]}[{key[1]}]: {exc}", topic=key[0], partition=key[1]
            ) from exc
        offset = answer[0].offset
        offset = end if offset < 0 or offset > end else offset
        if self._holds(key, offset, at_ms, low, end):
            return offset
        found = self._read([TopicPartition(key[0], key[1], low)], until_end=True, at_ms=at_ms)
        return found[key]

    def _head(self, msg: Message, key: Key) -> Head:
        error = msg.error()
        offset = int(msg.offset())  # type: ignore[arg-type]
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise BrokerError(
                    f"reading {key[0]}[{key[1]}] failed: {error.str()}",
                    topic=key[0],
                    partition=key[1],
                    offset=offset,
                )
            return Head(offset=offset, timestamp_ms=None, end=offset)
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        kind, stamp = msg.timestamp()
        timestamp = None if kind == TIMESTAMP_NOT_AVAILABLE else stamp
        return Head(offset=offset, timestamp_ms=timestamp, end=max(high, offset + 1))

    def _holds(self, key: Key, answer: int, at_ms: int, low: int, end: int) -> bool:
        if answer < end and self._timestamp(key, answer) < at_ms:
            return False
        return answer <= low or self._timestamp(key, answer - 1) < at_ms

    def _timestamp(self, key: Key, offset: int) -> int:
        found = self._read([TopicPartition(key[0], key[1], offset)], until_end=False)
        return found[key]

    def _wait(self, doing: str, longest: float | None = None) -> float:
        """Seconds the next broker call may take: the per-call timeout (or ``longest``), cut to
        what the deadline leaves; past the deadline, :class:`BrokerError`."""
        wait = self._timeout if longest is None else min(longest, self._timeout)
        if self._deadline is None:
            return wait
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise BrokerError(f"{doing}: the broker did not answer in time", retriable=True)
        return min(wait, left)

    def _read(
        self, start: list[TopicPartition], until_end: bool, at_ms: int | None = None
    ) -> dict[Key, int]:
        """Read from ``start``: the end of each partition (``until_end``), else the first
        record's timestamp; with ``at_ms``, the offset of the first record at or after it (the
        end when there is none)."""
        self._consumer.assign(start)
        pending = {(tp.topic, tp.partition) for tp in start}
        found: dict[Key, int] = {}
        deadline = time.monotonic() + self._timeout
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"reading {_names(pending)} took over {self._timeout:.0f} s", retriable=True
                    )
                wait = self._wait(f"reading {_names(pending)}", 0.2)
                for msg in self._consumer.consume(10_000, wait):
                    key = (msg.topic(), msg.partition())
                    if key in pending:
                        self._take(msg, key, until_end, at_ms, pending, found)
        finally:
            self._consumer.unassign()
        return found

    @staticmethod
    def _take(
        msg: Message,
        key: Key,
        until_end: bool,
        at_ms: int | None,
        pending: set[Key],
        found: dict[Key, int],
    ) -> None:
        error = msg.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise BrokerError(
                    f"reading {key[0]}[{key[1]}] failed: {error.str()}",
                    topic=key[0],
                    partition=key[1],
                )
            found[key] = int(msg.offset())  # type: ignore[arg-type]
            pending.discard(key)
            return
        stamp = msg.timestamp()[1]
        if at_ms is not None:
            if stamp >= at_ms:
                found[key] = int(msg.offset())  # type: ignore[arg-type]
                pending.discard(key)
        elif not until_end:
            found[key] = stamp
            pending.discard(key)


def _consumer(config: dict[str, Any]) -> Consumer:
    try:
        return Consumer(config)
    except KafkaException as exc:  # a property librdkafka refuses (its message names it)
        raise BrokerError(f"cannot create a Kafka consumer: {exc.args[0].str()}") from exc


def _names(keys: Iterable[Key]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(keys))
