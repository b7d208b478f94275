"""Per-partition state owned by the event loop: commit tracker, lanes and flow counters."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable

from consumers.engine.lanes import Lane
from consumers.engine.tracker import OffsetTracker
from consumers.record import Record

_GENERATIONS = itertools.count()


class PartitionState:
    """Everything the engine knows about one assigned partition."""

    __slots__ = (
        "closing",
        "committed",
        "emit",
        "generation",
        "high_watermark",
        "in_flight",
        "lanes",
        "partition",
        "paused",
        "revoked",
        "skip",
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
        self.emit: deque[Record] = deque()
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

    def __repr__(self) -> str:
        return f"PartitionState({self.topic}[{self.partition}])"
