"""Lanes: the unit of ordering. A lane runs one record at a time, in arrival order.

Ordering modes decide which lane a record joins:

- ``key``: one lane per distinct key, made on demand and freed when empty, so memory follows
  the records in flight, not the key count, and one slow key never blocks another;
- ``key`` with ``virtual_partitions: N``: keys hashed (xxhash, stable across processes; never
  Python's salted ``hash``) into N lanes per partition;
- ``partition``: one lane per partition;
- ``none``: one *unordered* lane per partition whose records may all run at once.

Records without a key are ordered by partition in the key modes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Literal

import xxhash

if TYPE_CHECKING:
    from consumers.engine.partition import PartitionState
    from consumers.record import Record

Ordering = Literal["key", "partition", "none"]

#: Lane id for records that are ordered by partition (no key, or ``partition`` mode).
PARTITION_LANE: Hashable = ("__partition__",)


class LaneQueue:
    """A lane's FIFO: the head record in a slot, a deque only behind it.

    Most lanes of a key-ordered workload hold one record (a key's next record arrives after the
    previous one ran). A deque costs ~620 bytes even when empty, so with many distinct keys in
    the buffer (1M keys: ~60,000 lanes at once) the deques alone were ~40 MB; a slot is 8 bytes.
    The subset of ``deque``'s API the engine uses; ``head is None`` means empty.
    """

    __slots__ = ("head", "rest")

    def __init__(self) -> None:
        self.head: Record | None = None
        self.rest: deque[Record] | None = None

    def append(self, rec: Record) -> None:
        if self.head is None:
            self.head = rec
        elif self.rest is None:
            self.rest = deque((rec,))
        else:
            self.rest.append(rec)

    def popleft(self) -> Record:
        rec = self.head
        if rec is None:
            raise IndexError("pop from an empty lane")
        rest = self.rest
        self.head = rest.popleft() if rest else None
        return rec

    def appendleft(self, rec: Record) -> None:
        if self.head is not None:
            if self.rest is None:
                self.rest = deque()
            self.rest.appendleft(self.head)
        self.head = rec

    def extendleft(self, recs: Iterable[Record]) -> None:
        for rec in recs:
            self.appendleft(rec)

    def __len__(self) -> int:
        if self.head is None:
            return 0
        return 1 + len(self.rest) if self.rest else 1

    def __bool__(self) -> bool:
        return self.head is not None


class Lane:
    """A FIFO of records waiting to run; ``ordered`` lanes run one record at a time."""

    __slots__ = ("busy", "lane_id", "ordered", "part", "queue", "ready")

    def __init__(self, lane_id: Hashable, part: PartitionState, ordered: bool) -> None:
        self.lane_id = lane_id
        self.part = part
        self.ordered = ordered
        self.queue = LaneQueue()
        #: A record of this lane is running (ordered lanes only).
        self.busy = False
        #: The lane sits in the workload's ready queue.
        self.ready = False


def lane_router(ordering: Ordering, virtual_partitions: int) -> Callable[[bytes | None], Hashable]:
    """Return the function mapping a record key to its lane id within a partition."""
    if ordering in ("partition", "none"):
        return lambda key: PARTITION_LANE
    if virtual_partitions > 0:
        n = virtual_partitions
        digest = xxhash.xxh3_64_intdigest

        def by_hash(key: bytes | None) -> Hashable:
            return PARTITION_LANE if key is None else digest(key) % n

        return by_hash
    return lambda key: PARTITION_LANE if key is None else key
