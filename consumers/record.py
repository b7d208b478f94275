"""The record a handler receives, and the source incarnation records come from."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


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


@dataclass(frozen=True)
class SourceIdentity:
    """Which incarnation of which topic on which cluster the records come from."""

    kind: str
    #: Bootstrap servers or service URL, never with credentials.
    cluster: str
    topic: str
    #: The broker's id of this incarnation of the topic ("" when the broker has none).
    topic_id: str

    def file_prefix(self) -> str:
        """A path-safe name for this incarnation: the topic, then a digest of all four."""
        digest = hashlib.blake2b(
            f"{self.kind}\0{self.cluster}\0{self.topic}\0{self.topic_id}".encode(), digest_size=4
        ).hexdigest()
        return f"{_UNSAFE.sub('_', self.topic)[:80]}~{digest}"
