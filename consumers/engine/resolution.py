"""What happens after a handler call: retries that keep order, dead letters, ordered outputs.

    resolve(record, outcome, error)
      done               → done(record, [])       (lands the record, with landing)
      Land(value)        → done(record, [])       lands ``value`` instead
      Drop               → done(record, [])       never lands
      Forward(records)   → done(record, outputs)          (needs an output topic)
      raised / timed out / Retry
          attempts left  → retry after backoff; the record's lane stays held, so later records
                           of its key wait behind it while every other key keeps flowing
          no attempts    → dead letter, or *parked* when there is no dead-letter topic
      DeadLetter         → dead letter now

    done(record, outputs): with landing, the record (or the value a ``Land`` outcome gave)
    is buffered for a landed file and completes once that file is renamed into place; with an
    output topic, records of a partition leave in source order (a sequencer holds later records
    until earlier ones are resolved); a record completes (may be committed) only when every
    output and its dead letter, if any, are acknowledged.

A dead-letter write that fails is sent again while that can help, for up to ``write_timeout``
(:mod:`consumers.engine.dead_letter`), else the workload stops: the record never completes
without it. An output write that fails stops the workload: retrying it would break the output
order; so does a landed file the writer refuses (the sink itself retries I/O errors).
The safety valve (:class:`~consumers.engine.valve.ValveWindow`) stops the workload before
the dead-letter ratio over the last ``window`` resolved records exceeds ``max_ratio``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from consumers.backends.base import Position
from consumers.clock import Clock
from consumers.engine.counters import WorkloadCounters
from consumers.engine.dead_letter import DeadLetterWriter
from consumers.engine.dead_letter_headers import encode_dead_letter_headers
from consumers.engine.producer import AckedProducer
from consumers.engine.settlement import Settlement
from consumers.engine.tracked import TrackedRecord
from consumers.engine.valve import ValveWindow
from consumers.errors import (
    DeadLetterRatioExceeded,
    DeliveryError,
    HandlerError,
    LandingError,
    SinkWriteError,
    at,
)
from consumers.landing.files import LandedRow
from consumers.landing.sink import LandingSink
from consumers.outcomes import DeadLetter, Drop, Forward, Land, Outcome, OutputRecord, Retry
from consumers.record import SourceIdentity

if TYPE_CHECKING:
    from consumers.engine.partition import Lane, PartitionState

log = logging.getLogger("lanehouse.outcomes")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 60.0
    jitter: bool = True

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Exponential backoff after ``attempt`` failed attempts; jitter keeps half of it fixed
        and randomizes the other half, so retries of many keys do not arrive in lockstep."""
        base: float = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        return base / 2 + rng.random() * base / 2 if self.jitter else base


@dataclass(frozen=True)
class DeadLetterPolicy:
    topic: str
    max_ratio: float = 0.2
    window: int = 1000
    #: Seconds a dead letter failing with transient errors is sent again before the workload stops.
    write_timeout: float = 300.0


@dataclass
class _Failure:
    first_ms: int
    last_ms: int
    error: HandlerError | None


