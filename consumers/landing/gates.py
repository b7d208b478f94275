"""Landing gates: a partition whose files cannot be written (a full disk, permissions) waits.

    write fails with OSError ─► the partition's gate closes: the owner is told "blocked" (the
        engine pauses the partition's intake), this write retries after 0.1 s, 0.2 s, … 5 s,
        every other write of the partition waits for it (one probe, one log line per step)
    the probe succeeds ─► the gate opens, the waiting writes go on, the owner is told
        "unblocked" (intake resumes once its buffer allows)

A gate also serializes work that must come before a partition's first file (assignment work
that a full disk deferred): the write that runs it holds the gate, unclosed, until it passes.
Everything here runs on the engine's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FIRST_RETRY", "MAX_RETRY", "Gates", "OnBlocked"]

#: Seconds before the first retry of a failed write; doubled per failure up to MAX_RETRY.
FIRST_RETRY = 0.1
MAX_RETRY = 5.0

#: Told ``(topic, partition, blocked)`` when a partition's landing starts or stops failing.
OnBlocked = Callable[[str, int, bool], None]
Key = tuple[str, int]


@dataclass
class _Gate:
    #: The write that retries (the others wait for it).
    prober: object
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    failures: int = 0
    #: When the first failure happened (the clock's reading).
    since: float = 0.0


class Gates:
    """One gate per partition whose landing fails or holds work; see the module docstring."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._gates: dict[Key, _Gate] = {}
        #: Told when a partition becomes blocked or unblocked (the runner's intake).
        self.on_blocked: OnBlocked | None = None

    def waiting(self, key: Key, writer: object) -> asyncio.Event | None:
        """The event ``writer`` must wait for (another write of the partition holds the gate),
        or None: it may write now."""
        gate = self._gates.get(key)
        return gate.opened if gate is not None and gate.prober is not writer else None

    def hold(self, key: Key, writer: object) -> None:
        """``writer`` runs work that must precede the partition's other writes."""
        self._gates.setdefault(key, _Gate(writer))

    def failed(self, key: Key, writer: object) -> float | None:
        """A write of the partition failed with an OSError: seconds until ``writer`` retries, or
        None when another write holds the gate (wait for it instead)."""
        gate = self._gates.setdefault(key, _Gate(writer))
        if gate.prober is not writer:
            return None
        gate.failures += 1
        if gate.failures == 1:
            gate.since = self._now()
            self._tell(key, True)
        return min(FIRST_RETRY * 2.0 ** (gate.failures - 1), MAX_RETRY)

    def passed(self, key: Key, writer: object) -> tuple[int, float] | None:
        """``writer`` is done (written, or failed for good): the gate opens for the others.
        Returns (failures, seconds blocked) when the partition was blocked."""
        gate = self._gates.get(key)
        if gate is None or gate.prober is not writer:
            return None
        del self._gates[key]
        gate.opened.set()
        if not gate.failures:
            return None
        self._tell(key, False)
        return gate.failures, self._now() - gate.since

    def blocked(self) -> list[Key]:
        """Partitions whose landing is failing now."""
        return [key for key, gate in self._gates.items() if gate.failures]

    def _tell(self, key: Key, blocked: bool) -> None:
        if self.on_blocked is not None:
            self.on_blocked(key[0], key[1], blocked)
