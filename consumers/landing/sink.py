"""The landing sink: records buffered into Parquet files, completed only once a file is durable.

    add(record) ─► buffer of (day, topic, partition) ─► flush when the buffer holds flush_rows,
                   when its oldest row waited flush_interval, on revoke of its partition, on
                   shutdown ─► write_landed() in a worker thread ─► every record's callback
                   (on the loop) ─► the engine completes its offset

One buffer per (day, topic, partition): a file then holds one partition's records of one day,
named by its first offset (:mod:`consumers.landing.files`); Pulsar files also carry a digest of
their positions, since a redelivery is not cut where the first delivery was. A write that fails with an
``OSError`` (disk full, permissions) blocks its partition (:mod:`consumers.landing.gates`): the
owner pauses the partition's intake, the write is retried with backoff (0.1 s to 5 s) with the
same rows into the same name, the records uncommitted meanwhile, and the other writes of the
partition wait for it; any other error fails the records' callbacks.

Runs on the engine's loop; file writes run in threads (``asyncio.to_thread``), at most one per
buffer at a time, so the loop never waits on a disk.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

from consumers.clock import Clock
from consumers.landing.files import LandedRow, landed_path, write_landed
from consumers.landing.gates import Gates
from consumers.landing.positions import PositionIndex, index_dir
from consumers.record import Record, SourceIdentity

__all__ = ["LandedFile", "LandingSettings", "LandingSink", "land_as_is"]

log = logging.getLogger(__name__)

_DAY_S = 86_400
_DAY_MS = _DAY_S * 1000
Done = Callable[[str | None], None]


@dataclass(frozen=True)
class LandingSettings:
    lake: Path
    dataset: str
    workload: str
    spec_hash: str
    flush_rows: int = 50_000
    flush_interval: float = 60.0


@dataclass(frozen=True)
class LandedFile:
    """One file that became durable (what the Dagster run reports as a materialization)."""

    dataset: str
    day: date
    path: Path
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    rows: int


def _offset(row: LandedRow) -> int:
    return row.offset


async def land_as_is(record: Record) -> None:
    """The handler of a landing workload that declares none: every record lands unchanged
    (async, so the engine calls it on its loop instead of a thread)."""
    return None


@dataclass
class _Buffer:
    day: date
    source: SourceIdentity
    partition: int
    started: float
    rows: list[LandedRow] = field(default_factory=list)
    callbacks: list[Done] = field(default_factory=list)


class LandingSink:
    """Buffers rows per (day, topic, partition) and lands them; see the module docstring."""

    def __init__(self, settings: LandingSettings, clock: Clock) -> None:
        self.settings = settings
        self._clock = clock
        #: By (UTC day number, topic, partition).
        self._buffers: dict[tuple[int, str, int], _Buffer] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        #: Rows added and not yet durable (or failed), by (topic, partition).
        self._pending: Counter[tuple[str, int]] = Counter()
        #: Each partition's day bounds (:mod:`consumers.landing.positions`).
        self._positions = PositionIndex()
        #: Files landed and rows in them, for metrics and the run's reports.
        self.files_landed = 0
        self.rows_landed = 0
        #: Files landed since the reporter last took them (bounded: reports may lag or be off).
        self.recent: deque[LandedFile] = deque(maxlen=10_000)
        #: Partitions whose writes fail, and the work before their first file (below).
        self.gates = Gates(clock.now)
        #: Work to do before a partition's first file, set by the assignment when the disk
        #: refused it (:meth:`consumers.engine.lake.WorkloadLake.prepare`); set from the source thread.
        self.deferred: dict[tuple[str, int], Callable[[], object]] = {}
        #: The last write failure, for the final report of records never landed.
        self.failure: str | None = None

    def add(self, source: SourceIdentity, row: LandedRow, done: Done) -> None:
        """Buffer one record; ``done(None)`` once it is in a renamed file."""
        key = (row.timestamp_ms // _DAY_MS, source.topic, row.partition)
        buffer = self._buffers.get(key)
        if buffer is None:
            day = datetime.fromtimestamp(key[0] * _DAY_S, tz=UTC).date()
            buffer = self._buffers[key] = _Buffer(day, source, row.partition, self._clock.now())
            self._arm()
        buffer.rows.append(row)
        buffer.callbacks.append(done)
        self._pending[(source.topic, row.partition)] += 1
        if len(buffer.rows) >= self.settings.flush_rows:
            self._flush(key)

    def flush_partition(self, topic: str, partition: int) -> None:
        """Land what is buffered for a partition (before it is revoked)."""
        for key in [k for k in self._buffers if k[1] == topic and k[2] == partition]:
            self._flush(key)

    async def close(self) -> None:
        """Land everything buffered and wait for all writes (on shutdown)."""
        for key in list(self._buffers):
            self._flush(key)
        if self._timer is not None:
            self._timer.cancel()
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    def pending(self, topic: str, partition: int) -> int:
        """Rows of a partition added but not landed yet (buffered or being written)."""
        return self._pending[(topic, partition)]

    @property
    def unlanded(self) -> int:
        """Rows added and not landed, of every partition (after :meth:`abort`: never landed)."""
        return sum(self._pending.values())

    def take_landed(self) -> list[LandedFile]:
        """The files landed since the last call, oldest first."""
        files = list(self.recent)
        self.recent.clear()
        return files

    def put_back(self, files: list[LandedFile]) -> None:
        """Files a caller took but could not report: the next ``take_landed`` returns them first."""
        self.recent.extendleft(reversed(files))

    def abort(self) -> None:
        """Stop the timer and the writes still running (their records stay uncommitted)."""
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._writes):
            task.cancel()

    @property
    def buffered(self) -> int:
        return sum(len(b.rows) for b in self._buffers.values())

    # ---------------------------------------------------------------- internals

    def _arm(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.ensure_future(self._flush_when_due())

    async def _flush_when_due(self) -> None:
        interval = self.settings.flush_interval
        while self._buffers:
            oldest = min(b.started for b in self._buffers.values())
            wait = oldest + interval - self._clock.now()
            if wait > 0:
                await self._clock.sleep(wait)
                continue
            now = self._clock.now()
            for key, buffer in list(self._buffers.items()):
                if now - buffer.started >= interval:
                    self._flush(key)

    def _flush(self, key: tuple[int, str, int]) -> None:
        buffer = self._buffers.pop(key)
        task = asyncio.ensure_future(self._land(buffer))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _land(self, buffer: _Buffer) -> None:
        settings = self.settings
        first = min(row.offset for row in buffer.rows)
        content = None
        if buffer.source.kind != "kafka":  # replays are cut elsewhere: never replace a file
            positions = ",".join(str(row.offset) for row in sorted(buffer.rows, key=_offset))
            content = hashlib.blake2b(positions.encode(), digest_size=6).hexdigest()
        path = landed_path(
            settings.lake,
            settings.dataset,
            buffer.day,
            buffer.source,
            buffer.partition,
            first,
            content,
        )
        index = index_dir(
            settings.lake / "landed" / settings.dataset,
            buffer.source.file_prefix(),
            buffer.partition,
        )
        key = (buffer.source.topic, buffer.partition)
        gates = self.gates
        while True:
            opened = gates.waiting(key, buffer)
            if opened is not None:  # another write of the partition probes the disk
                await opened.wait()
                continue
            if key in self.deferred:
                gates.hold(key, buffer)  # the deferred work runs once, before any file
            try:
                await asyncio.to_thread(self._write, key, buffer, path, index, first)
                break
            except OSError as exc:  # disk full, permissions: the records wait, uncommitted
                delay = gates.failed(key, buffer)
                if delay is not None:
                    self._failed(buffer, path, exc, delay)
                    await self._clock.sleep(delay)
            except Exception as exc:  # data the writer refuses: retrying would not help
                gates.passed(key, buffer)
                log.exception("workload %s: landing to %s failed", settings.workload, path)
                self._settle(buffer, f"landing to {path} failed: {exc!r}")
                return
        recovered = gates.passed(key, buffer)
        if recovered is not None:
            log.warning(
                "workload %s: landing to %s works again after %d failed attempts in %.1f s; "
                "%s[%d] resumes",
                settings.workload,
                path,
                recovered[0],
                recovered[1],
                *key,
            )
        self.files_landed += 1
        self.rows_landed += len(buffer.rows)
        self.recent.append(
            LandedFile(
                settings.dataset,
                buffer.day,
                path,
                buffer.source.topic,
                buffer.partition,
                first,
                max(row.offset for row in buffer.rows),
                len(buffer.rows),
            )
        )
        self._settle(buffer, None)

    def _write(
        self, key: tuple[str, int], buffer: _Buffer, path: Path, index: Path, first: int
    ) -> None:
        """In a worker thread: the partition's deferred assignment work, the day's bound, the
        file."""
        work = self.deferred.get(key)
        if work is not None:
            work()
            self.deferred.pop(key, None)
        # The day's bound first: a file the index does not cover is never cleared.
        self._positions.note(index, buffer.day, first)
        settings = self.settings
        write_landed(
            path,
            buffer.source,
            buffer.rows,
            int(time.time() * 1000),
            settings.workload,
            settings.spec_hash,
        )

    def _failed(self, buffer: _Buffer, path: Path, exc: OSError, delay: float) -> None:
        """One line per backoff step: the workload, the partition, the path and the errno."""
        code = errno.errorcode.get(exc.errno, "?") if exc.errno else "no errno"
        where = f"{exc.filename}" if exc.filename else str(path)
        self.failure = f"landing to {where} failed: {exc.strerror or exc} ({code})"
        log.warning(
            "workload %s: %s[%d]: %s; its intake is paused, %d rows wait, retrying in %.1f s",
            self.settings.workload,
            buffer.source.topic,
            buffer.partition,
            self.failure,
            self._pending[(buffer.source.topic, buffer.partition)],
            delay,
        )

    def _settle(self, buffer: _Buffer, error: str | None) -> None:
        self._pending[(buffer.source.topic, buffer.partition)] -= len(buffer.rows)
        for done in buffer.callbacks:
            done(error)
