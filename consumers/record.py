"""The record a handler receives."""

from __future__ import annotations

import json
from typing import Any


class Record:
    """One consumed record. Plain slots, no properties: it is built once per message on the hot
    path. ``value`` is the raw bytes (``None`` for a tombstone); :meth:`json` decodes it. The
    engine hands handlers a subclass that also holds its bookkeeping
    (:class:`consumers.engine.tracked.TrackedRecord`); only these fields are the handler's."""

    __slots__ = (
        "attempts",
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
        #: Failed attempts before this call: 0 on the first, 1 on the first retry (counted by
        #: the engine; a handler reads it, for example to log or to give up early).
        self.attempts = 0

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
