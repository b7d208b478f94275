"""The loop's requests to the source thread: what a runner asks of the client (commit, pause,
resume) and the source's own stop steps, queued for the source thread to apply between polls.

Built before the runner and the source thread and handed to both, so neither is wired to the
other after construction: the runner holds this channel as its :class:`SourceControl`, the
source thread drains it.
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any, Protocol

from consumers.backends.base import CommitOffset, PartitionKey

if TYPE_CHECKING:
    from consumers.engine.partition import PartitionState

#: A commit position with the assignment it was planned for (None: no longer assigned).
PlannedCommit = tuple[CommitOffset, "PartitionState | None"]


class SourceControl(Protocol):
    """What a runner asks of the thread that owns the client."""

    def commit(self, planned: list[PlannedCommit], asynchronous: bool) -> None: ...
    def pause(self, parts: list[PartitionKey]) -> None: ...
    def resume(self, parts: list[PartitionKey]) -> None: ...


class SourceCommands:
    """A runner's :class:`SourceControl`, queued for the source thread (any thread may put)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def commit(self, planned: list[PlannedCommit], asynchronous: bool) -> None:
        """Positions with the assignment each was planned for: a command still queued when its
        partition was revoked and assigned again, with another member committing further in
        between, is stale and must never move the group's position back."""
        self._queue.put(("commit", planned))

    def pause(self, parts: list[PartitionKey]) -> None:
        self._queue.put(("pause", parts))

    def resume(self, parts: list[PartitionKey]) -> None:
        self._queue.put(("resume", parts))

    def put(self, verb: str, argument: Any) -> None:
        """The source's own steps (``pause_all``, ``close``), in order with the runner's."""
        self._queue.put((verb, argument))

    def next(self) -> tuple[str, Any] | None:
        """The oldest command, or None when there is none."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None
