"""The record a handler receives, and the protocol of the client messages it is built from."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from consumers.engine.partition import PartitionState
    from consumers.outcomes import OutputRecord


class MessageLike(Protocol):
    """What the engine reads from a client message (``confluent_kafka.Message`` and the
    in-memory backend's message both fit), so unit tests can use small stubs."""

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


class Record:
    """One consumed record. Plain slots, no properties: it is built once per message on the hot
    path. ``value`` is the raw bytes (``None`` for a tombstone); :meth:`json` decodes it."""

    __slots__ = (
        "_attempts",
        "_done",
        "_emitted",
        "_outputs",
        "_part",
        "_pending",
        "headers",
        "key",
        "offset",
        "partition",
        "timestamp",
        "topic",
        "value",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp: int = 0,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self._done = False
        self._part: PartitionState | None = None
        #: Failed handler attempts so far.
        self._attempts = 0
        #: Output records once resolved (None until then); only with an output topic.
        self._outputs: list[OutputRecord] | None = None
        #: Broker acknowledgements still awaited (outputs, dead letter).
        self._pending = 0
        #: Its outputs were handed to the producer in source order.
        self._emitted = False

    def json(self) -> Any:
        """Decode the value as JSON (``None`` for a tombstone or an empty value)."""
        if not self.value:
            return None
        return json.loads(self.value)

    def header(self, name: str) -> bytes | None:
        """The last header called ``name``, or ``None``."""
        found = None
        for key, value in self.headers or ():
            if key == name:
                found = value
        return found

    def __repr__(self) -> str:
        return f"Record({self.topic}[{self.partition}]@{self.offset} key={self.key!r})"
