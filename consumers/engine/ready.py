"""The ready queue: a workload's lanes with work, in the order workers take them.

The one place a lane changes state. A lane is *ready* while it sits in the queue and *busy*
while one of its records runs (ordered lanes only), so a key never runs twice at once::

    join(rec) ──► lane ───────► ready ──take()──► busy ──release()──► ready again, or freed
                                   ▲                  └──(retry held)── requeue() at the front

An empty lane leaves its partition's lane table (memory follows the records in flight, not the
key count); a lane whose partition is closing (revoke) is dropped instead of run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable

from consumers.engine.partition import Lane, PartitionState
from consumers.engine.tracked import TrackedRecord


class ReadyLanes:
    """Lanes with records to run, oldest first; a retry's lane goes to the front."""

    __slots__ = ("_lanes",)

    def __init__(self) -> None:
        self._lanes: deque[Lane] = deque()

    def __len__(self) -> int:
        return len(self._lanes)

    def __bool__(self) -> bool:
        return bool(self._lanes)

    def join(
        self, part: PartitionState, lane_id: Hashable, ordered: bool, rec: TrackedRecord
    ) -> None:
        """A new record joins its lane (made on demand); the lane queues if it was idle."""
        lane = part.lanes.get(lane_id)
        if lane is None:
            lane = part.lanes[lane_id] = Lane(lane_id, part, ordered)
        lane.append(rec)
        if not lane.ready and not lane.busy:
            lane.ready = True
            self._lanes.append(lane)

    def join_run(
        self,
        part: PartitionState,
        run: list[TrackedRecord],
        route: Callable[[bytes | None], Hashable],
        ordered: bool,
    ) -> None:
        """:meth:`join` for a run of one partition's records, in one loop (the hot path)."""
        lanes, ready = part.lanes, self._lanes
        for rec in run:
            lane_id = route(rec.key)
            lane = lanes.get(lane_id)
            if lane is None:
                lane = lanes[lane_id] = Lane(lane_id, part, ordered)
            if lane.head is None:
                lane.head = rec
            else:
                lane.append(rec)
            if not lane.ready and not lane.busy:
                lane.ready = True
                ready.append(lane)

    def take(self) -> tuple[Lane, TrackedRecord] | None:
        """The next lane's head record, its lane marked busy (ordered) or left ready with the
        rest (unordered); None once no lane is ready."""
        lanes = self._lanes
        while lanes:
            lane = lanes.popleft()
            part = lane.part
            if part.closing:
                lane.ready = False
                continue
            rec = lane.popleft()
            if lane.ordered:
                lane.busy = True
                lane.ready = False
            elif lane.head is not None:
                lanes.appendleft(lane)
            else:
                lane.ready = False
                if part.lanes.get(lane.lane_id) is lane:  # a retry may have left it
                    del part.lanes[lane.lane_id]
            return lane, rec
        return None

    def take_batch(self, size: int) -> list[tuple[Lane, list[TrackedRecord]]]:
        """Up to ``size`` records from the ready lanes, whole lanes first, in lane order; the
        ordered lanes taken from stay busy until :meth:`release`."""
        taken: list[tuple[Lane, list[TrackedRecord]]] = []
        lanes = self._lanes
        room = size
        while lanes and room > 0:
            lane = lanes.popleft()
            lane.ready = False
            if lane.part.closing:
                continue
            records = [lane.popleft() for _ in range(min(room, len(lane)))]
            room -= len(records)
            if lane.ordered:
                lane.busy = True
            elif lane.head is not None:  # an unordered lane with records left stays at the front
                lane.ready = True
                lanes.appendleft(lane)
            taken.append((lane, records))
        return taken

    def release(self, lane: Lane) -> None:
        """A lane's running record (or batch) is resolved: its next record may run."""
        if not lane.ordered:
            return
        lane.busy = False
        part = lane.part
        if lane.head is not None and not part.closing:
            lane.ready = True
            self._lanes.append(lane)
        elif lane.head is None and part.lanes.get(lane.lane_id) is lane:
            del part.lanes[lane.lane_id]

    def put_back(self, lane: Lane, records: list[TrackedRecord]) -> None:
        """Records taken in a batch that did not run, because an earlier one of their lane was
        held (a retry): they go back to the front of the lane, in order, behind the held one."""
        lane.extendleft(reversed(records))

    def close(self, part: PartitionState) -> None:
        """``part`` is being revoked: its queued records are dropped (the next owner reads
        them again); lanes still in the queue are skipped when taken (``part.closing``)."""
        part.closing = True
        part.lanes.clear()

    def requeue(self, lane: Lane, rec: TrackedRecord) -> None:
        """A retry is due: the record goes back to the front of its lane, the lane to the front
        of the queue (its key has waited long enough)."""
        part = lane.part
        if part.closing:
            return
        current = part.lanes.setdefault(lane.lane_id, lane)
        if current is not lane:
            # Unordered: the lane emptied and went while the record waited, and records that
            # arrived since got a new one; the retry joins it (no order to keep).
            lane = current
        lane.appendleft(rec)
        lane.busy = False
        if not lane.ready:
            lane.ready = True
            self._lanes.appendleft(lane)

    def queued_records(self) -> int:
        """Records waiting in ready lanes (what a batch could take now)."""
        return sum(len(lane) for lane in self._lanes)
