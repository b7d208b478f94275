"""The record a handler receives."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from consumers.outcomes import OutputRecord


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
        #: The engine's ``PartitionState`` once filed (``Any``: the record a handler sees does not
        #: import the engine, which imports it).
        self._part: Any = None
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
