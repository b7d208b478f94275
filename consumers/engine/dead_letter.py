"""Writing a workload's dead letters, never forever.

    write(rec, headers) ─► producer.send(dead-letter topic, key, value, headers)
        acknowledged                        → written(rec): the record may complete
        failed, permanent                   → fail(SinkWriteError)   too large, not authorized
        failed, transient, within the bound → send again after a backoff
        failed, transient, past the bound   → fail(SinkWriteError)   still failing after
                                                                     ``write_timeout`` seconds

The bound counts from the record's first send (each send is itself bounded by the client's
delivery timeout, so a workload stops at most one delivery timeout past it). A stopped workload
commits nothing at or above the record: the record stays uncommitted and the next run handles
it again. A record whose partition was revoked meanwhile is left to its next owner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumers.clock import Clock
from consumers.engine.counters import WorkloadCounters
from consumers.engine.producer import AckedProducer
from consumers.engine.tracked import TrackedRecord
from consumers.errors import DeliveryError, SinkWriteError

log = logging.getLogger("lanehouse.outcomes")

Headers = list[tuple[str, bytes]]


class DeadLetterWriter:
    """Sends dead letters to ``topic`` and settles each write: ``written(rec)`` once the broker
    acknowledged it, ``fail(error)`` when it cannot be written (see the module docstring)."""

    def __init__(
        self,
        workload: str,
        topic: str,
        write_timeout: float,
        producer: AckedProducer,
        clock: Clock,
        counters: WorkloadCounters,
        *,
        backoff: Callable[[], float],
        later: Callable[..., None],
        written: Callable[[TrackedRecord], None],
        fail: Callable[[BaseException], None],
        owns: Callable[[TrackedRecord], bool],
    ) -> None:
        self.topic = topic
        self.write_timeout = write_timeout
        self._workload = workload
        self._producer = producer
        self._clock = clock
        self._counters = counters
        self._backoff = backoff
        self._later = later
        self._written = written
        self._fail = fail
        self._owns = owns

    def write(self, rec: TrackedRecord, headers: Headers) -> None:
        """Send the dead letter of ``rec``; its outcome arrives through ``written`` or ``fail``."""
        self._send(rec, headers, self._clock.now())

    def _send(self, rec: TrackedRecord, headers: Headers, first: float) -> None:
        def on_done(error: DeliveryError | None) -> None:
            if error is None:
                self._written(rec)
            else:
                self._failed(rec, headers, first, error)

        self._producer.send(self.topic, rec.key, rec.value, headers, on_done)

    def _failed(
        self, rec: TrackedRecord, headers: Headers, first: float, error: DeliveryError
    ) -> None:
        self._counters.dead_letter_write_failures += 1
        if not self._owns(rec):
            return  # no longer ours: the partition's next owner handles the record again
        waited = self._clock.now() - first
        if error.permanent or waited >= self.write_timeout:
            reason = (
                f"{error.reason}; refused for good"
                if error.permanent
                else f"{error.reason}; still failing {waited:.0f}s after the first send, "
                f"past dead_letter.write_timeout ({self.write_timeout:g}s)"
            )
            coordinates = (rec.topic, rec.partition, rec.offset)
            self._fail(
                SinkWriteError(self._workload, "dead letter", self.topic, coordinates, reason)
            )
            return
        delay = self._backoff()
        log.warning(
            "workload %s: dead-letter write of %s[%d]@%d to %s failed (%s); retrying in %.1fs "
            "(for up to %gs after the first send)",
            self._workload,
            rec.topic,
            rec.partition,
            rec.offset,
            self.topic,
            error.reason,
            delay,
            self.write_timeout,
        )
        self._later(delay, self._send, rec, headers, first)
