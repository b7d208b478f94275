"""``lanehouse dead-letters replay``: a workload's dead letters republished, on any broker.

Each dead letter goes to ``to_topic`` (``None``: back to its own ``lanehouse.source.topic``, to
its source partition where the broker can keep it) with its original key, value and headers
plus ``lanehouse.replay.count`` one higher. Progress is kept on the dead-letter topic under
:func:`~consumers.dead_letters.selection.replay_group` (a Kafka group, a Pulsar subscription).
A batch is marked done only after the broker acknowledged every record republished from it, so:

- running replay twice never republishes the same dead letter twice;
- a crash mid-replay at worst republishes part of one batch again (at-least-once, no loss);
- a dead letter replayed ``max_replays`` times already is not republished (``exhausted``): a
  record that keeps failing cannot loop between the source and the dead-letter topic forever.

Every record the replay reads is passed over for good, whatever happened to it: other
workloads' dead letters, exhausted ones, unreadable ones and, with ``since_ms``, those whose
last failure is older. They stay in the topic, so ``list`` still shows them. ``limit`` takes
dead letters oldest first within each partition, in the order they arrive.
"""

from __future__ import annotations

from consumers.backends.admin import DeadLetterStore, Outgoing
from consumers.dead_letters.selection import (
    ProgressCallback,
    ReplaySummary,
    ReplayTally,
    check_limit,
    check_max_replays,
    entry_of,
    replay_group,
)
from consumers.engine.dead_letter_headers import replay_headers
from consumers.errors import BrokerError

__all__ = ["replay_dead_letters"]


def replay_dead_letters(
    store: DeadLetterStore,
    topic: str,
    workload: str,
    to_topic: str | None,
    limit: int | None = None,
    since_ms: int | None = None,
    max_replays: int = 3,
    *,
    progress: ProgressCallback | None = None,
    target: DeadLetterStore | None = None,
) -> ReplaySummary:
    """Republish the not yet replayed dead letters of ``workload`` from ``topic``.

    ``target``: the place of the target topics when it is not the dead-letter topic's. One
    whose replay count is already ``>= max_replays`` is not republished but counted as
    exhausted. ``limit`` caps the dead letters of this workload handled (republished or
    exhausted) in this run; ``since_ms`` passes over those whose last failure is older. Do not
    run two replays of one workload at the same time: the progress records, it does not lock.

    Raises ``BrokerError`` when a topic is missing, a send or its acknowledgement fails (that
    batch is not marked done: a rerun republishes it again), or the broker stops answering.
    """
    check_limit(limit)
    check_max_replays(max_replays)
    tally = ReplayTally(workload, topic, since_ms, max_replays, limit)
    with (
        (target or store).republisher() as sender,
        store.progress_reader(topic, replay_group(workload)) as reader,
    ):
        if to_topic is not None:
            sender.require(to_topic)
        for batch in reader.batches():
            handled = []
            republished = 0
            for record in batch:
                if tally.full(republished):
                    break
                entry = tally.take(entry_of(topic, record))
                if entry is not None:
                    info = entry.info
                    into = to_topic or info.source_topic
                    keep = info.source_partition if into == info.source_topic else None
                    outgoing = Outgoing(entry.key, entry.value, list(replay_headers(info)), keep)
                    try:
                        sender.send(into, outgoing)
                    except BrokerError as exc:  # the place stays the refused topic's
                        raise BrokerError(
                            f"dead letter {entry.position}: {exc}",
                            topic=exc.topic,
                            partition=exc.partition,
                            offset=exc.offset,
                            retriable=exc.retriable,
                        ) from exc
                    republished += 1
                handled.append(record)
            sender.confirm(republished)
            tally.replayed += republished
            reader.mark_done(handled)
            if progress is not None:
                progress(reader.scanned, reader.total())
            if tally.full():
                break
    return tally.summary()
