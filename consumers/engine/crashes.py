"""Crash isolation: a record whose handler ends the process (``os._exit``, a crash in native
code) cannot stop its workload forever.

Nothing reaches the engine when the process itself dies, so it remembers, per assigned
partition, that this process holds it: a small file under ``<state>/crashes/<workload>/``
made on assignment and removed when the assignment ends (revoke, loss, drain). A file found on
the next assignment means the last holder on this machine died holding the partition::

    no file, or 1 death in a row    normal (a kill -9 or the OOM killer is not a record's fault)
    2 deaths in a row               suspect: the first ``window`` records from the position run
                                    one at a time (one in the whole workload), each offset written
                                    to the file before its call and cleared after it; later
                                    records are tracked and wait until the window is done, then
                                    run as usual
    the file names a running record that record ended the process: it is dead-lettered without
                                    running (no dead-letter topic: the workload stops, naming it,
                                    and so does every run after it until the spec changes)

Bound: a record that ends the process is set aside after at most three deaths when it lies
within ``window`` records of the position the second death left (the partition's buffer: a
dead run never started records further out); each further death moves that position on or
names another record. A partition the workload holds without suspicion (newly taken from
another member) runs as usual meanwhile: if its handler ends the process, the suspect record
running then is blamed (dead-lettered, so kept, not lost). The file is written with ``pwrite`` and no fsync: it must survive the
process, not the machine. Batch and unique modes are not isolated (a batch is one call).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from consumers.engine.workers import Worker
from consumers.errors import HandlerError, LanehouseError
from consumers.outcomes import DeadLetter, Outcome, Retry
from consumers.record import Record

if TYPE_CHECKING:
    from consumers.engine.partition import PartitionState

log = logging.getLogger("lanehouse.engine")

#: Deaths in a row holding a partition before its next assignment runs it as a suspect.
SUSPECT_AFTER = 2
#: The file's fixed size: every write replaces it whole, and a short one cannot be torn.
_SIZE = 96


class Suspect:
    """One partition's suspect window (see the module docstring); loop thread only."""

    def __init__(self, fd: int, deaths: int, culprit: int | None, window: int) -> None:
        self._fd = fd
        self.deaths = deaths
        #: The offset that was running when the process died, if the file named one.
        self.culprit = culprit
        self._window = window
        #: One past the window's last offset, set by its first record.
        self.until: int | None = None
        #: Records past the window, in offset order: filed into their lanes once the window
        #: is done (tracked meanwhile, so the partition's buffer bounds them).
        self.later: list[Record] = []
        #: The culprit stopped the workload (no dead-letter topic): keep the file for the next
        #: run, so it stops at the same record instead of dying on it again.
        self.keep = False

    def admits(self, offset: int) -> bool:
        """Whether ``offset`` belongs to the window (the first one sets it)."""
        if self.until is None:
            self.until = offset + self._window
        return offset < self.until

    def running(self, offset: int) -> None:
        _write(self._fd, self.deaths, offset, self.culprit)

    def ran(self) -> None:
        _write(self._fd, self.deaths, None, self.culprit)

    def reason(self) -> str:
        return (
            f"the handler ended the process while handling this record ({self.deaths} deaths "
            "in a row holding its partition; os._exit, a signal or a crash in native code); "
            "it was not run again"
        )

    def calm(self) -> None:
        """The window is done: the partition runs as usual again, and a later death counts
        from one."""
        _write(self._fd, 0, None, None)


