"""A landing workload's lake as the runner sees it: which incarnation of each topic it lands,
the files to land again when a partition restarts below them, and whether partitions are landed.

Landing itself (buffering rows, durable files) is :mod:`consumers.landing.sink`; this module is
the runner's bookkeeping around it, so the runner asks one object instead of four callbacks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from consumers.backends.base import Identify
from consumers.clock import Clock
from consumers.engine.partition import PartitionState
from consumers.landing.files import (
    SourceIdentity,
    clear_from,
    ensure_index,
    remove_stale_temporaries,
    trim_from,
)
from consumers.landing.sink import LandingSettings, LandingSink

log = logging.getLogger("lanehouse.engine")

#: How far below the committed position a landed file may start and still hold records at or
#: above it (records complete out of offset order; :func:`~consumers.landing.files.trim_from`):
#: about a partition's ``max_buffered``, with room to spare.
STRADDLE_WINDOW = 1_000_000


class Lake:
    """One workload's landing sink plus the identities of the topics it lands."""

    def __init__(
        self, name: str, settings: LandingSettings, identify: Identify, clock: Clock
    ) -> None:
        self._name = name
        self._settings = settings
        self._identify = identify
        self._identities: dict[str, SourceIdentity] = {}
        self.sink = LandingSink(settings, clock)

    def prepare(self, parts: Sequence[PartitionState]) -> None:
        """Before the first record of ``parts`` is read (on the source's thread: it blocks):
        look up the topics' current incarnation, index the days of a partition's files if
        nothing did yet, remove temporary files a killed write left, and remove the landed files
        that the records from each committed position on will be landed into again (keeping
        those a previous owner completed; see :func:`consumers.landing.files.clear_from`). With
        the index only the days that may hold such files are listed, not the lake's every day."""
        if not parts:
            return
        self._identities.update(self._identify(sorted({p.topic for p in parts})))
        settings = self._settings
        now = time.time()  # file times are wall-clock
        for part in parts:
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
                now,
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
                continue  # nothing committed: a replay rewrites the same names (Spark dedups)
            removed = clear_from(
                settings.lake,
                settings.dataset,
                identity,
                part.partition,
                part.committed,
                keep=part.skip,
            )
            cut = trim_from(
                settings.lake,
                settings.dataset,
                identity,
                part.partition,
                part.committed,
                since=part.committed - STRADDLE_WINDOW,
            )
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
