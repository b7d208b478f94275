"""pulsar-client behind the engine's client protocols, so Pulsar records take the same path as
Kafka records: lanes, permits, handlers, outcomes, retries, dead letters, outputs, metrics.

    Pulsar topic / partition ─► synthetic (topic, partition index)   stable across restarts
    Pulsar message           ─► synthetic offset 0, 1, 2, ... per partition and session
    engine commit(position, done-above metadata)
                             ─► acknowledge every held message below the position, and the
                                done ones above it; cumulatively where the subscription allows

Pulsar keeps the acknowledgement state on the broker, per message, so nothing needs to be
"committed" as a number: the offsets are the engine's own bookkeeping and start from 0 in every
session (``committed()`` reports none). A message the broker redelivers while its first copy is
still held (after a reconnect) is recognised by its message id and dropped.

Backpressure: while the engine has paused any partition, ``consume()`` does not call
``receive`` at all, so the broker stops at the client's bounded receiver queue. A Shared
subscription over one topic has one partition, so that is exact; with several partitions a
full one holds back the others too (the client has no per-partition receive).
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast
from urllib.parse import urlsplit

import pulsar

from consumers.backends.base import (
    NO_OFFSET,
    Backend,
    CommitOffset,
    CommitResult,
    ConsumerFactory,
    ConsumerLike,
    MessageLike,
    PartitionKey,
    PlainMessage,
    Rebalance,
)
from consumers.backends.metadata import decode_done
from consumers.backends.pulsar.client import (
    CUMULATIVE_TYPES,
    INITIAL_POSITIONS,
    PARTITION_SUFFIX,
    SUBSCRIPTION_TYPES,
    PulsarSettings,
    client_kwargs,
)
from consumers.backends.pulsar.producer import pulsar_producer_factory
from consumers.errors import BrokerError
from consumers.record import SourceIdentity

log = logging.getLogger("lanehouse.pulsar")


_LEDGER_BITS, _ENTRY_BITS, _BATCH_BITS = 28, 23, 12


def pack_pulsar_position(ledger: int, entry: int, batch_index: int) -> int:
    """A Pulsar message id as one ``_offset``: ordered like the ids, stable across sessions.

    Ledger ids are unique in a cluster, so a recreated topic never reuses a position. Raises
    ``ValueError`` past 2^28 ledgers, 2^23 entries per ledger (Pulsar rolls ledgers over at
    50,000 entries by default) or 4,095 messages per batch.
    """
    batch = batch_index + 1  # -1 (not batched) becomes 0
    if not (
        0 <= ledger < 1 << _LEDGER_BITS
        and 0 <= entry < 1 << _ENTRY_BITS
        and 0 <= batch < 1 << _BATCH_BITS
    ):
        raise ValueError(
            f"Pulsar message id ({ledger}:{entry}:{batch_index}) does not fit a lake position"
        )
    return (ledger << (_ENTRY_BITS + _BATCH_BITS)) | (entry << _BATCH_BITS) | batch


def _message(topic: str, partition: int, offset: int, msg: Any) -> PlainMessage:
    """Key: the ordering key, else the partition key (``None`` if neither); headers: properties;
    timestamp: event time, else publish time. ``msg`` is the client's own ``_pulsar.Message``
    (untyped), not the ``pulsar.Message`` wrapper: each accessor is one C++ call (~0.45 µs), no
    Python frame around it, and no more of them than needed (a null value is asked about only
    when the data is empty)."""
    key = msg.ordering_key() or msg.partition_key()
    properties = msg.properties()
    value = msg.data()
    return PlainMessage(
        topic,
        partition,
        offset,
        key.encode() if key else None,
        None if not value and msg.has_null_value() else value,
        [(k, v.encode()) for k, v in properties.items()] if properties else None,
        msg.event_timestamp() or msg.publish_timestamp(),
    )


#: ``consume`` waits for a first message, then takes what else the client has received with one
#: ``batch_receive``: up to this many messages or bytes, waiting at most this long for more.
RECEIVE_BATCH, RECEIVE_BYTES, RECEIVE_WAIT_MS = 1000, 16 * 1024 * 1024, 1


class _Held:
    """The messages of one partition received but not yet acknowledged, by synthetic offset.

    A message is known again by its id's serialized form: one client call, where the ledger,
    entry and batch index are three (the lake position reads them later, from the held id)."""

    __slots__ = ("by_ident", "by_offset", "last_id", "low", "next_offset")

    def __init__(self) -> None:
        self.next_offset = 0
        self.low = 0  # every offset below is acknowledged
        self.by_offset: dict[int, tuple[pulsar.MessageId, bytes]] = {}
        self.by_ident: dict[bytes, int] = {}
        self.last_id: pulsar.MessageId | None = None

    def hold(self, message_id: pulsar.MessageId) -> int | None:
        """The offset for a newly received message; ``None`` for a redelivery of a held one."""
        ident = message_id.serialize()
        if ident in self.by_ident:
            return None
        offset = self.next_offset
        self.next_offset = offset + 1
        self.by_offset[offset] = (message_id, ident)
        self.by_ident[ident] = offset
        self.last_id = message_id
        return offset

    def release(self, offset: int) -> pulsar.MessageId | None:
        held = self.by_offset.pop(offset, None)
        if held is None:
            return None
        del self.by_ident[held[1]]
        return held[0]

    def release_below(self, position: int) -> list[pulsar.MessageId]:
        ids = [mid for off in range(self.low, position) if (mid := self.release(off)) is not None]
        self.low = max(self.low, position)
        return ids


class PulsarConsumer:
    """A ``ConsumerLike`` over one ``pulsar.Consumer`` (all the workload's topics)."""

    def __init__(self, settings: PulsarSettings, on_commit: CommitResult) -> None:
        self._settings = settings
        self._on_commit = on_commit
        self._cumulative = settings.subscription_type in CUMULATIVE_TYPES
        self._client: pulsar.Client | None = None
        self._consumer: pulsar.Consumer | None = None
        self._on_assign: Rebalance | None = None
        #: Pulsar topic name (a partition's own name for partitioned topics) → engine key.
        self._keys: dict[str, tuple[str, int]] = {}
        self._held: dict[tuple[str, int], _Held] = {}
        #: The one partition of a subscription to one non-partitioned topic (which never gains
        #: partitions): its messages need no topic lookup.
        self._only: tuple[tuple[str, int], _Held] | None = None
        self._paused: set[tuple[str, int]] = set()
        self.redelivered = 0

    # ------------------------------------------------------------ ConsumerLike

    def subscribe(
        self,
        topics: list[str],
        *,
        on_assign: Rebalance | None = None,
        on_revoke: Rebalance | None = None,
        on_lost: Rebalance | None = None,
    ) -> None:
        """Revokes never come: the subscription's partitions stay this consumer's until it
        closes (the broker redelivers what it did not acknowledge). Callbacks left out are not
        called (tests)."""
        settings = self._settings
        self._on_assign = on_assign
        self._client = pulsar.Client(settings.service_url, **client_kwargs(settings.client_options))
        options = dict(settings.consumer_options)
        position = INITIAL_POSITIONS[options.pop("initial_position", "earliest")]
        try:
            for topic in topics:
                for name in self._client.get_topic_partitions(topic):
                    self._key_for(name, announce=False)
            if len(topics) == 1 and len(self._keys) == 1:
                ((name, key),) = self._keys.items()
                if not PARTITION_SUFFIX.match(name):
                    self._only = (key, self._held[key])
            options["batch_receive_policy"] = pulsar.ConsumerBatchReceivePolicy(
                RECEIVE_BATCH, RECEIVE_BYTES, RECEIVE_WAIT_MS
            )
            self._consumer = self._client.subscribe(
                topics if len(topics) > 1 else topics[0],
                settings.subscription,
                consumer_type=SUBSCRIPTION_TYPES[settings.subscription_type],
                initial_position=position,
                **options,
            )
        except pulsar.PulsarException as exc:
            self.close()
            raise BrokerError(
                f"cannot subscribe {settings.subscription!r} to {topics} on "
                f"{settings.service_url}: {exc}"
            ) from exc
        if on_assign is not None:
            on_assign(list(self._held))

    def consume(self, num_messages: int, timeout: float) -> list[MessageLike]:
        """Up to ``num_messages`` already-received messages, waiting at most ``timeout`` for the
        first; nothing (and no receive) while a partition is paused."""
        consumer = self._require()
        if self._paused:
            time.sleep(max(timeout, 0))
            return []
        wait_ms = 0x7FFFFFFF if timeout < 0 else int(timeout * 1000)
        client = consumer._consumer  # the client's own consumer: no wrapper per message
        wrap = self._wrap
        try:
            first = wrap(client.receive(wait_ms))
        except pulsar.Timeout:
            return []
        out: list[MessageLike] = [first] if first is not None else []
        # What else is already received: a batch at a time while a whole one fits (one call
        # and one GIL release, not one a message), then one at a time up to the count asked.
        try:
            while num_messages - len(out) >= RECEIVE_BATCH:
                batch = client.batch_receive()
                for msg in batch:
                    wrapped = wrap(msg)
                    if wrapped is not None:
                        out.append(wrapped)
                if len(batch) < RECEIVE_BATCH:
                    return out
            while len(out) < num_messages:
                wrapped = wrap(client.receive(0))
                if wrapped is not None:
                    out.append(wrapped)
        except pulsar.Timeout:
            pass
        return out

    def commit(self, offsets: list[CommitOffset], asynchronous: bool) -> None:
        consumer = self._require()
        error: str | None = None
        for topic, partition, position, metadata in offsets:
            held = self._held.get((topic, partition))
            if held is None:
                continue
            done = decode_done(position, metadata) if metadata else set()
            below = held.release_below(position)
            above = [mid for off in sorted(done) if (mid := held.release(off)) is not None]
            try:
                if self._cumulative and below:
                    consumer.acknowledge_cumulative(below[-1])
                else:
                    above = below + above
                for mid in above:
                    consumer.acknowledge(mid)
            except pulsar.PulsarException as exc:
                # Released messages are redelivered after a restart: a replay, never a loss.
                error = f"acknowledge failed: {exc}"
        if asynchronous:
            self._on_commit(error)
        elif error is not None:
            raise BrokerError(error, retriable=True)

    def committed(self, parts: list[PartitionKey], timeout: float) -> list[CommitOffset]:
        """Nothing: Pulsar keeps per-message acknowledgements, the offsets are per session."""
        return [(topic, partition, NO_OFFSET, "") for topic, partition in parts]

    def pause(self, parts: list[PartitionKey]) -> None:
        self._paused.update(parts)

    def resume(self, parts: list[PartitionKey]) -> None:
        self._paused.difference_update(parts)

    def seek(self, part: PartitionKey, offset: int) -> None:
        """Nothing: the offsets are this session's own numbering; what was not acknowledged is
        redelivered by the broker instead."""

    def high_watermark(self, part: PartitionKey) -> int:
        """An end where ``end - position`` estimates the backlog, else -1.

        The estimate is the entries between the last one received and the topic's last one,
        available for one non-partitioned topic (one message per entry unless producers batch).
        """
        held = self._held.get(part)
        if held is None or len(self._held) != 1 or held.last_id is None:
            return -1
        received = held.last_id
        try:
            last = self._require().get_last_message_id()
        except pulsar.PulsarException:
            return -1
        if last.ledger_id() != received.ledger_id():
            return -1
        return int(held.next_offset + max(last.entry_id() - received.entry_id(), 0))

    def positions(self, parts: list[PartitionKey]) -> dict[PartitionKey, int]:
        """None: the offsets are this session's own numbering, without holes."""
        return {}

    def low_watermark(self, part: PartitionKey) -> int:
        """Unknown: this session's offsets say nothing of what the broker retains."""
        return -1

    def close(self) -> None:
        """Close quietly: whatever was not acknowledged is redelivered, so a failing close (the
        broker gone) costs replays, not data."""
        for closable in (self._consumer, self._client):
            if closable is not None:
                try:
                    closable.close()
                except pulsar.PulsarException as exc:
                    log.warning("closing the Pulsar %s failed: %s", type(closable).__name__, exc)
        self._consumer = self._client = None

    def position(self, topic: str, partition: int, offset: int) -> int:
        """The lake position of a held message (see :func:`pack_pulsar_position`)."""
        mid, _ = self._held[(topic, partition)].by_offset[offset]
        return pack_pulsar_position(mid.ledger_id(), mid.entry_id(), mid.batch_index())

    # ------------------------------------------------------------ internals

    def _require(self) -> pulsar.Consumer:
        if self._consumer is None:
            raise RuntimeError("the Pulsar consumer is not subscribed (or already closed)")
        return self._consumer

    def _key_for(self, name: str, announce: bool = True) -> tuple[str, int]:
        key = self._keys.get(name)
        if key is None:
            match = PARTITION_SUFFIX.match(name)
            key = (match["base"], int(match["index"])) if match else (name, 0)
            self._keys[name] = key
            self._held[key] = _Held()
            if announce and self._on_assign is not None:
                # A partition added while running: announced before its first message.
                self._on_assign([key])
        return key

    def _wrap(self, msg: Any) -> PlainMessage | None:
        if self._only is not None:
            key, held = self._only
        else:
            name = msg.topic_name()
            key = self._keys.get(name) or self._key_for(name)
            held = self._held[key]
        offset = held.hold(msg.message_id())
        if offset is None:
            self.redelivered += 1
            return None
        return _message(key[0], key[1], offset, msg)


class PulsarLandingPositions:
    """Lake positions and identities for a landing workload reading Pulsar.

    The engine's Pulsar offsets are numbered afresh each session, so landed rows carry the
    message id instead; it is known to the consumer the factory built, which this remembers.
    """

    def __init__(self, settings: PulsarSettings) -> None:
        url = urlsplit(settings.service_url)
        # Never credentials in the lake: only scheme, host and port name the cluster.
        self.cluster = f"{url.scheme}://{url.hostname}" + (f":{url.port}" if url.port else "")
        self._consumer: PulsarConsumer | None = None
        self._factory = pulsar_consumer_factory(settings)

    def factory(self, on_commit: CommitResult) -> ConsumerLike:
        consumer = self._factory(on_commit)
        self._consumer = cast(PulsarConsumer, consumer)
        return consumer

    def identify(self, topics: list[str]) -> dict[str, SourceIdentity]:
        # Ledger ids are unique in a cluster: positions never repeat, no topic id is needed.
        return {topic: SourceIdentity("pulsar", self.cluster, topic, "") for topic in topics}

    def position(self, topic: str, partition: int, offset: int) -> int:
        if self._consumer is None:
            raise RuntimeError("no Pulsar consumer yet")
        return self._consumer.position(topic, partition, offset)


def pulsar_consumer_factory(settings: PulsarSettings) -> ConsumerFactory:
    """A factory for :class:`consumers.engine.source.SourceThread`."""

    return lambda on_commit: PulsarConsumer(settings, on_commit)


def pulsar_backend(settings: PulsarSettings, landing: bool) -> Backend:
    """A workload's Pulsar clients; when it lands, rows are placed by message id (the engine's
    Pulsar offsets are per session), so the consumer comes from :class:`PulsarLandingPositions`."""
    producers = pulsar_producer_factory(settings)
    if not landing:
        return Backend(pulsar_consumer_factory(settings), producers)
    positions = PulsarLandingPositions(settings)
    return Backend(positions.factory, producers, positions.identify, positions.position)
