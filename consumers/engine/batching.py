"""Batch and unique modes: forming a batch from the ready lanes, and latest-per-key.

A batch takes whole runs of records from ready lanes, in lane order, up to ``size`` records.
Ordered lanes it takes from become busy until the batch is resolved, so no other call can run a
later record of the same key (or virtual partition, or partition) meanwhile.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from consumers.engine.lanes import Lane
from consumers.record import Record

Batch = list[tuple[Lane, list[Record]]]


def take_batch(ready: deque[Lane], size: int) -> Batch:
    """Pop up to ``size`` records from the ready lanes, whole lanes first, in lane order."""
    taken: Batch = []
    room = size
    while ready and room > 0:
        lane = ready.popleft()
        lane.ready = False
        if lane.part.closing:
            continue
        queue = lane.queue
        records = [queue.popleft() for _ in range(min(room, len(queue)))]
        room -= len(records)
        if lane.ordered:
            lane.busy = True
        elif queue:  # an unordered lane with records left stays at the front
            lane.ready = True
            ready.appendleft(lane)
        taken.append((lane, records))
    return taken


def latest_per_key(batch: Batch) -> tuple[list[Record], set[Record]]:
    """The last record of each key in the batch (to handle) and the superseded ones (to skip).

    Keys are per partition: the same key in two partitions is two keys.
    """
    latest: dict[tuple[int, str, Hashable], Record] = {}
    for _, records in batch:
        for rec in records:
            latest[(rec.partition, rec.topic, rec.key)] = rec
    keep = set(latest.values())
    superseded = {rec for _, records in batch for rec in records if rec not in keep}
    handled = [rec for _, records in batch for rec in records if rec in keep]
    return handled, superseded


def queued_records(ready: deque[Lane]) -> int:
    """Records waiting in ready lanes (what a batch could take now)."""
    return sum(len(lane.queue) for lane in ready)
