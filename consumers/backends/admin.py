"""The admin jobs' side of the broker contract: what ``lanehouse dead-letters list|replay`` ask of a
broker, in the same words on Kafka, Pulsar and the in-memory broker.

Each broker's room implements :class:`DeadLetterStore` (``kafka/dead_letters.py``,
``pulsar/dead_letters.py``, ``memory_admin.py``); what a dead letter is and what a replay does
with it is broker-neutral and lives in ``consumers/dead_letters/``. A store reads records as
:class:`StoredRecord`; the replay marks the ones it handled through a :class:`ProgressReader`
(a Kafka group's commit, a Pulsar subscription's acknowledgement) and republishes through a
:class:`Republisher`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

#: ``(name, value)`` headers as the broker keeps them (a Pulsar property is never ``None``).
Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a topic as an admin job reads it."""

    partition: int
    #: The Kafka offset; on Pulsar the message id packed into one number ordered like the topic.
    position: int
    #: The record's own timestamp, epoch ms, when the broker kept one.
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: Headers
    #: Pulsar's message id as ``ledger:entry:batch`` (``None`` on Kafka).
    message_id: str | None = None
    #: The broker's own message, for the store that read it to mark it handled.
    handle: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to republish."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    #: The partition to write to if the topic has it (a replay back to its source topic keeps
    #: the key's partition where the broker can: Kafka).
    keep_partition: int | None = None


class ProgressReader(Protocol):
    """A topic read from where a named progress (Kafka group, Pulsar subscription) stands."""

    @property
    def scanned(self) -> int:
        """Records read so far."""
        ...

    def batches(self) -> Iterator[list[StoredRecord]]:
        """Batches until the end of the topic: on Kafka each partition's end as the reads reach
        it; on Pulsar the last message when reading began, or ``idle`` seconds without one."""
        ...

    def total(self) -> int | None:
        """Records this read covers in all, when the broker can tell."""
        ...

    def mark_done(self, records: Sequence[StoredRecord]) -> None:
        """Record ``records`` (a prefix of the last batch) as handled: a later read of the same
        progress passes over them. Raises ``BrokerError`` when the broker refuses."""
        ...


class Republisher(Protocol):
    """Sends records to topics and says when the broker acknowledged all of them."""

    def require(self, topic: str) -> None:
        """Raise ``BrokerError`` naming ``topic`` when it does not exist (where the broker can
        tell: Pulsar creates topics on first use)."""
        ...

    def send(self, topic: str, record: Outgoing) -> None:
        """Queue one record."""
        ...

    def confirm(self, sent: int) -> None:
        """Wait until the broker acknowledged the ``sent`` records queued since the last call;
        raise ``BrokerError`` if any failed or the wait ran out."""
        ...


class DeadLetterStore(Protocol):
    """One broker place (bootstrap servers or service URL with client settings) holding
    dead-letter topics."""

    #: Bootstrap servers or service URL, for messages (never with credentials).
    address: str

    def read_to_end(self, topic: str, reader: str) -> Iterator[StoredRecord]:
        """Every record of ``topic`` from its beginning to its end now, acknowledging nothing
        (``reader``: a name for the broker's logs, e.g. a Kafka group id). Raises
        ``BrokerError`` when the topic is missing or the broker stops answering."""
        ...

    def progress_reader(self, topic: str, progress: str) -> AbstractContextManager[ProgressReader]:
        """Read ``topic`` from where the progress named ``progress`` stands."""
        ...

    def republisher(self) -> AbstractContextManager[Republisher]:
        """A sender to this place's topics (on Kafka idempotent, acknowledged by all replicas)."""
        ...
