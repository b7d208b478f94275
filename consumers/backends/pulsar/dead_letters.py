"""Pulsar's :class:`~consumers.backends.admin.DeadLetterStore`: dead-letter topics read with a
Reader (acknowledges nothing, leaves no subscription behind), replay progress kept by a durable
Shared subscription, records republished by :class:`PulsarProducer`.

The end of a read: where ``has_message_available`` (the broker's last message id) says no more;
where the broker cannot answer that (pulsar-lite, on an empty topic), where nothing arrived for
``idle`` seconds. A replay's end: once the message that was last in the topic when it started has
arrived (and what is already queued after it), or when nothing arrived for ``idle`` seconds (all
the rest was acknowledged by earlier replays, or the broker cannot name its last message).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import pulsar

from consumers.backends.admin import Outgoing, StoredRecord
from consumers.backends.pulsar.client import PARTITION_SUFFIX, client_kwargs
from consumers.backends.pulsar.consumer import pack_pulsar_position
from consumers.backends.pulsar.producer import PulsarProducer
from consumers.errors import BrokerError

log = logging.getLogger(__name__)

#: Messages received (then republished, then acknowledged) per batch.
BATCH: Final = 500

ClientOptions = Mapping[str, Any]


class PulsarDeadLetters:
    """Dead-letter topics on one Pulsar service; ``options``: ``pulsar.Client`` keyword
    arguments (``auth_token`` becomes authentication)."""

    def __init__(
        self,
        service_url: str,
        options: ClientOptions | None = None,
        *,
        timeout: float = 30.0,
        idle: float = 1.0,
    ) -> None:
        self.address = service_url
        self.options = dict(options or {})
        self.timeout = timeout
        self.idle = idle

    def read_to_end(self, topic: str, reader: str) -> Iterator[StoredRecord]:
        client = self._client()
        try:
            for name, _ in self._partitions(client, topic):
                for msg in self._read_partition(client, name):
                    yield _stored(msg)
        finally:
            client.close()

    @contextmanager
    def progress_reader(self, topic: str, progress: str) -> Iterator[_SubscriptionReader]:
        client = self._client()
        try:
            partitioned = self._partitions(client, topic) != [(topic, 0)]
            try:
                consumer = client.subscribe(
                    topic,
                    progress,
                    consumer_type=pulsar.ConsumerType.Shared,
                    initial_position=pulsar.InitialPosition.Earliest,
                )
            except pulsar.PulsarException as exc:
                raise BrokerError(
                    f"cannot subscribe {progress!r} to {topic} on {self.address}: {exc}",
                    topic=topic,
                ) from exc
            try:
                end = None if partitioned else _last_entry(consumer)
                yield _SubscriptionReader(consumer, progress, end, self.idle)
            finally:
                try:
                    consumer.close()  # sends any acknowledgement still grouped in the client
                except pulsar.PulsarException as exc:  # never hides the error that ended the read
                    log.warning(
                        "closing %r on %s: %s (unsent acknowledgements are redelivered)",
                        progress,
                        topic,
                        exc,
                    )
        except pulsar.PulsarException as exc:
            raise BrokerError(f"replaying {topic}: {exc}", topic=topic) from exc
        finally:
            client.close()

    @contextmanager
    def republisher(self) -> Iterator[_Republisher]:
        producer = PulsarProducer(self.address, self.options)
        try:
            yield _Republisher(producer, self.timeout)
        finally:
            # Anything unacknowledged on the subscription is redelivered (at-least-once).
            producer.flush(min(self.timeout, 5.0))
            producer.close()

    def _client(self) -> pulsar.Client:
        try:
            return pulsar.Client(self.address, **client_kwargs(self.options))
        except (pulsar.PulsarException, ValueError) as exc:
            raise BrokerError(f"cannot create a Pulsar client for {self.address}: {exc}") from exc

    def _partitions(self, client: pulsar.Client, topic: str) -> list[tuple[str, int]]:
        """``(name, index)`` of each partition of ``topic`` (itself and 0 if it has none)."""
        try:
            names = client.get_topic_partitions(topic)
        except pulsar.PulsarException as exc:
            raise BrokerError(
                f"cannot look up {topic} on {self.address}: {exc}", topic=topic
            ) from exc
        out = []
        for name in names:
            match = PARTITION_SUFFIX.match(name)
            out.append((name, int(match["index"]) if match and name != topic else 0))
        return out

    def _read_partition(self, client: pulsar.Client, topic: str) -> Iterator[pulsar.Message]:
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
        except pulsar.PulsarException as exc:
            raise BrokerError(f"cannot read {topic}: {exc}", topic=topic) from exc
        try:
            while True:
                try:
                    more: bool | None = reader.has_message_available()
                except pulsar.PulsarException:
                    more = None  # the broker cannot tell (pulsar-lite on an empty topic)
                if more is False:
                    return
                wait = self.timeout if more else self.idle
                try:
                    msg = reader.read_next(max(int(wait * 1000), 1))
                except pulsar.Timeout:
                    if more:
                        raise BrokerError(
                            f"reading {topic}: the broker announced more messages but "
                            f"delivered none for {self.timeout:.0f} s",
                            topic=topic,
                            retriable=True,
                        ) from None
                    return
                except pulsar.PulsarException as exc:
                    raise BrokerError(f"reading {topic}: {exc}", topic=topic) from exc
                yield msg
        finally:
            reader.close()


class _SubscriptionReader:
    """What a durable Shared subscription delivers, acknowledged once handled."""

    def __init__(
        self, consumer: pulsar.Consumer, name: str, end: tuple[int, int] | None, idle: float
    ) -> None:
        self._consumer = consumer
        self._name = name
        self._end = end
        self._idle = idle
        self.scanned = 0

    def batches(self) -> Iterator[list[StoredRecord]]:
        reached = False
        while True:
            batch: list[pulsar.Message] = []
            try:  # past the end, only what is already queued (the rest of the last batch)
                batch.append(
                    self._consumer.receive(0 if reached else max(int(self._idle * 1000), 1))
                )
                while len(batch) < BATCH:
                    batch.append(self._consumer.receive(0))
            except pulsar.Timeout:
                pass
            except pulsar.PulsarException as exc:
                raise BrokerError(f"receiving on {self._name!r}: {exc}") from exc
            if not batch:
                return
            if self._end is not None and not reached:
                reached = max(_entry_of(m) for m in batch) >= self._end
            yield [_stored(m) for m in batch]

    def total(self) -> int | None:
        return None

    def mark_done(self, records: Sequence[StoredRecord]) -> None:
        self.scanned += len(records)  # only what was handled: the rest is redelivered
        try:
            for record in records:
                self._consumer.acknowledge(record.handle)
        except pulsar.PulsarException as exc:  # republished but not recorded: a rerun repeats
            raise BrokerError(
                f"acknowledging replay progress on {self._name!r} failed: {exc}", retriable=True
            ) from exc


class _Republisher:
    """Sends with the key as partition key and the headers as properties."""

    def __init__(self, producer: PulsarProducer, timeout: float) -> None:
        self._producer = producer
        self._timeout = timeout
        self._failures: list[str] = []

    def _delivered(self, error: str | None, _msg: object) -> None:
        if error is not None:
            self._failures.append(error)

    def require(self, topic: str) -> None:
        """Pulsar creates a topic on first use: nothing to check."""

    def send(self, topic: str, record: Outgoing) -> None:
        properties = [(name, v) for name, v in record.headers if v is not None]
        self._producer.produce(
            topic, record.value, record.key, headers=properties, on_delivery=self._delivered
        )

    def confirm(self, sent: int) -> None:
        if not sent:
            return
        remaining = self._producer.flush(self._timeout)
        if self._failures:
            raise BrokerError(
                f"republishing failed ({self._failures[0]}); this batch stays unacknowledged on "
                "the replay subscription, so a rerun republishes it (some of its records may "
                "then arrive twice)"
            )
        if remaining:
            raise BrokerError(
                f"{remaining} republished records not acknowledged after {self._timeout:.0f} s; "
                "this batch stays unreplayed, a rerun republishes it",
                retriable=True,
            )


def _last_entry(consumer: pulsar.Consumer) -> tuple[int, int] | None:
    """``(ledger, entry)`` of the topic's last message now; ``None`` if unknown or empty."""
    try:
        last = consumer.get_last_message_id()
    except pulsar.PulsarException:
        return None  # pulsar-lite cannot answer on an empty topic
    return (last.ledger_id(), last.entry_id()) if last.entry_id() >= 0 else None


def _entry_of(msg: pulsar.Message) -> tuple[int, int]:
    mid = msg.message_id()
    return (mid.ledger_id(), mid.entry_id())


def _stored(msg: pulsar.Message) -> StoredRecord:
    """``position`` is the message id packed into one number ordered like the topic
    (:func:`~consumers.backends.pulsar.consumer.pack_pulsar_position`)."""
    mid = msg.message_id()
    ledger, entry, batch = mid.ledger_id(), mid.entry_id(), mid.batch_index()
    key = msg.ordering_key() or msg.partition_key()
    return StoredRecord(
        max(mid.partition(), 0),  # -1 on a non-partitioned topic
        pack_pulsar_position(ledger, entry, batch),
        timestamp_ms=msg.publish_timestamp() or None,
        key=key.encode() if key else None,
        value=None if msg.has_null_value() else msg.data(),
        headers=[(name, value.encode()) for name, value in (msg.properties() or {}).items()],
        message_id=f"{ledger}:{entry}:{batch}",
        handle=msg,
    )
