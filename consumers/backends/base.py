"""The broker contract: what the engine asks of a client, in the engine's own types.

Every backend (``kafka.py``, ``pulsar.py``, ``memory.py``) implements these protocols and nothing
here knows a client library, so the engine above them never sees a ``confluent_kafka`` or
``pulsar`` type and a backend never imports the engine. A partition is ``(topic, index)``; a
position to commit is ``(topic, index, offset, metadata)``; a broker failure is a
:class:`~consumers.errors.BrokerError`.

A consumer's lifecycle, all on the one thread that owns it (``consumers.engine.source``)::

    factory(on_commit) → subscribe(topics, on_assign, on_revoke, on_lost)
      → consume()* with commit / pause / resume / committed / high_watermark in between
      → close()

Rebalance callbacks run inside ``consume()`` (librdkafka calls them there) or ``subscribe()``.
An assigned partition is read from the group's committed position as it stands when
``on_assign`` returns: a synchronous ``commit`` inside ``on_assign`` sets where reading starts
(Kafka fetches the committed offsets after the callback; the engine sets a partition back this way
when a landed file was damaged). Pulsar has no committed positions to set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from consumers.errors import DeliveryError
from consumers.record import SourceIdentity

#: A partition: (topic, partition index).
PartitionKey = tuple[str, int]
#: A position to commit: (topic, partition, offset, metadata); metadata may be "".
CommitOffset = tuple[str, int, int, str]
#: The offset ``committed()`` reports for a partition with nothing committed.
NO_OFFSET = -1001

#: Told the partitions assigned, revoked or lost.
Rebalance = Callable[[list[PartitionKey]], None]
#: Told the outcome of an asynchronous commit: None, or why it failed.
CommitResult = Callable[[str | None], None]


class MessageLike(Protocol):
    """What the engine reads from a client message (``confluent_kafka.Message`` and
    :class:`PlainMessage` both fit), so unit tests can use small stubs."""

    def error(self) -> Any: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...
    def timestamp(self) -> tuple[int, int]: ...


class PlainMessage:
    """A ``MessageLike`` that holds its fields: what an adapter builds when its client's messages
    are not shaped like confluent-kafka's (Pulsar, the in-memory broker)."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        timestamp: int,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """Always ``(CREATE_TIME, ms)``: both adapters carry the producer's time."""
        return (1, self._timestamp)


class ConsumerLike(Protocol):
    """One group member (Kafka) or subscription consumer (Pulsar). Broker failures raise
    :class:`~consumers.errors.BrokerError`."""

    def subscribe(
        self,
        topics: list[str],
        *,
        on_assign: Rebalance,
        on_revoke: Rebalance,
        on_lost: Rebalance,
    ) -> None: ...

    def consume(self, num_messages: int, timeout: float) -> Sequence[MessageLike]:
        """Up to ``num_messages``, waiting at most ``timeout`` seconds. librdkafka waits out the
        timeout unless ``num_messages`` arrive; asked for one, every client returns with it."""
        ...

    def commit(self, offsets: list[CommitOffset], asynchronous: bool) -> None:
        """Asynchronous: the outcome reaches the factory's ``on_commit``. Synchronous: returns
        once the broker accepted every position, else raises ``BrokerError``."""
        ...

    def committed(self, parts: list[PartitionKey], timeout: float) -> list[CommitOffset]:
        """The group's positions; offset :data:`NO_OFFSET` where nothing is committed."""
        ...

    def pause(self, parts: list[PartitionKey]) -> None:
        """Stop fetching ``parts``. Like librdkafka, a client may keep the flag across a revoke
        and the next assignment of the same partition: the engine resumes on assignment."""
        ...

    def resume(self, parts: list[PartitionKey]) -> None: ...

    def seek(self, part: PartitionKey, offset: int) -> None:
        """Deliver ``part`` from ``offset`` next (an assigned partition the client fetches)."""
        ...

    def high_watermark(self, part: PartitionKey) -> int:
        """The partition's end as the client last saw it (no broker round trip); -1 unknown."""
        ...

    def low_watermark(self, part: PartitionKey) -> int:
        """The partition's earliest offset the broker still holds (a round trip; rare: when a
        partition is set back); -1 unknown."""
        ...

    def positions(self, parts: list[PartitionKey]) -> dict[PartitionKey, int]:
        """The offset the client returns next, per partition it knows one for: past offsets it
        never returns (transaction markers, compacted records) once it has read over them."""
        ...

    def close(self) -> None: ...


#: Builds a consumer; ``on_commit`` receives the outcome of every asynchronous commit.
ConsumerFactory = Callable[[CommitResult], ConsumerLike]


def delivery_failure(error: object) -> DeliveryError:
    """What a failure means where the client says nothing more: a ``DeliveryError`` as it is;
    an exception ``produce`` raised is permanent (the same record is refused again); any other
    delivery error is transient."""
    if isinstance(error, DeliveryError):
        return error
    if isinstance(error, Exception):
        return DeliveryError(f"{type(error).__name__}: {error}", permanent=True)
    return DeliveryError(str(error), permanent=False)


class ProducerLike(Protocol):
    """The producer contract (shaped like ``confluent_kafka.Producer``): ``produce`` queues a
    record and ``on_delivery(error, message)`` reports it from inside ``poll``/``flush``, with
    ``error`` None on success. ``produce`` raises ``BufferError`` while its queue is full (try
    again shortly), any other exception for a record it refuses; :meth:`delivery_error` says
    what such an error means (read only on failures: the hot path stays the client's own)."""

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None: ...
    def poll(self, timeout: float = -1) -> int: ...
    def flush(self, timeout: float = -1) -> int: ...
    def close(self) -> Any: ...

    def delivery_error(self, error: object) -> DeliveryError:
        """``error`` (passed to ``on_delivery``, or raised by ``produce``), told permanent or not."""
        ...


ProducerFactory = Callable[[], ProducerLike]


#: Looks up the current identity of topics: for a landing workload's file names, and for the
#: watch on topics replaced under a running workload (:mod:`consumers.engine.incarnations`).
Identify = Callable[[list[str]], Mapping[str, SourceIdentity]]
#: A landed row's position in its source (Pulsar: the message id; Kafka: the offset).
Position = Callable[[str, int, int], int]


@dataclass(frozen=True)
class Backend:
    """Everything the engine needs from one broker kind for one workload: its clients and, for a
    landing workload, how to name and place what it lands."""

    consumer_factory: ConsumerFactory
    producer_factory: ProducerFactory
    identify: Identify | None = None
    position: Position | None = None
    #: Topic ids to watch while the workload runs (brokers with topic ids: Kafka).
    incarnations: Identify | None = None
