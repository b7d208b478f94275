"""Crash isolation: a record whose handler ends the process (``os._exit``, a crash in native
code) cannot stop its workload forever.

Nothing reaches the engine when the process itself dies, so it remembers, per assigned
partition, that this process holds it: a small file under ``<state>/crashes/<workload>/``
made on assignment and removed when the assignment ends alive (revoke, loss, drain). A file
found on the next assignment means the last holder on this machine died holding it::

    1 death, or deaths while the committed   normal: a process killed now and then while it
    position moves on between them            makes progress (a deploy, the OOM killer, the
                                              suite's kill -9) is no record's fault
    2 deaths in a row, the position not       suspect: the first ``window`` records from the
    moved between them                        position run one at a time in the workload, each
                                              offset written to the file before its call and
                                              cleared after it; later records are tracked and
                                              wait until the window is done
    a death while a suspect record ran        that record is *named*; it runs again, journaled
    a second death while the named one ran    it is set aside: dead-lettered without running
                                              (no dead-letter topic: the workload stops at it,
                                              naming it, on every run until the file is removed)

Bound: a record that ends the process is set aside after at most four deaths in a row without
the position moving, when it lies within ``window`` records of that position (the partition's
buffer: a dead run never started records further out); earlier deaths move the position
towards it. An external kill must hit the same record twice while it runs alone to blame it.
A partition held without suspicion (newly taken from another member) runs as usual meanwhile:
if its handler ends the process, the suspect record running then is named (it would need a
second such death to be set aside). Offsets must mean the same record from run to run, so only
Kafka workloads are isolated (Pulsar's are numbered afresh in each session). The file is
written with ``pwrite`` and no fsync: it must survive the process, not the machine. Batch and
unique modes are not isolated (a batch is one call).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from consumers.engine.tracked import TrackedRecord

log = logging.getLogger("lanehouse.engine")

#: Deaths in a row holding a partition before its next assignment runs it as a suspect.
SUSPECT_AFTER = 2
#: Deaths while one record ran alone before it is set aside.
STRIKES = 2
#: The file's fixed size: every write replaces it whole, and a short one cannot be torn.
_SIZE = 160


@dataclass
class Mark:
    """What a partition's file says."""

    #: Deaths in a row holding it without its committed position moving.
    deaths: int = 0
    #: The suspect record running now (None between calls).
    running: int | None = None
    #: The record named by deaths while it ran alone, and how many.
    named: int | None = None
    strikes: int = 0
    #: The committed position the holder started from (None: nothing committed).
    position: int | None = None

    def after_death(self, position: int | None) -> Mark:
        """The mark a new holder starting at ``position`` takes over from a dead one."""
        named, strikes = self.named, self.strikes
        if self.running is not None:
            strikes = strikes + 1 if self.running == named else 1
            named = self.running
        moved = _above(position, self.position)
        if moved and named is None:
            return Mark(1, None, None, 0, position)
        return Mark(self.deaths + 1, None, named, strikes, position)

    def write(self, fd: int) -> None:
        os.pwrite(fd, json.dumps(asdict(self)).encode().ljust(_SIZE), 0)


def _above(position: int | None, before: int | None) -> bool:
    return (position if position is not None else -1) > (before if before is not None else -1)