class CrashJournal:
    """One workload's partition files; ``open``/``close`` on assignment and its end."""

    def __init__(self, directory: Path, workload: str, window: int) -> None:
        self._dir = directory / workload
        self._window = window
        self._fds: dict[tuple[str, int], int] = {}

    def open(self, topic: str, partition: int) -> Suspect | None:
        """Mark ``topic[partition]`` held by this process; a :class:`Suspect` when earlier
        holders died holding it. File errors are logged, never raised: isolation is a safety
        net, and a workload must not stop because its state directory is read-only."""
        path = self._path(topic, partition)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            deaths, culprit = _read(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            log.warning("crash isolation off for %s[%d]: %s", topic, partition, exc)
            return None
        self._fds[(topic, partition)] = fd
        _write(fd, deaths, None, culprit)
        if deaths < SUSPECT_AFTER and culprit is None:
            return None
        log.warning(
            "%s[%d]: the last %d processes holding it died (%s); running the next %d records "
            "one at a time and setting aside any that ends the process",
            topic,
            partition,
            deaths,
            f"offset {culprit} was running" if culprit is not None else "no record named",
            self._window,
        )
        return Suspect(fd, deaths, culprit, self._window)

    def close(self, topic: str, partition: int, keep: bool = False) -> None:
        """The assignment ended with the process alive: forget the partition (``keep``: the
        file stays, naming its culprit for the next run)."""
        fd = self._fds.pop((topic, partition), None)
        if fd is None:
            return
        os.close(fd)
        if keep:
            return
        try:
            self._path(topic, partition).unlink()
        except OSError as exc:
            log.warning("cannot remove the crash file of %s[%d]: %s", topic, partition, exc)

    def _path(self, topic: str, partition: int) -> Path:
        return self._dir / f"{quote(topic, safe='')}-{partition}"


def _read(path: Path) -> tuple[int, int | None]:
    """(deaths in a row, the culprit: the offset running at the last death, or one named
    earlier and not set aside yet) from an existing file; (0, None) without one."""
    try:
        text = path.read_bytes().decode(errors="replace").strip()
    except FileNotFoundError:
        return 0, None
    try:
        data = json.loads(text)
        deaths, culprit = int(data["deaths"]), data["running"]
        if culprit is None:
            culprit = data["culprit"]
    except (ValueError, KeyError, TypeError):
        return 1, None  # unreadable: it existed, so the holder died
    return deaths + 1, int(culprit) if culprit is not None else None


def _write(fd: int, deaths: int, running: int | None, culprit: int | None) -> None:
    state = {"deaths": deaths, "running": running, "culprit": culprit}
    os.pwrite(fd, json.dumps(state).encode().ljust(_SIZE), 0)


#: The lane every record of a suspect window runs in: one at a time, in offset order.
SUSPECT_LANE = ("lanehouse", "suspect-window")

Call = Callable[[Worker, Record], Awaitable[tuple[Outcome, HandlerError | None]]]


class Isolation:
    """What a worker does with a record of a suspect window: journal it around its call, or
    set the culprit aside without calling (see the module docstring)."""

    def __init__(
        self,
        name: str,
        call: Call,
        dead_letters: bool,
        fail: Callable[[BaseException], None],
        end_window: Callable[[PartitionState], None],
        now: Callable[[], float],
    ) -> None:
        self._name = name
        self._call = call
        self._now = now
        #: One suspect record at a time in the workload, whatever its partition: a death must
        #: name the one record that was running.
        self._turn = asyncio.Lock()
        self._dead_letters = dead_letters
        self._fail = fail
        self.end_window = end_window

    async def call(
        self, worker: Worker, rec: Record, suspect: Suspect
    ) -> tuple[Outcome, HandlerError | None]:
        if rec.offset == suspect.culprit:
            if not self._dead_letters:
                suspect.keep = True
                self._fail(
                    LanehouseError(
                        f"workload {self._name}: {rec.topic}[{rec.partition}]@{rec.offset} "
                        f"key={rec.key!r}: {suspect.reason()}; the workload has no dead-letter "
                        "topic to set it aside, so it stops here (configure dead_letter, or fix "
                        "the handler)"
                    )
                )
                return Retry(after=3600.0), None  # never runs: the workload is stopping
            suspect.culprit = None
            suspect.ran()
            log.error(
                "workload %s: %s[%d]@%d key=%r: %s; dead-lettering it",
                self._name,
                rec.topic,
                rec.partition,
                rec.offset,
                rec.key,
                suspect.reason(),
            )
            return DeadLetter(suspect.reason()), None
        worker.started = math.inf  # waiting for its turn is not running: no timeout yet
        async with self._turn:
            worker.started = self._now()
            suspect.running(rec.offset)
            try:
                return await self._call(worker, rec)
            finally:
                suspect.ran()
