"""When a plain ``def`` handler runs inline on the event loop instead of on a thread.

A thread hop costs a record more than a fast handler does (a queue hand-off, a thread wake-up,
a loop wake-up: about 20 µs against a no-op's 2 µs). And a handler that holds the GIL while it
runs (pure-Python work) blocks the loop just as much on a thread as inline. So a workload's sync
handler runs inline once it has *proven fast*, and goes back to threads as soon as it stops being
fast, because a call that waits (I/O, ``time.sleep``, a lock) would stall every workload of the
process while it runs on the loop.

- Proof: :data:`PROVE_CALLS` consecutive calls on threads, each under :data:`FAST` of wall time
  (measured in the thread around the call alone, so queueing is not counted; a handler that
  waits on I/O never passes).
- Demotion: one inline call over :data:`LIMIT`, or the moving average of inline calls over
  :data:`FAST`. The handler then runs on threads for a probation that doubles from
  :data:`PROBATION` at each demotion (up to :data:`MAX_PROBATION`) before it can prove itself
  again, so a handler that is only sometimes slow does not flap.

Durations are measured with ``time.perf_counter`` (what the call really took); the probation is
a timer and reads the workload's clock.
"""

from __future__ import annotations

from consumers.clock import Clock

#: A call this short costs the loop less than the thread hop that would avoid it.
FAST = 0.001
#: One inline call this long moves the handler back to threads at once. Not less: an inline
#: call can lose the GIL to a handler thread for a switch interval (5 ms) and look that slow.
LIMIT = 0.020
#: Consecutive fast calls on threads before the handler may run inline.
PROVE_CALLS = 100
#: The first probation after a demotion, and the longest.
PROBATION, MAX_PROBATION = 1.0, 300.0
#: Weight of the newest call in the moving average of inline calls.
_ALPHA = 0.05


class InlineGate:
    """One workload's decision: ``inline`` says where its next sync call runs."""

    __slots__ = ("_average", "_clock", "_probation", "_streak", "_until", "demotions", "inline")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.inline = False
        self._streak = 0
        self._average = 0.0
        self._until = 0.0
        self._probation = PROBATION
        #: How often the handler was moved back to threads.
        self.demotions = 0

    def threaded(self, wall: float) -> None:
        """A call on a thread took ``wall`` seconds (in the thread, around the handler only)."""
        if wall >= FAST:
            self._streak = 0
            return
        self._streak += 1
        if self._streak >= PROVE_CALLS and self._clock.now() >= self._until:
            self.inline = True
            self._average = wall

    def ran_inline(self, wall: float) -> None:
        """An inline call took ``wall`` seconds: stay inline, or go back to threads."""
        self._average += _ALPHA * (wall - self._average)
        if wall >= LIMIT or self._average >= FAST:
            self.inline = False
            self._streak = 0
            self.demotions += 1
            self._until = self._clock.now() + self._probation
            self._probation = min(self._probation * 2, MAX_PROBATION)
