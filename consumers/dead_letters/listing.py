"""``lanehouse dead-letters list``: a workload's dead letters in a dead-letter topic, on any broker.

A dead-letter topic may hold the dead letters of several workloads; each record says whose it
is in its ``lanehouse.workload`` header (:mod:`consumers.engine.dead_letter_headers`). The
store (:class:`~consumers.backends.admin.DeadLetterStore`) reads the topic from its beginning to
its end and acknowledges nothing; this module keeps the workload's, sorted by partition and
position, before ``limit`` applies.
"""

from __future__ import annotations

from consumers.backends.admin import DeadLetterStore
from consumers.dead_letters.selection import (
    DeadLetterEntry,
    check_limit,
    entry_of,
    first_entries,
    listed,
)

__all__ = ["list_dead_letters"]


def list_dead_letters(
    store: DeadLetterStore,
    topic: str,
    workload: str,
    limit: int | None = None,
    since_ms: int | None = None,
) -> list[DeadLetterEntry]:
    """The dead letters of ``workload`` in ``topic``, ordered by partition then position.

    Keeps the records whose ``lanehouse.workload`` is ``workload`` and whose last failure is at
    or after ``since_ms`` (epoch ms); returns the first ``limit`` of them. Records without
    readable dead-letter headers are logged and left out. Raises ``BrokerError`` when the store
    cannot read the topic (missing on Kafka, a broker that stops answering).
    """
    check_limit(limit)
    entries = [
        entry
        for record in store.read_to_end(topic, f"lanehouse.{workload}.dlq-list")
        if (entry := entry_of(topic, record)) is not None and listed(entry, workload, since_ms)
    ]
    return first_entries(entries, limit)
