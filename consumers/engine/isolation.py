"""What a worker does with a record of a suspect window (:mod:`consumers.engine.crashes`):
journal it around its call, one at a time in the workload, or set aside the record deaths
named without calling it."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from consumers.engine.crashes import CrashJournal, Suspect
from consumers.engine.partition import PartitionState
from consumers.engine.settings import RunnerSettings
from consumers.engine.tracked import TrackedRecord
from consumers.engine.workers import Worker
from consumers.errors import HandlerError, LanehouseError
from consumers.outcomes import DeadLetter, Outcome, Retry

log = logging.getLogger("lanehouse.engine")

Call = Callable[[Worker, TrackedRecord], Awaitable[tuple[Outcome, HandlerError | None]]]


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
        self, worker: Worker, rec: TrackedRecord, suspect: Suspect
    ) -> tuple[Outcome, HandlerError | None]:
        if suspect.culprit(rec.offset):
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
            reason = suspect.reason()
            suspect.set_aside()
            log.error(
                "workload %s: %s[%d]@%d key=%r: %s; dead-lettering it",
                self._name,
                rec.topic,
                rec.partition,
                rec.offset,
                rec.key,
                reason,
            )
            return DeadLetter(reason), None
        worker.started = math.inf  # waiting for its turn is not running: no timeout yet
        async with self._turn:
            worker.started = self._now()
            suspect.running(rec.offset)
            try:
                return await self._call(worker, rec)
            finally:
                suspect.ran(rec.offset)


def isolate(
    settings: RunnerSettings,
    call: Call,
    fail: Callable[[BaseException], None],
    end_window: Callable[[PartitionState], None],
    now: Callable[[], float],
) -> tuple[CrashJournal | None, Isolation | None]:
    """The crash journal and isolation of a runner with ``settings``; none without a crash
    directory, or in batch and unique modes (a batch is one call)."""
    if settings.crash_dir is None or settings.mode != "single":
        return None, None
    journal = CrashJournal(settings.crash_dir, settings.name, settings.buffer_limit)
    dead_letters = settings.dead_letter is not None
    return journal, Isolation(settings.name, call, dead_letters, fail, end_window, now)
