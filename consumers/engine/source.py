"""The source thread: owns one broker client and is the only thread that ever touches it.

librdkafka runs rebalance and commit callbacks only inside ``consume()``, and a consumer that
stops polling is kicked from its group after ``max.poll.interval.ms``. So one dedicated thread
polls in batches, forever, whatever the handlers are doing; it hands batches to the event loop,
executes the loop's commands (commit, pause, resume) between polls, and runs the revoke protocol:

    on_revoke → loop stops intake of those partitions and drains them (deadline)
              → synchronous commit of their watermark → return to librdkafka

Backpressure never blocks this thread: full partitions are *paused* and it keeps polling (an
idle client one record at a time: :meth:`QuietPolls.poll`). Only the hand-off to the loop
is bounded (a couple of batches), waited on in short slices so commands and callbacks flow.

Topics deleted or recreated under the workload are fenced by an
:class:`~consumers.engine.incarnations.IncarnationWatch`: their positions are never committed
again, and the source fails with :class:`~consumers.errors.TopicReplaced`. Any client that
keeps the broker contract (:mod:`consumers.backends.base`) works: Kafka, Pulsar, in memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Protocol

from consumers.backends.base import (
    NO_OFFSET,
    CommitOffset,
    ConsumerFactory,
    ConsumerLike,
    MessageLike,
    PartitionKey,
)
from consumers.backends.metadata import decode_done
from consumers.clock import Clock, RealClock
from consumers.engine.commands import SourceCommands
from consumers.engine.handoff import chain, set_exception, set_result
from consumers.engine.incarnations import IncarnationWatch
from consumers.engine.liveness import DEFAULT_STALL_AFTER, ClientPauses, QuietPolls, StallWatch
from consumers.engine.partition import PartitionState
from consumers.errors import BrokerError, EngineError

log = logging.getLogger("lanehouse.source")

#: How many consumed batches may wait for the event loop before polling slows down.
MAX_HANDOFF_BATCHES = 2
#: Records ingested per loop callback before timers and handlers get a turn.
INGEST_SLICE = 1000
WATERMARK_REFRESH_SECONDS = 1.0


class Consuming(Protocol):
    """What the source thread hands its runner, on the loop (the runner is built first)."""

    parts: dict[PartitionKey, PartitionState]

    def prepare_assignment(
        self, parts: Sequence[PartitionState], rewind: Callable[[PartitionKey, int], int]
    ) -> None:
        """On the source thread, inside ``on_assign``, before any record is read."""

    def assign(self, parts: Iterable[PartitionState]) -> None: ...
    def ingest(self, messages: list[MessageLike]) -> None: ...
    def client_positions(self, positions: dict[PartitionKey, int]) -> None: ...
    def commit_failed(self) -> None: ...
    async def revoke(self, keys: Sequence[PartitionKey]) -> list[CommitOffset]: ...
    async def drain(self) -> list[CommitOffset]: ...


class SourceThread:
    """Drives one client for one workload runner, applying the runner's requests
    (:class:`~consumers.engine.commands.SourceCommands`) between polls."""

    def __init__(
        self,
        name: str,
        topics: list[str],
        factory: ConsumerFactory,
        loop: asyncio.AbstractEventLoop,
        drain_timeout: float,
        batch_size: int = 5000,
        poll_timeout: float = 0.05,
        clock: Clock | None = None,
        watch: IncarnationWatch | None = None,
        stall_after: float = DEFAULT_STALL_AFTER,
        *,
        runner: Consuming,
        commands: SourceCommands,
    ) -> None:
        self.name = name
        self._watch = watch
        self._topics = topics
        self._factory = factory
        self._loop = loop
        self._drain_timeout = drain_timeout
        self._batch_size = batch_size
        self._poll_timeout = poll_timeout
        self._clock = clock or RealClock()
        self._runner = runner
        self._commands = commands
        self._handed = threading.Event()
        self._posted = 0
        self._ingested = 0
        self._inbox: deque[tuple[str, Any]] = deque()
        self._slice_start = 0
        self._intake_open = True
        self._shutting_down = False
        self._closed = False
        self._consumer: ConsumerLike | None = None
        #: Client positions and partition ends last posted to the runner.
        self._positions: dict[PartitionKey, int] = {}
        self._ends: dict[PartitionKey, int] = {}
        #: What this thread told the client to pause (it alone pauses and resumes).
        self._pauses = ClientPauses(name)
        #: Partitions with records behind them that deliver nothing (read for reports).
        self.stalls = StallWatch(stall_after, self._clock)
        self.quiet = QuietPolls()  # how long the polls delivered nothing: --until-idle
        self._thread = threading.Thread(target=self._run, name=f"lh-source-{name}", daemon=True)
        self.assigned: dict[PartitionKey, PartitionState] = {}
        self.failed: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()
        self.commits = 0
        self.commit_failures = 0
        #: Why the commit of :meth:`stop` failed (the stop is then not clean), else ``None``.
        self.final_commit_failure: str | None = None
        self.rebalances = 0

    def start(self) -> None:
        self._thread.start()

    def paused_at_client(self, key: PartitionKey) -> bool:
        """Whether the client was told to pause ``key`` (read from any thread)."""
        return key in self._pauses.paused

    async def stop(self) -> None:
        """Graceful stop: no more intake, drain the runner, final synchronous commit, close."""
        if self._closed:
            return
        self._intake_open = False
        self._commands.put("pause_all", None)
        offsets = await self._runner.drain()
        self._shutting_down = True
        self._commands.put("close", offsets)
        await asyncio.shield(self.finished)

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        consumer: ConsumerLike | None = None
        try:
            consumer = self._consumer = self._factory(self._on_commit)
            consumer.subscribe(
                self._topics,
                on_assign=self._on_assign,
                on_revoke=partial(self._release, commit=True),
                on_lost=partial(self._release, commit=False),  # gone: nothing to commit
            )
            now = self._clock.now
            next_watermarks = now()
            watch, poll_timeout = self._watch, self._poll_timeout
            if watch is not None:
                watch.start()
            while not self._run_commands(consumer):
                if watch is not None and watch.replaced and self._intake_open:
                    self._intake_open = False  # the runner's stop drains what was taken
                    self._loop.call_soon_threadsafe(set_exception, self.failed, watch.error())
                held = self._posted - self._ingested >= MAX_HANDOFF_BATCHES
                if now() >= next_watermarks:  # held too: ends a report reads must not go stale
                    self._refresh_watermarks(consumer, held)
                    next_watermarks = now() + WATERMARK_REFRESH_SECONDS
                if held:
                    self._handed.wait(self._poll_timeout)
                    self._handed.clear()
                    continue
                started = now()
                messages = self.quiet.poll(consumer, self._batch_size, poll_timeout, self.assigned)
                paused = self._pauses.after_poll(consumer, self.assigned)
                self.quiet.polled(started, now(), not (messages or paused))
                if messages and self._intake_open:
                    self._posted += 1
                    self._post(("batch", messages))
        except BaseException as exc:
            log.exception("workload %s: source thread failed", self.name)
            if self._watch is not None:
                self._watch.close()
            self._loop.call_soon_threadsafe(set_exception, self.failed, exc)
            if consumer is not None:
                with contextlib.suppress(Exception):  # the failure above is what counts
                    consumer.close()
        finally:
            self._loop.call_soon_threadsafe(set_result, self.finished)

    def _post(self, event: tuple[str, Any]) -> None:
        """Queue an event for the loop. Batches, assignments and revokes share one FIFO so the
        loop sees them in the order the client produced them."""
        self._inbox.append(event)
        self._loop.call_soon_threadsafe(self._pump)

    def _pump(self) -> None:
        """Runs on the loop: apply queued events in order, at most ``INGEST_SLICE`` records per
        call, so a large poll never holds up handler timers for long.

        An error here is an engine bug; the workload stops loudly rather than stall."""
        if self.failed.done():
            return
        try:
            self._apply_events()
        except Exception as exc:
            log.exception("workload %s: applying client events failed", self.name)
            self._intake_open = False
            self.failed.set_exception(
                EngineError(f"workload {self.name}: {exc!r}", workload=self.name)
            )

    def _apply_events(self) -> None:
        runner = self._runner
        budget = INGEST_SLICE
        inbox = self._inbox
        while inbox and budget > 0:
            kind, payload = inbox[0]
            if kind == "batch":
                start = self._slice_start
                end = start + budget
                runner.ingest(payload[start:end] if start or end < len(payload) else payload)
                if end < len(payload):
                    self._slice_start = end
                    break
                budget -= len(payload) - start
                self._slice_start = 0
                self._ingested += 1
                self._handed.set()
            elif kind == "assign":
                runner.assign(payload)
            elif kind == "positions":
                runner.client_positions(payload)
            elif kind == "commit_failed":
                runner.commit_failed()
            elif kind == "ends":
                for key, high in payload.items():
                    if (part := runner.parts.get(key)) is not None:
                        part.high_watermark = high
            else:  # revoke
                keys, result = payload
                chain(asyncio.ensure_future(runner.revoke(keys)), result)
            inbox.popleft()
        if inbox:
            self._loop.call_soon(self._pump)

    def _run_commands(self, consumer: ConsumerLike) -> bool:
        """Execute queued commands; True once the client has been closed."""
        while (command := self._commands.next()) is not None:
            verb, arg = command
            if verb == "commit":
                current = [o for o, part in arg if self.assigned.get((o[0], o[1])) is part]
                self._commit(consumer, current, asynchronous=True)
            elif verb in ("pause", "resume"):
                keys = [key for key in arg if key in self.assigned]
                if keys:
                    self._pauses.apply(consumer, verb, keys)
            elif verb == "pause_all":
                if self.assigned:
                    self._pauses.apply(consumer, "pause", list(self.assigned))
            elif verb == "close":  # the final report reads these ends: not a second old
                self._post_ends(consumer)
                self._check_topics(arg)
                self.final_commit_failure = self._commit(consumer, arg, asynchronous=False)
                if self._watch is not None:
                    self._watch.close()
                consumer.close()
                self._closed = True
                return True
        return self._closed

    def _commit(
        self, consumer: ConsumerLike, offsets: list[CommitOffset], asynchronous: bool
    ) -> str | None:
        """Send ``offsets`` of partitions still held; returns why a synchronous commit failed."""
        owned = [offset for offset in offsets if (offset[0], offset[1]) in self.assigned]
        watch = self._watch
        if watch is not None and watch.replaced:
            owned = [offset for offset in owned if not watch.fenced(offset[0])]
        if not owned:
            return None
        try:
            consumer.commit(owned, asynchronous)
        except BrokerError as exc:
            self._on_commit(str(exc))
            return str(exc)
        if not asynchronous:
            self._on_commit(None)
        return None

    def _on_commit(self, failure: str | None) -> None:
        """Count a commit's outcome. A failed one costs replays after a restart, not data, and
        the loop hears of it, so the next commit sends every position again."""
        if failure is not None:
            self.commit_failures += 1
            log.warning("workload %s: commit failed: %s", self.name, failure)
            self._post(("commit_failed", None))
        else:
            self.commits += 1

    def _refresh_watermarks(self, consumer: ConsumerLike, held: bool) -> None:
        """Each partition's end, and the client's positions: posted behind the batches already
        posted, so the runner sees a position only once it has every record below it. Then
        the liveness watch (``held``: the loop cannot take a batch now, not a stall)."""
        self._post_ends(consumer)
        if not (self.assigned and self._intake_open):
            return
        positions = consumer.positions(list(self.assigned))
        moved = {k: v for k, v in positions.items() if self._positions.get(k) != v}
        if moved:
            self._positions.update(moved)
            self._post(("positions", moved))
        self.stalls.check(
            consumer, self.name, self.assigned, positions, self._ends, self._pauses.paused, held
        )

    def _post_ends(self, consumer: ConsumerLike) -> None:
        """Post the ends that moved or became known (a client learns one from a fetch)."""
        ends = {key: consumer.high_watermark(key) for key in list(self.assigned)}
        if moved := {k: v for k, v in ends.items() if v >= 0 and self._ends.get(k) != v}:
            self._ends.update(moved)
            self._post(("ends", moved))

    # ------------------------------------------------------------ rebalance callbacks

    def _on_assign(self, keys: list[PartitionKey]) -> None:
        self.rebalances += 1
        assert self._consumer is not None
        try:
            committed = self._consumer.committed(keys, timeout=10)
        except BrokerError as exc:
            log.warning("workload %s: reading committed offsets failed: %s", self.name, exc)
            committed = [(topic, partition, NO_OFFSET, "") for topic, partition in keys]
        parts = []
        for topic, partition, offset, metadata in committed:
            skip = decode_done(offset, metadata) if offset >= 0 else set()
            part = PartitionState(topic, partition, skip, offset if offset >= 0 else None)
            self.assigned[(topic, partition)] = part
            parts.append(part)
        self._pauses.assigned(keys)  # resumed after this poll (see ClientPauses)
        log.info("workload %s: assigned %s", self.name, [f"{t}[{p}]" for t, p in keys])
        if self._watch is not None:
            self._watch.learn({topic for topic, _ in keys})
        # Blocking work (landing's topic ids and file clean-up) before any record is read.
        self._runner.prepare_assignment(parts, self._rewind)
        self._post(("assign", parts))

    def _rewind(self, key: PartitionKey, offset: int) -> int:
        """Inside ``on_assign``: read ``key`` from ``offset`` (below its committed position: a
        damaged landed file was moved aside, :meth:`WorkloadLake.prepare`), or from the broker's
        earliest offset when that is above; a synchronous commit here sets where reading starts
        (the broker contract). Returns that start."""
        assert self._consumer is not None
        start = max(offset, self._consumer.low_watermark(key))
        part = self.assigned[key]
        if part.committed is not None and start < part.committed:
            self._consumer.commit([(key[0], key[1], start, "")], asynchronous=False)
        return start

    def _check_topics(self, offsets: list[CommitOffset]) -> None:
        """Before a commit that ends an assignment: ask the broker whether its topics are still
        the ones assigned (fencing those that are not)."""
        if self._watch is not None and offsets:
            self._watch.check({offset[0] for offset in offsets})

    def _release(self, keys: list[PartitionKey], commit: bool) -> None:
        log.info("workload %s: revoking %s (commit=%s)", self.name, keys, commit)
        if self._shutting_down or not keys:  # stop() drained and committed before close()
            self._forget(keys)
            return
        future: concurrent.futures.Future[list[CommitOffset]] = concurrent.futures.Future()
        self._post(("revoke", (keys, future)))
        try:
            offsets = future.result(timeout=self._drain_timeout + 30)
        except Exception as exc:
            log.error("workload %s: revoke drain failed: %s", self.name, exc)
            offsets = []
        if commit and offsets:
            assert self._consumer is not None
            self._check_topics(offsets)
            self._commit(self._consumer, offsets, asynchronous=False)
        self._forget(keys)

    def _forget(self, keys: list[PartitionKey]) -> None:
        """A later assignment is new state: its first position must be posted again, and its
        stall clock starts afresh."""
        for key in keys:
            self.assigned.pop(key, None)
            self._positions.pop(key, None)
            self._ends.pop(key, None)
            self.stalls.forget(key)
