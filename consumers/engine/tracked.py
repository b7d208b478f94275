"""A record as the engine holds it: the handler's :class:`~consumers.record.Record` plus the
engine's bookkeeping of it, which changes only through the methods here.

    filed ─► run ─► failed_attempt()* ─► resolved(outputs) ─► emitting() ─► acked()* ─► settled
                                     └─► awaiting()  (a landed row, a dead letter) ─► acked()

``part`` is set when the record is built and never changes; ``done`` is the offset tracker's
flag (:class:`~consumers.engine.tracker.OffsetTracker` alone writes it, and
``tests/unit/test_tracked.py`` checks that no other module does). A handler receives the record
as a ``Record`` and sees only its public fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from consumers.record import Record

if TYPE_CHECKING:
    from consumers.outcomes import OutputRecord


class TrackedRecord(Record):
    """One consumed record and where the engine is with it; see the module docstring."""

    __slots__ = ("_acks", "_emitted", "_outputs", "done", "part")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        timestamp: int,
        part: Any,
    ) -> None:
        # Record's fields set here rather than through Record.__init__: 275 against 370 ns a
        # record (timeit), on the hot path; test_tracked.py checks the two lists stay the same.
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self.attempts = 0
        #: The ``PartitionState`` of the assignment it was read in (a revoked one settles
        #: nothing). ``Any``: partition state holds records, so typing it here would make the
        #: two modules import each other; readers annotate it where they use it.
        self.part = part
        #: Settled: the watermark may pass it (the offset tracker's flag).
        self.done = False
        #: Its outputs once resolved (None until then); only with an output topic.
        self._outputs: list[OutputRecord] | None = None
        #: Acknowledgements still awaited: outputs, a dead letter, a landed row.
        self._acks = 0
        #: Its outputs were handed to the producer, in source order.
        self._emitted = False

    def failed_attempt(self) -> int:
        """A call failed (raised, timed out, or asked for a retry); returns the attempts so far."""
        self.attempts += 1
        return self.attempts

    def awaiting(self) -> None:
        """One more acknowledgement to wait for before the record may settle."""
        self._acks += 1

    def acked(self) -> bool:
        """An awaited acknowledgement came; True once none is left (and its outputs, if it
        has any to forward, were all sent)."""
        self._acks -= 1
        return self._acks == 0 and (self._emitted or self._outputs is None)

    def resolved(self, outputs: list[OutputRecord]) -> None:
        """Its handling is over: these outputs (maybe none) leave once it is the partition's
        oldest unresolved record."""
        self._outputs = outputs

    @property
    def emittable(self) -> bool:
        """Resolved, so its outputs may go once every earlier record's did."""
        return self._outputs is not None

    def emitting(self) -> list[OutputRecord]:
        """Its outputs go to the producer now; each one's acknowledgement is awaited."""
        outputs = self._outputs or []
        self._emitted = True
        self._acks += len(outputs)
        return outputs

    @property
    def unacknowledged(self) -> bool:
        """Acknowledgements are still awaited."""
        return self._acks > 0
