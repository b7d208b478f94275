"""Replaying a Pulsar workload's dead letters (``lanehouse dead-letters replay``).

The same rules as Kafka (:mod:`consumers.dead_letters.replay`), with the progress kept by a
durable Shared subscription named :func:`~consumers.dead_letters.selection.replay_group` on the
dead-letter topic instead of a consumer group:

- messages are received in batches; a batch's messages are acknowledged on that subscription
  only after the broker acknowledged every record republished from it, so running replay twice
  never republishes the same dead letter twice, and a crash mid-replay at worst republishes part
  of one batch again (at-least-once, no loss);
- every message read is acknowledged whatever happened to it (other workloads' dead letters,
  exhausted ones, unreadable ones, older than ``since_ms``): later replays pass over them;
- the replay guard, ``limit`` and the summary come from :class:`ReplayTally`.

The end: once the message that was last in the topic when the replay started has arrived (and
what is already queued after it), or when nothing arrived for ``idle`` seconds (all the rest was
acknowledged by earlier replays, or the broker cannot name its last message).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import pulsar

from consumers.backends.pulsar.producer import PulsarProducer
from consumers.dead_letters.pulsar_reading import (
    ClientOptions,
    partition_names,
    pulsar_client,
    pulsar_entry,
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
from consumers.engine.dead_letter_headers import replay_headers
from consumers.errors import BrokerError

__all__ = ["replay_pulsar_dead_letters"]

#: Messages received (then republished, then acknowledged) per batch.
BATCH: Final = 500


def replay_pulsar_dead_letters(
    service_url: str,
    dlq_topic: str,
    workload: str,
    to_topic: str | None,
    limit: int | None = None,
    since_ms: int | None = None,
    max_replays: int = 3,
    client_options: ClientOptions | None = None,
    *,
    progress: ProgressCallback | None = None,
    timeout: float = 30.0,
    idle: float = 1.0,
    to_service_url: str | None = None,
    to_options: ClientOptions | None = None,
) -> ReplaySummary:
    """Republish the not yet replayed dead letters of ``workload`` from the Pulsar ``dlq_topic``.

    Arguments and result as for :func:`consumers.dead_letters.replay.replay_dead_letters`. Each
    dead letter goes to ``to_topic`` (``None``: its own ``lanehouse.source.topic``) with its key
    as partition key, its value, and its original properties plus ``lanehouse.replay.count`` =
    previous + 1. Raises :class:`BrokerError` when the subscription is refused, a send is not
    acknowledged within ``timeout`` seconds or fails, or an acknowledgement fails; what that
    batch read is then not acknowledged, so a rerun republishes it. ``to_service_url`` and
    ``to_options``: the service of the target topics when it is not the dead-letter topic's.
    """
    check_limit(limit)
    check_max_replays(max_replays)
    group = replay_group(workload)
    tally = ReplayTally(workload, dlq_topic, since_ms, max_replays, limit)
    client = pulsar_client(service_url, client_options)
    if to_service_url is None:
        producer = PulsarProducer(service_url, client_options or {})
    else:
        producer = PulsarProducer(to_service_url, to_options or {})
    try:
        partitioned = partition_names(client, dlq_topic, service_url) != [(dlq_topic, 0)]
        try:
            consumer = client.subscribe(
                dlq_topic,
                group,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
        except pulsar.PulsarException as exc:
            raise BrokerError(
                f"cannot subscribe {group!r} to {dlq_topic} on {service_url}: {exc}"
            ) from exc
        scanned = 0
        for batch in _batches(consumer, None if partitioned else _last_entry(consumer), idle):
            failures: list[str] = []
            handled: list[pulsar.Message] = []
            republished = 0
            for msg in batch:
                if tally.full(republished):
                    break
                entry = tally.take(pulsar_entry(msg, dlq_topic))
                if entry is not None:
                    _republish(producer, to_topic or entry.info.source_topic, entry, failures)
                    republished += 1
                handled.append(msg)
            _await_deliveries(producer, failures, republished, timeout)
            tally.replayed += republished
            _acknowledge(consumer, handled, group)
            scanned += len(handled)
            if progress is not None:
                progress(scanned, None)
            if tally.full():
                break
        consumer.close()  # sends any acknowledgement still grouped in the client
    except pulsar.PulsarException as exc:
        raise BrokerError(f"replaying {dlq_topic}: {exc}") from exc
    finally:
        # Anything still unacknowledged is redelivered to the next replay (at-least-once).
        producer.flush(min(timeout, 5.0))
        producer.close()
        client.close()
    return tally.summary()


def _last_entry(consumer: pulsar.Consumer) -> tuple[int, int] | None:
    """``(ledger, entry)`` of the topic's last message now; ``None`` if unknown or empty."""
    try:
        last = consumer.get_last_message_id()
    except pulsar.PulsarException:
        return None  # pulsar-lite cannot answer on an empty topic
    return (last.ledger_id(), last.entry_id()) if last.entry_id() >= 0 else None


def _batches(
    consumer: pulsar.Consumer, end: tuple[int, int] | None, idle: float
) -> Iterator[list[pulsar.Message]]:
    """Batches of what the subscription delivers, until the end (module docstring)."""
    reached = False
    while True:
        batch: list[pulsar.Message] = []
        try:  # past the end, only what is already queued (the rest of the last producer batch)
            batch.append(consumer.receive(0 if reached else max(int(idle * 1000), 1)))
            while len(batch) < BATCH:
                batch.append(consumer.receive(0))
        except pulsar.Timeout:
            pass
        if not batch:
            return
        if end is not None and not reached:
            reached = max(_entry_of(m) for m in batch) >= end
        yield batch


def _entry_of(msg: pulsar.Message) -> tuple[int, int]:
    mid = msg.message_id()
    return (mid.ledger_id(), mid.entry_id())


def _republish(
    producer: PulsarProducer, target: str, entry: DeadLetterEntry, failures: list[str]
) -> None:
    def delivered(error: str | None, _msg: object) -> None:
        if error is not None:
            failures.append(error)

    headers = [(name, value) for name, value in replay_headers(entry.info) if value is not None]
    producer.produce(target, entry.value, entry.key, headers=headers, on_delivery=delivered)


def _await_deliveries(
    producer: PulsarProducer, failures: list[str], sent: int, timeout: float
) -> None:
    """Wait until the broker acknowledged every record sent; raise if any send failed."""
    if not sent:
        return
    remaining = producer.flush(timeout)
    if failures:
        raise BrokerError(
            f"republishing failed ({failures[0]}); this batch stays unacknowledged on the replay "
            "subscription, so a rerun republishes it (some of its records may then arrive twice)"
        )
    if remaining:
        raise BrokerError(
            f"{remaining} republished records not acknowledged after {timeout:.0f} s; "
            "this batch stays unreplayed, a rerun republishes it"
        )


def _acknowledge(consumer: pulsar.Consumer, messages: list[pulsar.Message], group: str) -> None:
    try:
        for msg in messages:
            consumer.acknowledge(msg)
    except pulsar.PulsarException as exc:  # republished but not recorded: a rerun repeats them
        raise BrokerError(f"acknowledging replay progress on {group!r} failed: {exc}") from exc
