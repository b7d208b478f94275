"""Handlers for host runs executed inside the test process: they record into this module, by
topic (each workload of a host reads its own)."""

from __future__ import annotations

from consumers import DeadLetter, Record

#: (topic, partition, offset) of every record handled, in order.
handled: list[tuple[str, int, int]] = []
#: The offset at which :func:`misuse` returns a dead letter its workload has no topic for.
bad_offset = 5


def reset() -> None:
    handled.clear()


def count(topic: str) -> int:
    return sum(1 for t, _, _ in handled if t == topic)


async def record(rec: Record) -> None:
    handled.append((rec.topic, rec.partition, rec.offset))


async def misuse(rec: Record) -> DeadLetter | None:
    """Stops its workload at :data:`bad_offset` (no dead-letter topic is configured)."""
    if rec.offset == bad_offset:
        return DeadLetter("no place for it")
    handled.append((rec.topic, rec.partition, rec.offset))
    return None
