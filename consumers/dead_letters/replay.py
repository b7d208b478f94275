"""Replaying a workload's dead letters (``lanehouse dead-letters replay``).

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
whose last failure is older. They stay in the topic, so ``list`` still shows them. ``limit``
takes dead letters oldest first within each partition, in the order they arrive.
"""

from __future__ import annotations

import logging

from confluent_kafka import (
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from consumers.backends.kafka.consumer import ENGINE_OWNED, producer_properties
from consumers.config.spec import WorkloadSpec
from consumers.dead_letters.reading import (
    POLL,
    ClientConfig,
    ToEnd,
    consumer_config,
    offset_of,
    partition_of,
    read_entry,
    require_topic,
    topic_partitions,
)
from consumers.dead_letters.selection import (
    DeadLetterEntry,
    ProgressCallback,
    ReplaySummary,
    ReplayTally,
    check_limit,
    check_max_replays,
    replay_group,
)
from consumers.engine.dead_letter_headers import (
    replay_headers,
)
from consumers.errors import BrokerError

__all__ = [  # the shared names stay importable from here, where they used to live
    "ReplaySummary",
    "replay_client_config",
    "replay_dead_letters",
    "replay_group",
]

log = logging.getLogger(__name__)


def replay_client_config(spec: WorkloadSpec) -> dict[str, str | int | float | bool]:
    """The workload's client properties (security, timeouts) without the ones these tools set."""
    owned = {"group.id", "bootstrap.servers", *ENGINE_OWNED}
    return {k: v for k, v in spec.client_config().items() if k not in owned}


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
    to_bootstrap: str | None = None,
    to_config: ClientConfig | None = None,
) -> ReplaySummary:
    """Republish the not yet replayed dead letters of ``workload`` from ``dlq_topic``.

    ``to_bootstrap``/``to_config``: the cluster of the target topics when it is not the
    dead-letter topic's (``bootstrap``, ``client_config``).

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
    check_limit(limit)
    check_max_replays(max_replays)
    consumer = Consumer(consumer_config(bootstrap, replay_group(workload), client_config))
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    target_bootstrap = to_bootstrap or bootstrap
    producer = Producer(
        {
            "linger.ms": 5,
            **producer_properties((to_config if to_bootstrap else client_config) or {}),
            "bootstrap.servers": target_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "on_delivery": on_delivery,
        }
    )
    tally = ReplayTally(workload, dlq_topic, since_ms, max_replays, limit)
    try:
        # Asked of the producer: connecting it now overlaps its idempotent-producer set-up
        # (about 0.5 s) with the reading, instead of paying for it at the first flush.
        topics = topic_partitions(producer, target_bootstrap, timeout)
        dlq_topics = (
            topics if to_bootstrap is None else topic_partitions(consumer, bootstrap, timeout)
        )
        partitions = require_topic(dlq_topics, dlq_topic, bootstrap, "dead-letter topic")
        if to_topic is not None:
            require_topic(topics, to_topic, target_bootstrap, "target topic")
        reader = ToEnd(consumer, dlq_topic, partitions, OFFSET_STORED, timeout)
        for batch in reader.batches():
            positions: dict[int, int] = {}
            republished = 0
            for msg in batch:
                if tally.full(republished):
                    break
                entry = tally.take(read_entry(msg, dlq_topic))
                if entry is not None:
                    target = to_topic or entry.info.source_topic
                    _republish(producer, topics, target_bootstrap, target, entry)
                    republished += 1
                positions[partition_of(msg)] = offset_of(msg) + 1
            _await_deliveries(producer, failures, republished, timeout)
            tally.replayed += republished
            _commit(consumer, dlq_topic, positions, replay_group(workload))
            if progress is not None:
                progress(reader.scanned, reader.total())
            if tally.full():
                break
    finally:
        # Anything still queued was never committed: a rerun republishes it (at-least-once).
        producer.flush(min(timeout, 5.0))
        consumer.close()
    return tally.summary()


def _republish(
    producer: Producer,
    topics: dict[str, int],
    bootstrap: str,
    target: str,
    entry: DeadLetterEntry,
) -> None:
    info = entry.info
    count = require_topic(topics, target, bootstrap, "target topic")
    # Back to its own partition keeps the key's partition whatever partitioner wrote it.
    same = target == info.source_topic and info.source_partition < count
    partition = info.source_partition if same else -1
    headers: list[tuple[str, str | bytes | None]] = list(replay_headers(info))
    while True:
        try:
            producer.produce(target, entry.value, entry.key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(POLL)
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
