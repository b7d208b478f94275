"""The admin jobs' side of the broker contract: what ``lanehouse dead-letters list|replay`` and
``lanehouse rewind`` ask of a broker, in the same words on Kafka, Pulsar and the in-memory broker.

Each broker's room implements :class:`DeadLetterStore` (``kafka/dead_letters.py``,
``pulsar/dead_letters.py``, ``memory_admin.py``); what a dead letter is and what a replay does
with it is broker-neutral and lives in ``consumers/dead_letters/``. A store reads records as
:class:`StoredRecord`; the replay marks the ones it handled through a :class:`ProgressReader`
(a Kafka group's commit, a Pulsar subscription's acknowledgement) and republishes through a
:class:`Republisher`.

A rewind moves a consumer group or subscription through a :class:`GroupRewinder`
(``kafka/rewind.py``, ``pulsar/rewind.py``, ``memory_admin.py``); the plan, its record and the
cut-back of landed files are broker-neutral and live in ``consumers/rewind/``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from consumers.record import SourceIdentity

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


#: Where a rewind puts a group: its first or last retained record, or the first record at or
#: after an epoch-millisecond time.
StartAt = Literal["earliest", "latest"] | int


@dataclass(frozen=True, slots=True)
class PositionChange:
    """One partition's move (Kafka: offsets), or one topic of a subscription's (Pulsar,
    ``partition`` -1: its backlog in messages, before and after)."""

    topic: str
    partition: int
    #: The committed position now; ``None`` when there is none (the reset policy applies).
    committed: int | None
    #: The position written.
    new: int
    #: Records handled a second time (they were before ``committed``).
    again: int


class GroupRewinder(Protocol):
    """One consumer group (Kafka) or subscription (Pulsar) that a rewind moves. Every method
    raises ``RewindRefused`` (nothing changed) when the broker refuses or cannot be read."""

    #: ``"kafka group"`` or ``"pulsar subscription"``, for the plan's lines.
    kind: str
    #: The group's or subscription's name.
    group: str

    def members(self) -> list[str]:
        """The live members that would overwrite new positions; empty when none, or when the
        broker itself refuses a rewind of a subscription with live consumers (Pulsar)."""
        ...

    def rewind(
        self, at: StartAt, partitions: Collection[int] | None, *, write: bool
    ) -> list[PositionChange]:
        """Where ``at`` puts each partition (all when ``partitions`` is None); with ``write``,
        also move the group there, refused while it has live members."""
        ...

    def landed_ids(self) -> Mapping[str, SourceIdentity] | None:
        """Each topic's identity in the lake's file names, for cutting landed files back to the
        new positions; ``None`` where positions are not offsets (Pulsar: messages delivered
        again land again, and the clean tables deduplicate them by lineage key)."""
        ...
