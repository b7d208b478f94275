"""A landing workload's lake as the runner sees it: which incarnation of each topic it lands,
the files to land again when a partition restarts below them, and whether partitions are landed.

Landing itself (buffering rows, durable files) is :mod:`consumers.landing.sink`; this module is
the runner's bookkeeping around it, so the runner asks one object instead of four callbacks.

Two failures of the assignment work never stop the workload:

* a landed file below the position that cannot be read (truncated, overwritten) is moved aside
  (:mod:`consumers.landing.quarantine`) and the partition's position is set back to its first
  offset, so the broker lands those records again (or the log says they are gone from it);
* an ``OSError`` (a full disk) defers the partition's work to the sink, which runs it before the
  partition's first file, retried with backoff while the partition's intake is paused
  (:mod:`consumers.landing.gates`); the workload's other partitions go on.
"""

from __future__ import annotations

import errno
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from consumers.backends.base import Identify, PartitionKey
from consumers.clock import Clock
from consumers.engine.partition import PartitionState
from consumers.errors import BrokerError, DamagedFile
from consumers.landing.files import (
    clear_from,
    ensure_index,
    remove_stale_temporaries,
    trim_from,
)
from consumers.landing.quarantine import first_offset, move_aside, next_first_offset
from consumers.landing.sink import LandingSettings, LandingSink
from consumers.record import SourceIdentity

log = logging.getLogger("lanehouse.engine")

#: How far below the committed position a landed file may start and still hold records at or
#: above it (records complete out of offset order; :func:`~consumers.landing.files.trim_from`):
#: about a partition's ``max_buffered``, with room to spare.
STRADDLE_WINDOW = 1_000_000

#: Sets a partition's position back to an offset below its committed one, before any record of
#: it is read (the source thread, inside the assignment callback); returns where reading starts:
#: the offset, or the broker's earliest one when that is above. Raises ``BrokerError``.
Rewind = Callable[[PartitionKey, int], int]


