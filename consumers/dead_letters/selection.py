"""Which dead letters ``lanehouse dead-letters list|replay`` take, whatever the broker.

The brokers' stores (:mod:`consumers.backends.admin`) only read and write records; this module
decides what a record is and what happens to it: decoding its ``lanehouse.*`` headers, the
workload and ``--since`` filters, ``--limit``, the replay guard (``max_replays``) and the
summary of a replay.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from consumers.backends.admin import StoredRecord
from consumers.config.loading import parse_duration
from consumers.engine.dead_letter_headers import DeadLetterInfo, decode_dead_letter

log = logging.getLogger("consumers.dead_letters")

#: ``progress(scanned, total)``: dead-letter records read so far, and how many this run will
#: read (``None`` while unknown; it grows if dead letters keep arriving).
ProgressCallback = Callable[[int, int | None], None]


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """One dead letter: where it sits in the dead-letter topic, its record, its headers decoded.

    On Kafka ``offset`` is the record's offset. On Pulsar it is the message id packed into one
    number ordered like the topic, and ``message_id`` is the id as ``ledger:entry:batch``.
    """

    partition: int
    offset: int
    #: The dead-letter record's own timestamp (when it was written), if the broker kept one.
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    info: DeadLetterInfo
    message_id: str | None = None

    @property
    def position(self) -> str:
        """Where it sits in the dead-letter topic: ``[partition]@offset`` (or ``@message id``)."""
        return f"[{self.partition}]@{self.message_id or self.offset}"


def entry_from(
    topic: str,
    partition: int,
    offset: int,
    *,
    timestamp_ms: int | None,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
    message_id: str | None = None,
) -> DeadLetterEntry | None:
    """The record as a dead letter, or ``None`` (logged) when its headers are not readable."""
    try:
        info = decode_dead_letter(headers)
    except ValueError as exc:
        where = f"[{partition}]@{message_id or offset}"
        log.warning("%s%s is not a readable dead letter: %s", topic, where, exc)
        return None
    return DeadLetterEntry(partition, offset, timestamp_ms, key, value, info, message_id)


def entry_of(topic: str, record: StoredRecord) -> DeadLetterEntry | None:
    """A stored record of ``topic`` as a dead letter, or ``None`` (logged) when unreadable."""
    return entry_from(
        topic,
        record.partition,
        record.position,
        timestamp_ms=record.timestamp_ms,
        key=record.key,
        value=record.value,
        headers=record.headers,
        message_id=record.message_id,
    )


def listed(entry: DeadLetterEntry, workload: str, since_ms: int | None) -> bool:
    """Whether ``list`` shows a dead letter: one of ``workload``, recent enough."""
    if entry.info.workload != workload:
        return False
    return since_ms is None or entry.info.last_failure_ms >= since_ms


def first_entries(entries: list[DeadLetterEntry], limit: int | None) -> list[DeadLetterEntry]:
    """``entries`` ordered by partition and offset, the first ``limit`` of them."""
    ordered = sorted(entries, key=lambda e: (e.partition, e.offset))
    return ordered if limit is None else ordered[:limit]


def replay_group(workload: str) -> str:
    """Where a workload's replay progress is kept on its dead-letter topic: the Kafka consumer
    group, or the durable Pulsar subscription, of this name."""
    return f"lanehouse.{workload}.dlq-replay"


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")


def check_max_replays(max_replays: int) -> None:
    if max_replays < 1:
        raise ValueError(f"max_replays must be at least 1, got {max_replays}")


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


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What one replay run did with the records it read."""

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


@dataclass
class ReplayTally:
    """One replay's decisions: :meth:`take` says which records to republish, :meth:`full`
    when ``limit`` of the workload's dead letters are handled (republished or exhausted)."""

    workload: str
    dlq_topic: str
    since_ms: int | None = None
    max_replays: int = 3
    limit: int | None = None
    #: Counted by the caller once the broker acknowledged the republished records.
    replayed: int = 0
    skipped_other_workloads: int = 0
    skipped_older: int = 0
    malformed: int = 0
    exhausted: list[DeadLetterEntry] = field(default_factory=list)

    def full(self, pending: int = 0) -> bool:
        """Whether the limit is reached, counting ``pending`` republished but not yet counted."""
        handled = self.replayed + pending + len(self.exhausted)
        return self.limit is not None and handled >= self.limit

    def take(self, entry: DeadLetterEntry | None) -> DeadLetterEntry | None:
        """Count a record read (``None``: unreadable); returns it if it is to be republished."""
        if entry is None:
            self.malformed += 1
        elif entry.info.workload != self.workload:
            self.skipped_other_workloads += 1
        elif self.since_ms is not None and entry.info.last_failure_ms < self.since_ms:
            self.skipped_older += 1
        elif entry.info.replay_count >= self.max_replays:
            self.exhausted.append(entry)
            info = entry.info
            log.info(  # the summary lists them too
                "dead letter %s%s (from %s[%d]@%d) was replayed %d times already (max %d): "
                "not republished",
                self.dlq_topic,
                entry.position,
                info.source_topic,
                info.source_partition,
                info.source_offset,
                info.replay_count,
                self.max_replays,
            )
        else:
            return entry
        return None

    def summary(self) -> ReplaySummary:
        return ReplaySummary(
            replayed=self.replayed,
            exhausted=len(self.exhausted),
            skipped_other_workloads=self.skipped_other_workloads,
            skipped_older=self.skipped_older,
            malformed=self.malformed,
            exhausted_entries=tuple(self.exhausted),
        )
