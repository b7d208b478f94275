"""Partition liveness: the source thread's watch over partitions that have records behind them
and deliver nothing.

A partition the engine did not pause, whose client position sits below its log end, must
deliver. When its position has not moved for ``after`` seconds the watch asks the source to
recover it (resume it at the client and seek to its position), counts it and logs it; it asks
again every ``after`` seconds while the stall lasts. How long the partition has gone without
progress is kept apart from the recoveries, so a partition that no recovery helps reports a
growing stall (the workload's pinned check turns red on it).

The watch is fed by the source thread only (it owns the client's positions and pause state);
the loop thread reads :meth:`stalled_for` for reports, a plain dict read. :class:`QuietPolls`
keeps the client's own evidence of idleness, and decides how an idle client is polled.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from consumers.backends.base import ConsumerLike, MessageLike, PartitionKey
from consumers.clock import Clock, RealClock
from consumers.errors import BrokerError

if TYPE_CHECKING:
    from consumers.engine.partition import PartitionState

log = logging.getLogger("lanehouse.source")

#: Seconds without progress before a partition with records behind it is recovered.
DEFAULT_STALL_AFTER = 30.0
#: Empty polls for this long make a client idle: it is then polled for one record at a time.
IDLE_AFTER_SECONDS = 0.25
#: An idle client's poll: it returns with the first record, else after this long (the loop's
#: commands wait as long: how late an idle workload may commit or stop).
IDLE_POLL_SECONDS = 0.5


class ClientPauses:
    """What the source thread told its client to pause. librdkafka keeps a partition's paused
    flag across a revoke (or a loss) and the next assignment of the same partition, while the
    engine's state for the new assignment starts unpaused: the client must resume what it is
    assigned, once the assignment is applied: after the poll whose callback assigned it. With
    the resume inside the callback, before librdkafka applied the assignment, 2 of 6 runs of the
    suite's topic-recreated fault fetched the deleted topic under partitions the engine had
    paused (librdkafka crashes on Tansu's answer); after the poll, 0 of 8."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.paused: set[PartitionKey] = set()
        self._assigned: list[PartitionKey] = []

    def assigned(self, keys: list[PartitionKey]) -> None:
        """In the assignment callback: resume ``keys`` after this poll."""
        self._assigned.extend(keys)

    def after_poll(self, consumer: ConsumerLike, assigned: Container[PartitionKey]) -> bool:
        """Resume what was just assigned; True while some assigned partition stays paused at
        the client (that poll proved nothing about idleness)."""
        if self._assigned:
            keys = [key for key in self._assigned if key in assigned]
            self._assigned.clear()
            if keys:
                self.apply(consumer, "resume", keys)
        return any(key in assigned for key in self.paused)

    def apply(self, consumer: ConsumerLike, verb: str, keys: list[PartitionKey]) -> None:
        """Pause or resume ``keys`` at the client, and remember it."""
        try:
            getattr(consumer, verb)(keys)
        except BrokerError as exc:
            log.warning("workload %s: %s failed: %s", self._name, verb, exc)
            return
        if verb == "pause":
            self.paused.update(keys)
        else:
            self.paused.difference_update(keys)


class QuietPolls:
    """How long the client has had nothing to deliver, by its own polls: the evidence
    ``--until-idle`` stops on. Time alone is not evidence: a process starved of CPU, or a
    source thread that has not yet polled since the engine resumed a partition, sees no record
    for a while with records waiting (under the full suite's load a Pulsar run stopped so with
    4,752 records unread, uncommitted for the next run). So only a span of consecutive empty
    polls counts, and none while an assigned partition is paused at the client.

    Written by the source thread (one tuple, replaced whole), read by the loop and by the
    source thread itself, which polls an idle client differently."""

    def __init__(self) -> None:
        self._span: tuple[float, float] | None = None

    def polled(self, started: float, ended: float, empty: bool) -> None:
        """One poll from ``started`` to ``ended``; ``empty``: it delivered nothing and nothing
        assigned was paused at the client."""
        span = self._span
        self._span = None if not empty else (span[0] if span else started, ended)

    def poll(
        self,
        consumer: ConsumerLike,
        batch: int,
        timeout: float,
        assigned: Mapping[PartitionKey, Any],
    ) -> Sequence[MessageLike]:
        """The source's poll: a batch of up to ``batch`` records in ``timeout``; once the polls
        have been empty for :data:`IDLE_AFTER_SECONDS`, first one record in
        :data:`IDLE_POLL_SECONDS`. librdkafka's batch poll waits out its timeout unless the
        batch fills, so 50 ms batch polls woke an idle workload 20 times a second.

        A record that wakes it is followed by a batch poll and posted with it: a first batch
        holds what arrives with it, as before (a lone first record had ended a crash's suspect
        window early, before windows waited for all of their records). If that poll ended the
        record's assignment (``assigned``: the source's partitions by key), the record is
        dropped: its revoke is already posted, and whoever is assigned it next reads from the
        committed position, which only a holder that handled the record can have moved past
        it."""
        span = self._span
        if span is None or span[1] - span[0] < IDLE_AFTER_SECONDS:
            return consumer.consume(batch, timeout)
        woken = list(consumer.consume(1, IDLE_POLL_SECONDS))
        if not woken:
            return woken
        key = cast(PartitionKey, (woken[0].topic(), woken[0].partition()))
        held = assigned.get(key)
        rest = consumer.consume(batch - 1, timeout)
        if assigned.get(key) is not held:
            return rest
        woken.extend(rest)
        return woken

    def quiet_for(self, since: float) -> float:
        """Seconds of empty polls after ``since`` (a time on the source's clock)."""
        span = self._span
        return 0.0 if span is None else max(0.0, span[1] - max(span[0], since))


@dataclass
class _Seen:
    position: int
    #: When the position last moved (or the partition stopped being held, or was assigned).
    since: float
    #: When it was last recovered (or ``since``): recoveries repeat every ``after`` seconds.
    nudged: float


class StallWatch:
    """Per assigned partition: its last position and since when it has not moved."""

    def __init__(self, after: float = DEFAULT_STALL_AFTER, clock: Clock | None = None) -> None:
        self.after = after
        self._clock = clock or RealClock()
        self._seen: dict[PartitionKey, _Seen] = {}
        #: Partitions whose end the client does not know, since when (see :meth:`check`).
        self._unknown: dict[PartitionKey, float] = {}
        #: Recoveries asked for since the source started.
        self.recoveries = 0

    def check(
        self,
        consumer: ConsumerLike,
        name: str,
        assigned: Mapping[PartitionKey, PartitionState],
        positions: Mapping[PartitionKey, int],
        ends: Mapping[PartitionKey, int],
        paused: set[PartitionKey],
        held: bool,
    ) -> None:
        """Observe every assigned partition (``positions``: the client's, else the committed
        one; ``ends``: the partitions' ends the client knows; ``paused``: what the client was
        told to pause, updated here) and recover those due."""
        now = self._clock.now()
        for key, part in list(assigned.items()):
            position = positions.get(key, part.committed)
            end = ends.get(key)
            if end is None and not (held or key in paused):
                self._nudge_unknown(consumer, key, paused, now)
                continue
            self._unknown.pop(key, None)
            due = self.observe(key, position, end, held or key in paused, now)
            if due and self.recover(consumer, name, key, position, end):
                paused.discard(key)

    def _nudge_unknown(
        self, consumer: ConsumerLike, key: PartitionKey, paused: set[PartitionKey], now: float
    ) -> None:
        """A client that never fetched a partition does not know its end (a paused one never
        fetches), so no stall can be told: resume it quietly every ``after`` seconds. Harmless
        when it is not paused; no recovery counted, since Pulsar's ends are often unknown."""
        since = self._unknown.setdefault(key, now)
        if now - since < self.after:
            return
        self._unknown[key] = now
        try:
            consumer.resume([key])
        except BrokerError as exc:
            log.debug("resuming %s[%d] failed: %s", key[0], key[1], exc)
            return
        paused.discard(key)

    def observe(
        self, key: PartitionKey, position: int | None, end: int | None, held: bool, now: float
    ) -> bool:
        """One reading of ``key``; True when the source should recover it now.

        ``held``: the engine paused it (backpressure, a drain) or cannot take a batch: not a
        stall. A partition with no known position or end, or none behind its position, is not
        one either."""
        if held or position is None or end is None or end <= position:
            self._seen.pop(key, None)
            return False
        seen = self._seen.get(key)
        if seen is None or seen.position != position:
            self._seen[key] = _Seen(position, now, now)
            return False
        if now - seen.nudged < self.after:
            return False
        seen.nudged = now
        self.recoveries += 1
        return True

    def recover(
        self,
        consumer: ConsumerLike,
        name: str,
        key: PartitionKey,
        position: int | None,
        end: int | None,
    ) -> bool:
        """Resume ``key`` at the client and read it again from ``position``, saying why; True
        once the client took both."""
        log.warning(
            "workload %s: %s[%d] delivered nothing for %gs with records behind position %s "
            "(end %s) and not paused by the engine; resuming it and seeking to %s (recovery %d)",
            name,
            key[0],
            key[1],
            self.after,
            position,
            end,
            position,
            self.recoveries,
        )
        try:
            consumer.resume([key])
            if position is not None:
                consumer.seek(key, position)
        except BrokerError as exc:
            log.warning("workload %s: recovering %s[%d] failed: %s", name, *key, exc)
            return False
        return True

    def stalled_for(self, key: PartitionKey, now: float) -> float | None:
        """Seconds ``key`` has had records behind it and not moved; None if it is moving."""
        seen = self._seen.get(key)
        if seen is None:
            return None
        return max(now - seen.since, 0.0)

    @property
    def behind(self) -> bool:
        """Some partition not held by the engine has records behind its position: whatever
        else it looks like, the workload is not idle."""
        return bool(self._seen)

    def forget(self, key: PartitionKey) -> None:
        self._seen.pop(key, None)
        self._unknown.pop(key, None)
