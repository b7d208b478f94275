"""Commit tracking for one partition: the contiguous watermark over *delivered* records.

The committed position is the offset of the first delivered record that is not yet complete, or
one past the last delivered record when every delivered record is complete. Offsets that were
never delivered (compaction, transaction markers) are simply absent from the queue, so they can
never stall the watermark, and nothing is ever skipped on a timer.

Records complete in any order; completion is O(1) and advancing is amortized O(1): a record
carries its own ``done`` flag and the queue is popped while its head is done.

Completed offsets above the watermark travel in the commit's metadata
(:mod:`consumers.backends.metadata`), so a restart skips work already done.
"""

from __future__ import annotations

from collections import deque

from consumers.engine.tracked import TrackedRecord


class OffsetTracker:
    """Delivered-but-uncommitted records of one partition, in offset order."""

    __slots__ = (
        "_done_ahead",
        "_pending",
        "client_position",
        "last_delivered",
        "pinned_since",
        "released",
    )

    def __init__(self) -> None:
        self._pending: deque[TrackedRecord] = deque()
        #: Completed records behind an incomplete head (what the commit metadata lists).
        self._done_ahead = 0
        self.last_delivered: int | None = None
        #: Records that left the queue (complete and below the watermark), ever.
        self.released = 0
        #: Clock reading when the current head record became the head.
        self.pinned_since = 0.0
        #: The client's position when it read past offsets it never delivers (a transaction
        #: marker after the last record): the watermark once everything delivered is done.
        self.client_position: int | None = None

    def deliver(self, records: list[TrackedRecord], now: float) -> None:
        """Track a run of new records, in increasing offset order (the intake drops a
        redelivered offset before it gets here), after every record delivered so far."""
        if not records:
            return
        first = records[0].offset
        last = self.last_delivered
        if last is not None and first <= last:
            raise ValueError(
                f"offset {first} delivered after {last} on {records[0].topic}"
                f"[{records[0].partition}]: a partition must be delivered in offset order"
            )
        if not self._pending:
            self.pinned_since = now
        client_position = self.client_position
        if client_position is not None and first < client_position:
            self.client_position = None  # the client went back: its old position no longer holds
        self._pending.extend(records)
        self.last_delivered = records[-1].offset

    def complete(self, record: TrackedRecord, now: float) -> int:
        """Mark ``record`` done; return how many records the watermark advanced past."""
        record.done = True
        pending = self._pending
        if pending[0] is not record:
            self._done_ahead += 1
            return 0
        pending.popleft()
        advanced = 1
        while pending and pending[0].done:
            pending.popleft()
            advanced += 1
        self._done_ahead -= advanced - 1
        self.released += advanced
        self.pinned_since = now
        return advanced

    def client_at(self, position: int) -> None:
        """The client's position, given once every record it delivered below it was delivered
        here; kept when it is past the last delivered record (offsets never delivered)."""
        last = self.last_delivered
        if last is None or position > last + 1:
            self.client_position = position

    @property
    def position(self) -> int | None:
        """Offset to commit: the first incomplete delivered record; else one past the last one,
        or the client's position past offsets it never delivers (transaction markers, compacted
        records), so an idle partition's committed offset reaches the log end."""
        if self._pending:
            return self._pending[0].offset
        last = self.last_delivered
        client_position = self.client_position
        if last is None:
            return client_position
        if client_position is not None and client_position > last + 1:
            return client_position
        return last + 1

    @property
    def head(self) -> TrackedRecord | None:
        """The record that pins the watermark, if any."""
        return self._pending[0] if self._pending else None

    def __len__(self) -> int:
        return len(self._pending)

    def done_above(self) -> list[int]:
        """Completed offsets above the watermark (what a restart could skip); no scan of the
        buffer when there are none, the usual case of a commit."""
        if not self._done_ahead:
            return []
        return [r.offset for r in self._pending if r.done]

    def drop_all(self) -> list[TrackedRecord]:
        """Forget every pending record (partition revoked); returns them for accounting."""
        dropped = list(self._pending)
        self._pending.clear()
        self._done_ahead = 0
        return dropped
