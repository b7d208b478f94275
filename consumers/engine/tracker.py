"""Commit tracking for one partition: the contiguous watermark over *delivered* records.

The committed position is the offset of the first delivered record that is not yet complete, or
one past the last delivered record when every delivered record is complete. Offsets that were
never delivered (compaction, transaction markers) are simply absent from the queue, so they can
never stall the watermark, and nothing is ever skipped on a timer.

Records complete in any order; completion is O(1) and advancing is amortized O(1): a record
carries its own ``_done`` flag and the queue is popped while its head is done.

Completed offsets above the watermark can be encoded into Kafka commit metadata so a restart
skips work already done (:func:`encode_done` / :func:`decode_done`). Where a broker drops the
metadata (Tansu), a restart simply replays those records: duplicates, never loss.
"""

from __future__ import annotations

import base64
import zlib
from collections import deque
from collections.abc import Iterable

from consumers.record import Record

METADATA_PREFIX = "lh1:"
#: Kafka's default ``offset.metadata.max.bytes`` is 4096; stay well under it.
METADATA_MAX_BYTES = 3000


class OffsetTracker:
    """Delivered-but-uncommitted records of one partition, in offset order."""

    __slots__ = ("_pending", "committed", "last_delivered", "pinned_since", "released")

    def __init__(self) -> None:
        self._pending: deque[Record] = deque()
        self.last_delivered: int | None = None
        #: The position last committed to the broker (None before the first commit).
        self.committed: int | None = None
        #: Records that left the queue (complete and below the watermark), ever.
        self.released = 0
        #: Clock reading when the current head record became the head.
        self.pinned_since = 0.0

    def deliver(self, record: Record, now: float) -> None:
        """Track a record in offset order (the source delivers each partition in order)."""
        last = self.last_delivered
        if last is not None and record.offset <= last:
            raise ValueError(
                f"offset {record.offset} delivered after {last} on {record.topic}"
                f"[{record.partition}]: a partition must be delivered in offset order"
            )
        if not self._pending:
            self.pinned_since = now
        self._pending.append(record)
        self.last_delivered = record.offset

    def complete(self, record: Record, now: float) -> int:
        """Mark ``record`` done; return how many records the watermark advanced past."""
        record._done = True
        pending = self._pending
        if pending[0] is not record:
            return 0
        advanced = 0
        while pending and pending[0]._done:
            pending.popleft()
            advanced += 1
        self.released += advanced
        self.pinned_since = now
        return advanced

    @property
    def position(self) -> int | None:
        """Offset to commit: first incomplete delivered record, else one past the last one."""
        if self._pending:
            return self._pending[0].offset
        if self.last_delivered is None:
            return None
        return self.last_delivered + 1

    @property
    def head(self) -> Record | None:
        """The record that pins the watermark, if any."""
        return self._pending[0] if self._pending else None

    def __len__(self) -> int:
        return len(self._pending)

    def done_above(self) -> list[int]:
        """Completed offsets above the watermark (what a restart could skip)."""
        return [r.offset for r in self._pending if r._done]

    def drop_all(self) -> list[Record]:
        """Forget every pending record (partition revoked); returns them for accounting."""
        dropped = list(self._pending)
        self._pending.clear()
        return dropped


def encode_done(position: int, done: Iterable[int]) -> str:
    """Encode completed offsets above ``position`` as compact commit metadata.

    Offsets become (gap, run-length) pairs relative to ``position``, as varints, zlib'd and
    base64'd. If the result would exceed :data:`METADATA_MAX_BYTES`, the highest runs are dropped:
    that only means more replays on restart, never a loss.
    """
    runs: list[tuple[int, int]] = []
    prev = position
    for offset in sorted(set(done)):
        if offset < position:
            continue
        if runs and offset == prev:
            start, length = runs[-1]
            runs[-1] = (start, length + 1)
        else:
            runs.append((offset - prev, 1))
        prev = offset + 1
    while True:
        raw = bytearray()
        for gap, length in runs:
            _put_varint(raw, gap)
            _put_varint(raw, length)
        text = METADATA_PREFIX + base64.b64encode(zlib.compress(bytes(raw))).decode("ascii")
        if len(text) <= METADATA_MAX_BYTES or not runs:
            return text if runs else ""
        runs = runs[: len(runs) * 3 // 4]


#: More done offsets than this in metadata means it is not ours: ignore it (replay).
DECODE_MAX_OFFSETS = 1_000_000


def decode_done(position: int, metadata: str | None) -> set[int]:
    """Inverse of :func:`encode_done`; unknown, damaged or implausibly large metadata decodes
    to nothing (those records are replayed)."""
    if not metadata or not metadata.startswith(METADATA_PREFIX):
        return set()
    try:
        raw = zlib.decompress(base64.b64decode(metadata[len(METADATA_PREFIX) :], validate=True))
    except (ValueError, zlib.error):
        return set()
    done: set[int] = set()
    cursor = position
    i = 0
    try:
        while i < len(raw):
            gap, i = _get_varint(raw, i)
            length, i = _get_varint(raw, i)
            start = cursor + gap
            if len(done) + length > DECODE_MAX_OFFSETS:
                return set()
            done.update(range(start, start + length))
            cursor = start + length
    except IndexError:
        return set()
    return done


def _put_varint(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _get_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