class Suspect:
    """One partition's suspect window (see the module docstring); loop thread only."""

    def __init__(self, fd: int, mark: Mark, window: int) -> None:
        #: None once the assignment ended: a call still running then must not write to a file
        #: descriptor the process may have given to another file.
        self._fd: int | None = fd
        self.mark = mark
        self._window = window
        #: One past the window's last offset, set by its first record.
        self.until: int | None = None
        #: The last offset the window admitted (a partition's records arrive in offset order).
        self.last: int | None = None
        #: Records past the window, in offset order: filed into their lanes once the window
        #: is done (tracked meanwhile, so the partition's buffer bounds them).
        self.later: list[TrackedRecord] = []
        #: The culprit stopped the workload (no dead-letter topic): keep the file for the next
        #: run, so it stops at the same record instead of dying on it again.
        self.keep = False

    def admits(self, offset: int) -> bool:
        """Whether ``offset`` belongs to the window (the first one sets it)."""
        if self.until is None:
            self.until = offset + self._window
        if offset < self.until:
            self.last = offset
            return True
        return False

    def arrived(self, end: int | None) -> bool:
        """Whether every record of the window has arrived: a record past it has, or its last
        offset, or the partition's end (``end``; None: not known yet). Until then an empty
        lane means the rest of the window is still on its way: ended then, the window would
        let its poison run beside others, and a crash would start the count again."""
        last = self.last
        if last is None:
            return False
        assert self.until is not None  # set with ``last``
        return bool(self.later) or last + 1 >= self.until or (end is not None and last + 1 >= end)

    def culprit(self, offset: int) -> bool:
        """Whether ``offset`` ended the process often enough to be set aside."""
        return offset == self.mark.named and self.mark.strikes >= STRIKES

    def running(self, offset: int) -> None:
        self.mark.running = offset
        self._save()

    def ran(self, offset: int) -> None:
        """``offset`` returned: no record is running, and a named one is cleared."""
        mark = self.mark
        mark.running = None
        if offset == mark.named:
            mark.named, mark.strikes = None, 0
        self._save()

    def set_aside(self) -> None:
        self.mark.named, self.mark.strikes = None, 0
        self._save()

    def detach(self) -> None:
        """The assignment ends: later calls write nothing."""
        self._fd = None

    def _save(self) -> None:
        if self._fd is not None:
            self.mark.write(self._fd)

    def reason(self) -> str:
        return (
            "the handler ended the process while handling this record "
            f"({self.mark.strikes} deaths while it ran alone; os._exit, a signal or a crash in "
            "native code); it was not run again"
        )

    def calm(self) -> None:
        """The window is done: the partition runs as usual again, and a later death counts
        from one."""
        self.mark.deaths = 0
        self._save()


class CrashJournal:
    """One workload's partition files; ``open``/``close`` on assignment and its end."""

    def __init__(self, directory: Path, workload: str, window: int) -> None:
        self._dir = directory / workload
        self._window = window
        self._fds: dict[tuple[str, int], int] = {}

    def open(self, topic: str, partition: int, position: int | None) -> Suspect | None:
        """Mark ``topic[partition]`` held by this process from its committed ``position``; a
        :class:`Suspect` when earlier holders died holding it. File errors are logged, never
        raised: isolation is a safety net, and a workload must not stop because its state
        directory is read-only."""
        path = self._path(topic, partition)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            mark = _read(path, position)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            log.warning("crash isolation off for %s[%d]: %s", topic, partition, exc)
            return None
        self._fds[(topic, partition)] = fd
        mark.write(fd)
        if mark.deaths < SUSPECT_AFTER and mark.named is None:
            return None
        log.warning(
            "%s[%d]: the last %d processes holding it died without its position moving (%s); "
            "running the next %d records one at a time and setting aside one that ends the "
            "process twice",
            topic,
            partition,
            mark.deaths,
            f"offset {mark.named} was running {mark.strikes}x"
            if mark.named is not None
            else "no record named yet",
            self._window,
        )
        return Suspect(fd, mark, self._window)

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


def _read(path: Path, position: int | None) -> Mark:
    """The mark a holder starting at ``position`` takes: a fresh one without a file, else the
    dead holder's after its death."""
    try:
        text = path.read_bytes().decode(errors="replace").strip()
    except FileNotFoundError:
        return Mark(position=position)
    try:
        dead = Mark(**json.loads(text))
    except (ValueError, TypeError):
        return Mark(1, position=position)  # unreadable: it existed, so the holder died
    return dead.after_death(position)


#: The lane every record of a suspect window runs in: one at a time, in offset order.
SUSPECT_LANE = ("lanehouse", "suspect-window")
