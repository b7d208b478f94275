"""The in-memory broker's :class:`~consumers.backends.admin.DeadLetterStore`, so the
broker-neutral dead-letter jobs (``consumers/dead_letters/``) have fast unit tests.

Progress is a position per (name, topic, partition) held by the store, as a Kafka group's
committed offset would be; a topic in the broker's ``unavailable`` set refuses republished
records at :meth:`_Republisher.confirm`, as a broker failing deliveries would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from consumers.backends.admin import Outgoing, StoredRecord
from consumers.backends.base import PlainMessage
from consumers.backends.memory import MemoryBroker
from consumers.errors import BrokerError

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
            raise BrokerError(f"{role} {topic!r} does not exist on memory") from None


class _Reader:
    def __init__(self, store: MemoryDeadLetters, topic: str, name: str) -> None:
        self._store = store
        self._topic = topic
        self._name = name
        self._partitions = store._read(topic, "dead-letter topic")
        self.scanned = 0

    def batches(self) -> Iterator[list[StoredRecord]]:
        progress = self._store.progress
        for partition, messages in enumerate(self._partitions):
            start = progress.get((self._name, self._topic, partition), 0)
            waiting = [_stored(m) for m in messages if m.offset() >= start]
            for i in range(0, len(waiting), BATCH):
                batch = waiting[i : i + BATCH]
                self.scanned += len(batch)
                yield batch

    def total(self) -> int | None:
        return sum(len(messages) for messages in self._partitions)

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
            raise BrokerError(f"republishing to {refused[0]} failed: topic unavailable")

    def _partitions(self, topic: str) -> int:
        try:
            return len(self._broker.end_offsets(topic))
        except KeyError:
            raise BrokerError(f"target topic {topic!r} does not exist on memory") from None


def _stored(message: PlainMessage) -> StoredRecord:
    return StoredRecord(
        message.partition(),
        message.offset(),
        timestamp_ms=message.timestamp()[1],
        key=message.key(),
        value=message.value(),
        headers=list(message.headers() or ()),
    )