class Resolver:
    """Turns outcomes into completions for one workload; see the module docstring."""

    def __init__(
        self,
        name: str,
        retry: RetryPolicy,
        dead_letter: DeadLetterPolicy | None,
        output_topic: str | None,
        producer: AckedProducer | None,
        clock: Clock,
        counters: WorkloadCounters,
        settlement: Settlement,
        requeue: Callable[[Lane, TrackedRecord], None],
        fail: Callable[[BaseException], None],
        landing: LandingSink | None = None,
        identity: Callable[[str], SourceIdentity] | None = None,
        position: Position | None = None,
    ) -> None:
        if (dead_letter or output_topic) and producer is None:
            raise ValueError(f"workload {name!r}: outputs and dead letters need a producer")
        if landing is not None and (identity is None or output_topic is not None):
            raise ValueError(f"workload {name!r}: landing needs source identities, no outputs")
        self.name = name
        self.retry = retry
        self.dead_letter = dead_letter
        self.output_topic = output_topic
        self.sequenced = output_topic is not None
        #: A plain success completes at once: no outputs to order, no dead-letter window.
        self.immediate = not self.sequenced and dead_letter is None and landing is None
        self._landing = landing
        self._identity = identity
        self._position = position
        self._producer = producer
        self._clock = clock
        self._counters = counters
        #: The one way a record completes (:mod:`consumers.engine.settlement`).
        self._complete = settlement.settle
        #: A retry is due: the record runs next in its lane.
        self._requeue = requeue
        #: The workload must stop (safety valve, an output that cannot be written).
        self._fail = fail
        self._rng = random.Random()
        self._failures: dict[TrackedRecord, _Failure] = {}
        self._valve = (
            ValveWindow(dead_letter.window, dead_letter.max_ratio) if dead_letter else None
        )
        self._timers: set[asyncio.Task[None]] = set()
        self._letters = (
            DeadLetterWriter(
                name,
                dead_letter.topic,
                dead_letter.write_timeout,
                producer,
                clock,
                counters,
                backoff=lambda: self.retry.delay(2, self._rng),
                later=self._later,
                written=self._acked,
                fail=self._fail,
                owns=settlement.owns,
            )
            if dead_letter is not None and producer is not None
            else None
        )

    # ------------------------------------------------------------------ outcomes

    def resolve(
        self, lane: Lane, rec: TrackedRecord, outcome: Outcome, error: HandlerError | None
    ) -> bool:
        """Act on one handler result; True when the record's lane must stay held."""
        retry_after: float | None = None
        if error is None:
            if outcome is None:
                self.done(rec, ())
                return False
            kind = type(outcome)
            if kind is Forward:
                if self.sequenced:
                    self.done(rec, outcome.records)  # type: ignore[union-attr]
                    return False
                error = self._misuse(rec, "returned Forward but the workload has no output topic")
            elif kind is Drop:
                self._counters.dropped_by_handler += 1
                self.done(rec, (), land=False)
                return False
            elif kind is DeadLetter:
                return self._to_dead_letter(rec, "DeadLetter", outcome.reason)  # type: ignore[union-attr]
            elif kind is Land:
                if self._landing is not None:
                    self.done(rec, (), landed_value=outcome.value)  # type: ignore[union-attr]
                    return False
                error = self._misuse(rec, "returned Land but the workload has no landing")
            elif kind is Retry:
                retry_after = outcome.after  # type: ignore[union-attr]
            else:
                error = self._misuse(rec, f"returned {kind.__name__}, which is not an outcome")
        attempts = rec.failed_attempt()
        if self.dead_letter is not None:  # only a dead letter's headers read the history
            now_ms = int(time.time() * 1000)
            failure = self._failures.get(rec)
            if failure is None:
                self._failures[rec] = _Failure(now_ms, now_ms, error)
            else:
                failure.last_ms, failure.error = now_ms, error
        if attempts < self.retry.max_attempts:
            self._counters.retries += 1
            delay = (
                retry_after if retry_after is not None else self.retry.delay(attempts, self._rng)
            )
            self._later(delay, self._requeue, lane, rec)
            return True
        if self.dead_letter is not None:
            reason = str(error.reason) if error else "retry requested after the last attempt"
            kind_name = type(error.__cause__ or error).__name__ if error else "Retry"
            return self._to_dead_letter(rec, kind_name, reason)
        self._counters.parked += 1
        log.error(
            "workload %s: %s[%d]@%d key=%r failed %d attempts and there is no dead-letter topic: "
            "it stays uncommitted and its key is held until a restart",
            self.name,
            rec.topic,
            rec.partition,
            rec.offset,
            rec.key,
            attempts,
        )
        return True

    def done(
        self,
        rec: TrackedRecord,
        outputs: Iterable[OutputRecord],
        *,
        land: bool = True,
        landed_value: bytes | None = None,
    ) -> None:
        """The record's handling is over; complete it once its outputs are acknowledged or
        its landed file is durable. ``land=False``: nothing to land (dropped, superseded, or
        completed by a previous owner)."""
        if rec.attempts:
            self._failures.pop(rec, None)
        if self._valve is not None:
            self._valve.count(False)
        if self._landing is not None and land:
            self._land(rec, rec.value if landed_value is None else landed_value)
            return
        if not self.sequenced:
            self._complete(rec)
            return
        rec.resolved(list(outputs))
        self._emit(rec.part)

    # ------------------------------------------------------------------ landing

    def _land(self, rec: TrackedRecord, value: bytes | None) -> None:
        assert self._landing is not None and self._identity is not None
        timestamp = rec.timestamp if rec.timestamp >= 0 else int(time.time() * 1000)
        offset = rec.offset
        if self._position is not None:
            try:
                offset = self._position(rec.topic, rec.partition, rec.offset)
            except (ValueError, KeyError) as exc:
                self._fail(
                    LandingError(
                        f"workload {self.name}: no lake position: {exc}", **at(self.name, rec)
                    )
                )
                return
        row = LandedRow(rec.partition, offset, rec.key, value, timestamp)
        rec.awaiting()

        def on_landed(error: str | None) -> None:
            if error is None:
                self._acked(rec)
            else:
                self._fail(
                    LandingError(
                        f"workload {self.name}: {error}; stopping (the record "
                        f"{rec.topic}[{rec.partition}]@{rec.offset} is not committed)",
                        **at(self.name, rec),
                    )
                )

        self._landing.add(self._identity(rec.topic), row, on_landed)

    # ------------------------------------------------------------------ dead letters

    @property
    def valve_used(self) -> float | None:
        """The share of the safety valve used (:class:`ValveWindow`); None without dead letters."""
        return self._valve.used if self._valve is not None else None

    def _to_dead_letter(self, rec: TrackedRecord, error_type: str, message: str) -> bool:
        policy, valve, letters = self.dead_letter, self._valve, self._letters
        if policy is None or valve is None or letters is None:
            self._fail(
                self._misuse(rec, "returned DeadLetter but the workload has no dead-letter topic")
            )
            return True
        if valve.would_trip():
            self._fail(
                DeadLetterRatioExceeded(
                    f"workload {self.name}: more than {policy.max_ratio:.0%} of the last "
                    f"{policy.window} records would go to {policy.topic}; stopping instead of "
                    f"dead-lettering everything (last: {rec.topic}[{rec.partition}]@{rec.offset}: "
                    f"{error_type}: {message})",
                    **at(self.name, rec),
                )
            )
            return True
        valve.count(True)
        now_ms = int(time.time() * 1000)
        failure = self._failures.pop(rec, None) or _Failure(now_ms, now_ms, None)
        headers = encode_dead_letter_headers(
            rec.headers,
            workload=self.name,
            source_topic=rec.topic,
            source_partition=rec.partition,
            source_offset=rec.offset,
            attempts=max(rec.attempts, 1),
            error_type=error_type,
            error_message=message,
            first_failure_ms=failure.first_ms,
            last_failure_ms=failure.last_ms,
        )
        rec.awaiting()
        self._counters.dead_lettered += 1
        if self.sequenced:
            rec.resolved([])  # no outputs: its place in the partition's order is kept
        letters.write(rec, headers)
        if self.sequenced:
            self._emit(rec.part)
        return False

    # ------------------------------------------------------------------ ordered outputs

    def _emit(self, part: PartitionState) -> None:
        """Produce outputs of resolved records at the head of the partition, in order."""
        emit = part.awaiting_outputs
        producer = self._producer
        topic = self.output_topic
        assert producer is not None and topic is not None
        while emit and emit[0].emittable:
            rec = emit.popleft()
            for out in rec.emitting():
                key = rec.key if out.key is None else out.key
                producer.send(topic, key, out.value, out.headers, self._output_ack(rec))
                self._counters.forwarded += 1
            if not rec.unacknowledged:
                self._complete(rec)

    def _output_ack(self, rec: TrackedRecord) -> Callable[[DeliveryError | None], None]:
        def on_done(error: DeliveryError | None) -> None:
            if error is None:
                self._acked(rec)
            else:
                self._fail(
                    SinkWriteError(
                        self.name,
                        "output",
                        str(self.output_topic),
                        (rec.topic, rec.partition, rec.offset),
                        error.reason,
                    )
                )

        return on_done

    def _acked(self, rec: TrackedRecord) -> None:
        if rec.acked():
            self._complete(rec)

    # ------------------------------------------------------------------ helpers

    def _misuse(self, rec: TrackedRecord, reason: str) -> HandlerError:
        """A handler result the engine cannot act on: a failed attempt, counted and logged."""
        error = HandlerError(self.name, rec.topic, rec.partition, rec.offset, rec.key, reason)
        self._counters.failed += 1
        log.warning("%s (attempt %d)", error, rec.attempts + 1)
        return error

    def _later(self, delay: float, callback: Callable[..., None], *args: object) -> None:
        async def fire() -> None:
            await self._clock.sleep(delay)
            callback(*args)

        task = asyncio.ensure_future(fire())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    @property
    def waiting(self) -> bool:
        """A retry or a dead-letter rewrite is scheduled."""
        return bool(self._timers)

    def forget(self, recs: Iterable[TrackedRecord]) -> None:
        """Drop failure bookkeeping for records of a revoked partition."""
        for rec in recs:
            self._failures.pop(rec, None)

    def close(self) -> None:
        for task in list(self._timers):
            task.cancel()