class WorkloadLake:
    """One workload's landing sink plus the identities of the topics it lands."""

    def __init__(
        self, name: str, settings: LandingSettings, identify: Identify, clock: Clock
    ) -> None:
        self._name = name
        self._settings = settings
        self._identify = identify
        self._identities: dict[str, SourceIdentity] = {}
        self.sink = LandingSink(settings, clock)

    def prepare(self, parts: Sequence[PartitionState], rewind: Rewind | None = None) -> None:
        """Before the first record of ``parts`` is read (on the source's thread: it blocks):
        look up the topics' current incarnation, then each partition's files (:meth:`_prepare`).
        A partition whose files the disk refuses (``OSError``) is left to the sink, which does
        its work before the partition's first file, retried with backoff."""
        if not parts:
            return
        self._identities.update(self._identify(sorted({p.topic for p in parts})))
        for part in parts:
            key = (part.topic, part.partition)
            self.sink.deferred.pop(key, None)
            try:
                self._prepare(part, rewind)
            except OSError as exc:
                self.sink.deferred[key] = functools.partial(self._prepare, part, None)
                code = errno.errorcode.get(exc.errno, "?") if exc.errno else "no errno"
                log.warning(
                    "workload %s: %s[%d]: the work on its landed files at assignment failed "
                    "(%s: %s, %s); its landing waits and retries it before its first file",
                    self._name,
                    part.topic,
                    part.partition,
                    exc.filename or self._settings.lake,
                    exc.strerror or exc,
                    code,
                )

    def _prepare(self, part: PartitionState, rewind: Rewind | None) -> None:
        """Index the days of a partition's files if nothing did yet, remove temporary files a
        killed write left, and remove the landed files that the records from the committed
        position on will be landed into again (keeping those a previous owner completed; see
        :func:`consumers.landing.files.clear_from`). With the index only the days that may hold
        such files are listed, not the lake's every day. A damaged file below the position is
        moved aside and the position set back (:meth:`_set_aside`)."""
        settings = self._settings
        identity = self.identity(part.topic)
        if ensure_index(settings.lake, settings.dataset, identity, part.partition):
            log.info(
                "workload %s: %s[%d]: indexed the days of its landed files",
                self._name,
                part.topic,
                part.partition,
            )
        stale = remove_stale_temporaries(
            settings.lake,
            settings.dataset,
            identity,
            part.partition,
            time.time(),  # file times are wall-clock
            position=part.committed,
        )
        if stale:
            log.info(
                "workload %s: %s[%d]: removed %d temporary files left by a killed write",
                self._name,
                part.topic,
                part.partition,
                stale,
            )
        if part.committed is None:
            return  # nothing committed: a replay rewrites the same names (Spark dedups)
        while True:
            removed = clear_from(
                settings.lake,
                settings.dataset,
                identity,
                part.partition,
                part.committed,
                keep=part.skip,
            )
            try:
                cut = trim_from(
                    settings.lake,
                    settings.dataset,
                    identity,
                    part.partition,
                    part.committed,
                    since=part.committed - STRADDLE_WINDOW,
                )
            except DamagedFile as damage:
                self._set_aside(part, damage, rewind)
                continue  # from the position set back: clear and cut again
            break
        if removed or cut:
            log.info(
                "workload %s: %s[%d] restarts at %d: removed %d landed files and cut %d "
                "back to land their records again",
                self._name,
                part.topic,
                part.partition,
                part.committed,
                removed,
                cut,
            )

    def _set_aside(self, part: PartitionState, damage: DamagedFile, rewind: Rewind | None) -> None:
        """Move a damaged file below the committed position aside and set the partition's
        position back to its first offset (the offsets up to the next file's first, or the
        position, are landed again), saying plainly when the broker no longer holds them."""
        assert part.committed is not None
        path = Path(damage.path)
        first = first_offset(path)
        if first is None:  # trim_from reads only files named by their first offset
            raise damage
        end = min(next_first_offset(path) or part.committed, part.committed)
        start, why = part.committed, ""
        if rewind is None:
            why = "not set back: the partition was read before its files could be worked on"
        else:
            try:
                start = rewind((part.topic, part.partition), first)
            except BrokerError as exc:
                why = f"setting the position back failed ({exc})"
        moved = move_aside(self._settings.lake / "landed" / self._settings.dataset, path)
        if why:
            fate = f"{why}; offsets {first}-{end - 1} are missing from the lake until the group "
            fate += f"is rewound to {first} (lanehouse rewind)"
        elif start <= first:
            fate = f"the position is set back from {part.committed} to {first}: landed again"
        else:
            fate = (
                f"the broker's earliest offset is {start}: offsets {first}-{min(start, end) - 1} "
                "are no longer retained and are LOST from the lake (kept in the damaged file)"
            )
            if start < part.committed:
                fate += f"; the position is set back to {start}: the rest is landed again"
        log.error(
            "workload %s: %s[%d]: landed file %s (offsets %d-%d, by its name and the next "
            "file's) cannot be read (%s): moved aside to %s; %s",
            self._name,
            part.topic,
            part.partition,
            path,
            first,
            end - 1,
            damage.reason,
            moved,
            fate,
        )
        if start < part.committed:
            part.committed = start

    def identity(self, topic: str) -> SourceIdentity:
        identity = self._identities.get(topic)
        if identity is None:
            identity = self._identities[topic] = self._identify([topic])[topic]
        return identity

    def landed(self, parts: Iterable[PartitionState]) -> bool:
        """True once nothing of ``parts`` waits to be landed; lands what is buffered (drain and
        revoke call this after their handlers finished, so nothing new arrives)."""
        waiting = False
        for part in parts:
            if self.sink.pending(part.topic, part.partition):
                waiting = True
                self.sink.flush_partition(part.topic, part.partition)
        return not waiting

    def unlanded(self, parts: Iterable[PartitionState]) -> int:
        return sum(self.sink.pending(p.topic, p.partition) for p in parts)
