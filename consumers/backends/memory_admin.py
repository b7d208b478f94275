"""The in-memory broker's :class:`~consumers.backends.admin.DeadLetterStore` and
:class:`~consumers.backends.admin.GroupRewinder`, so the broker-neutral dead-letter jobs
(``consumers/dead_letters/``) and rewinds (``consumers/rewind/``) have fast unit tests.

Progress is a position per (name, topic, partition) held by the store, as a Kafka group's
committed offset would be; a topic in the broker's ``unavailable`` set refuses republished
records at :meth:`_Republisher.confirm`, as a broker failing deliveries would.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final

from consumers.backends.admin import Outgoing, PositionChange, StartAt, StoredRecord
from consumers.backends.base import PlainMessage
from consumers.backends.memory import MemoryBroker
from consumers.errors import BrokerError, RewindRefused
from consumers.record import SourceIdentity

#: Records per batch: small, so tests see several.
BATCH: Final = 3


class MemoryDeadLetters:
    def __init__(self, broker: MemoryBroker) -> None:
        self.address = "memory"
        self.broker = broker
        #: (progress name, topic, partition) -> the next position to read.
        self.progress: dict[tuple[str, str, int], int] = {}

    def read_to_end(self, topic: str, reader: str) -> Iterator[StoredRecord]:
        for partition in self._read(topic, "dead-letter topic"):
            yield from (_stored(m) for m in partition)

    @contextmanager
    def progress_reader(self, topic: str, progress: str) -> Iterator[_Reader]:
        yield _Reader(self, topic, progress)

    @contextmanager
    def republisher(self) -> Iterator[_Republisher]:
        yield _Republisher(self.broker)

    def _read(self, topic: str, role: str) -> list[list[PlainMessage]]:
        try:
            return self.broker.read(topic)
        except KeyError:
            raise BrokerError(
                f"{role} {topic!r} does not exist on memory", topic=topic, retriable=False
            ) from None


class _Reader:
    def __init__(self, store: MemoryDeadLetters, topic: str, name: str) -> None:
        self._store = store
        self._topic = topic
        self._name = name
        self._partitions = store._read(topic, "dead-letter topic")
        #: Where this read starts in each partition: the progress when it began.
        self._starts = [
            store.progress.get((name, topic, p), 0) for p in range(len(self._partitions))
        ]
        self.scanned = 0

    def batches(self) -> Iterator[list[StoredRecord]]:
        for partition, messages in enumerate(self._partitions):
            start = self._starts[partition]
            waiting = [_stored(m) for m in messages if m.offset() >= start]
            for i in range(0, len(waiting), BATCH):
                batch = waiting[i : i + BATCH]
                self.scanned += len(batch)
                yield batch

    def total(self) -> int | None:
        """Records this read covers, as on Kafka: from where the progress stood to the end."""
        starts = self._starts
        return sum(
            sum(1 for m in ms if m.offset() >= starts[p]) for p, ms in enumerate(self._partitions)
        )

    def mark_done(self, records: Sequence[StoredRecord]) -> None:
        for record in records:
            self._store.progress[(self._name, self._topic, record.partition)] = record.position + 1


class _Republisher:
    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = broker
        self._refused: list[str] = []

    def require(self, topic: str) -> None:
        self._partitions(topic)

    def send(self, topic: str, record: Outgoing) -> None:
        count = self._partitions(topic)
        if topic in self._broker.unavailable:
            self._refused.append(topic)
            return
        keep = record.keep_partition
        kept = [(name, value) for name, value in record.headers if value is not None]
        partition = keep if keep is not None and keep < count else None
        self._broker.produce(topic, record.value, record.key, partition=partition, headers=kept)

    def confirm(self, sent: int) -> None:
        refused, self._refused = self._refused, []
        if refused:
            raise BrokerError(
                f"republishing to {refused[0]} failed: topic unavailable", topic=refused[0]
            )

    def _partitions(self, topic: str) -> int:
        try:
            return len(self._broker.end_offsets(topic))
        except KeyError:
            raise BrokerError(
                f"target topic {topic!r} does not exist on memory", topic=topic, retriable=False
            ) from None


def _stored(message: PlainMessage) -> StoredRecord:
    return StoredRecord(
        message.partition(),
        message.offset(),
        timestamp_ms=message.timestamp()[1],
        key=message.key(),
        value=message.value(),
        headers=list(message.headers() or ()),
    )


class MemoryRewinder:
    """Moves ``group``'s committed offsets on ``topics``, refusing while a consumer is open;
    ``identities``: the topics' names in the lake, as the workload landed them (no cut-back of
    landed files without)."""

    kind = "memory group"

    def __init__(
        self,
        broker: MemoryBroker,
        group: str,
        topics: Sequence[str],
        identities: Mapping[str, SourceIdentity] | None = None,
    ) -> None:
        self.group = group
        self._broker = broker
        self._topics = list(topics)
        self._identities = identities

    def members(self) -> list[str]:
        return [f"consumer {i}" for i in range(self._broker.members(self.group))]

    def rewind(
        self, at: StartAt, partitions: Collection[int] | None, *, write: bool
    ) -> list[PositionChange]:
        changes = self._plan(at, partitions)
        if write:
            if members := self.members():
                raise RewindRefused(f"group {self.group!r} has live members: {', '.join(members)}")
            self._broker.alter_offsets(self.group, [(c.topic, c.partition, c.new) for c in changes])
        return changes

    def landed_ids(self) -> Mapping[str, SourceIdentity] | None:
        return self._identities

    def _plan(self, at: StartAt, partitions: Collection[int] | None) -> list[PositionChange]:
        changes = []
        for topic in self._topics:
            try:
                logs, ends = self._broker.read(topic), self._broker.end_offsets(topic)
            except KeyError:
                raise RewindRefused(f"topic {topic!r} does not exist on memory") from None
            unknown = set(partitions or ()) - set(range(len(logs)))
            if unknown:
                raise RewindRefused(f"no partition {min(unknown)} in {topic} on memory")
            committed = self._broker.committed_offsets(self.group, topic)
            for p, log in enumerate(logs):
                if partitions is not None and p not in partitions:
                    continue
                low = self._broker.earliest(topic, p)
                held = [m for m in log if m.offset() >= low]
                if at == "earliest" or at == "latest":
                    new = low if at == "earliest" else ends[p]
                else:  # first record at or after ``at``, else the end
                    i = bisect.bisect_left([m.timestamp()[1] for m in held], at)
                    new = held[i].offset() if i < len(held) else ends[p]
                now = committed[p]
                again = max(0, now - new) if now is not None else 0
                changes.append(PositionChange(topic, p, now, new, again))
        return changes
