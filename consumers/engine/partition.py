"""Per-partition state owned by the event loop, its one writer (what the source thread observes,
such as the partition's end, reaches it as a posted event): the commit tracker, the lanes (FIFOs
of records waiting to run) and flow counters.

Before that the source thread builds it in the client's assignment callback and prepares it
(committed position, suspect window, the lake cut back) and only then posts it to the loop: a
hand-over, so at no time do two threads write one partition's fields."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

from consumers.engine.tracked import TrackedRecord
from consumers.engine.tracker import OffsetTracker

if TYPE_CHECKING:
    from consumers.engine.crashes import Suspect

_GENERATIONS = itertools.count()


class PartitionState:
    """Everything the engine knows about one assigned partition."""

    __slots__ = (
        "awaiting_outputs",
        "closing",
        "committed",
        "generation",
        "high_watermark",
        "in_flight",
        "lanes",
        "partition",
        "paused",
        "revoked",
        "skip",
        "suspect",
        "topic",
        "tracker",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        skip: set[int] | None = None,
        committed: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        #: The committed position reading starts at (None: none committed, or not Kafka).
        self.committed = committed
        #: Unique per assignment in this process (logs and tests tell assignments apart by it).
        self.generation = next(_GENERATIONS)
        self.tracker = OffsetTracker()
        #: Records in delivery order whose outputs are not produced yet (output topic only).
        self.awaiting_outputs: deque[TrackedRecord] = deque()
        self.lanes: dict[Hashable, Lane] = {}
        #: Records handed to a worker and not finished yet.
        self.in_flight = 0
        #: Offsets a previous owner already completed (decoded from commit metadata).
        self.skip: set[int] = skip or set()
        #: Intake stopped (revoke in progress); queued records are dropped, not run.
        self.closing = False
        #: Revoke finished; completions arriving now are ignored.
        self.revoked = False
        #: The runner asked the source to pause this partition (buffer full).
        self.paused = False
        #: Log end as last seen by the client (cached watermarks; for lag).
        self.high_watermark: int | None = None
        #: Earlier holders died holding it: its first records run one at a time, journaled
        #: (:mod:`consumers.engine.crashes`); set before its first record is read.
        self.suspect: Suspect | None = None

    def __repr__(self) -> str:
        return f"PartitionState({self.topic}[{self.partition}])"


class Lane:
    """A key's FIFO of records waiting to run; ``ordered`` lanes run one record at a time.

    The lane is its own queue: the head record in a slot, a deque only behind it. Most lanes of
    a key-ordered workload hold one record (a key's next record arrives after the previous one
    ran); a deque costs ~620 bytes even when empty, so with many distinct keys in the buffer
    (1M keys: ~60,000 lanes at once) deques alone were ~40 MB, a slot is 8 bytes. ``head is
    None`` means empty, which the ready queue reads without a call. State changes happen in
    :mod:`consumers.engine.ready` only.
    """

    __slots__ = ("busy", "head", "lane_id", "ordered", "part", "ready", "rest")

    def __init__(self, lane_id: Hashable, part: PartitionState, ordered: bool) -> None:
        self.lane_id = lane_id
        self.part = part
        self.ordered = ordered
        self.head: TrackedRecord | None = None
        self.rest: deque[TrackedRecord] | None = None
        #: A record of this lane is running (ordered lanes only).
        self.busy = False
        #: The lane sits in the workload's ready queue.
        self.ready = False

    def append(self, rec: TrackedRecord) -> None:
        if self.head is None:
            self.head = rec
        elif self.rest is None:
            self.rest = deque((rec,))
        else:
            self.rest.append(rec)

    def popleft(self) -> TrackedRecord:
        rec = self.head
        if rec is None:
            raise IndexError("pop from an empty lane")
        rest = self.rest
        self.head = rest.popleft() if rest else None
        return rec

    def appendleft(self, rec: TrackedRecord) -> None:
        if self.head is not None:
            if self.rest is None:
                self.rest = deque()
            self.rest.appendleft(self.head)
        self.head = rec

    def extendleft(self, recs: Iterable[TrackedRecord]) -> None:
        for rec in recs:
            self.appendleft(rec)

    def __len__(self) -> int:
        if self.head is None:
            return 0
        return 1 + len(self.rest) if self.rest else 1
