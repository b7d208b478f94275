"""Reading a Pulsar dead-letter topic: ``lanehouse dead-letters list`` for a Pulsar workload, and
the message-to-entry conversion the Pulsar replay (:mod:`consumers.dead_letters.pulsar_replay`)
shares.

The engine writes a Pulsar dead letter with the same ``lanehouse.*`` headers as Kafka, as message
properties (:mod:`consumers.engine.dead_letter_headers`). ``list`` reads with a Reader from the earliest
message, one per partition: a Reader acknowledges nothing and leaves no subscription behind. The
end is where ``has_message_available`` (the broker's last message id) says no more; where the
broker cannot answer that (pulsar-lite, on an empty topic), where nothing arrived for ``idle``
seconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pulsar

from consumers.backends.pulsar.client import PARTITION_SUFFIX, client_kwargs
from consumers.backends.pulsar.consumer import pack_pulsar_position
from consumers.dead_letters.selection import (
    DeadLetterEntry,
    check_limit,
    entry_from,
    first_entries,
    listed,
)
from consumers.errors import BrokerError

__all__ = ["list_pulsar_dead_letters", "partition_names", "pulsar_client", "pulsar_entry"]

ClientOptions = Mapping[str, Any]


def pulsar_client(service_url: str, client_options: ClientOptions | None) -> pulsar.Client:
    """A client with the workload's options (``auth_token`` becomes authentication)."""
    try:
        return pulsar.Client(service_url, **client_kwargs(client_options or {}))
    except (pulsar.PulsarException, ValueError) as exc:
        raise BrokerError(f"cannot create a Pulsar client for {service_url}: {exc}") from exc


def partition_names(client: pulsar.Client, topic: str, service_url: str) -> list[tuple[str, int]]:
    """``(name, partition index)`` of each partition of ``topic`` (itself and 0 if it has none)."""
    try:
        names = client.get_topic_partitions(topic)
    except pulsar.PulsarException as exc:
        raise BrokerError(f"cannot look up {topic} on {service_url}: {exc}") from exc
    out = []
    for name in names:
        match = PARTITION_SUFFIX.match(name)
        out.append((name, int(match["index"]) if match and name != topic else 0))
    return out


def pulsar_entry(msg: pulsar.Message, topic: str) -> DeadLetterEntry | None:
    """The message as a dead letter, or ``None`` (logged) when its properties are not readable.

    ``offset`` is the message id packed into one number ordered like the topic
    (:func:`consumers.backends.pulsar.consumer.pack_pulsar_position`); ``message_id`` shows it as text.
    """
    mid = msg.message_id()
    ledger, entry, batch = mid.ledger_id(), mid.entry_id(), mid.batch_index()
    key = msg.ordering_key() or msg.partition_key()
    properties = msg.properties() or {}
    return entry_from(
        topic,
        max(mid.partition(), 0),  # -1 on a non-partitioned topic
        pack_pulsar_position(ledger, entry, batch),
        timestamp_ms=msg.publish_timestamp() or None,
        key=key.encode() if key else None,
        value=None if msg.has_null_value() else msg.data(),
        headers=[(name, value.encode()) for name, value in properties.items()],
        message_id=f"{ledger}:{entry}:{batch}",
    )


def list_pulsar_dead_letters(
    service_url: str,
    dlq_topic: str,
    workload: str,
    limit: int | None = None,
    since_ms: int | None = None,
    client_options: ClientOptions | None = None,
    *,
    timeout: float = 30.0,
    idle: float = 1.0,
) -> list[DeadLetterEntry]:
    """The dead letters of ``workload`` in the Pulsar topic ``dlq_topic``, ordered by partition
    then position; the same filters as the Kafka :func:`~consumers.dead_letters.reading.list_dead_letters`.

    Acknowledges nothing. A topic that does not exist reads as empty (Pulsar creates topics on
    first use). Raises :class:`BrokerError` when the broker refuses the reader or stops
    delivering for ``timeout`` seconds before the end it announced.
    """
    check_limit(limit)
    client = pulsar_client(service_url, client_options)
    entries: list[DeadLetterEntry] = []
    try:
        for name, _ in partition_names(client, dlq_topic, service_url):
            for msg in _read_to_end(client, name, timeout, idle):
                entry = pulsar_entry(msg, dlq_topic)
                if entry is not None and listed(entry, workload, since_ms):
                    entries.append(entry)
    finally:
        client.close()
    return first_entries(entries, limit)


def _read_to_end(
    client: pulsar.Client, topic: str, timeout: float, idle: float
) -> Iterator[pulsar.Message]:
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
    except pulsar.PulsarException as exc:
        raise BrokerError(f"cannot read {topic}: {exc}") from exc
    try:
        while True:
            try:
                more: bool | None = reader.has_message_available()
            except pulsar.PulsarException:
                more = None  # the broker cannot tell (pulsar-lite on an empty topic)
            if more is False:
                return
            wait = timeout if more else idle
            try:
                msg = reader.read_next(max(int(wait * 1000), 1))
            except pulsar.Timeout:
                if more:
                    raise BrokerError(
                        f"reading {topic}: the broker announced more messages but delivered "
                        f"none for {timeout:.0f} s"
                    ) from None
                return
            except pulsar.PulsarException as exc:
                raise BrokerError(f"reading {topic}: {exc}") from exc
            yield msg
    finally:
        reader.close()
