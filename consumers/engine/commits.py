"""Commit planning: which positions (with done-offset metadata) to send, and when to send early.

The runner asks for positions on its timer and on revoke/shutdown; only partitions whose
position or metadata moved since the last plan are sent again, so an idle workload sends nothing.
"""

from __future__ import annotations

from consumers.backends.base import CommitOffset, PartitionKey
from consumers.backends.metadata import encode_done
from consumers.engine.partition import PartitionState


class CommitPlanner:
    """Remembers what was last planned per partition and counts progress since then."""

    def __init__(self, commit_every: int) -> None:
        self._commit_every = commit_every
        self._last: dict[PartitionKey, tuple[int, str]] = {}
        self._since = 0

    def advanced(self, records: int) -> bool:
        """Count records the watermarks moved past; True when this makes a commit due before
        the timer (once: the count starts again when the commit is planned)."""
        before = self._since
        self._since = since = before + records
        return since >= self._commit_every > before

    def plan(self, parts: list[PartitionState], only_changed: bool) -> list[CommitOffset]:
        self._since = 0
        offsets: list[CommitOffset] = []
        for part in parts:
            position = part.tracker.position
            if position is None:
                continue
            done = part.tracker.done_above()
            metadata = encode_done(position, done) if done else ""
            key = (part.topic, part.partition)
            if only_changed and self._last.get(key) == (position, metadata):
                continue
            self._last[key] = (position, metadata)
            offsets.append((part.topic, part.partition, position, metadata))
        return offsets

    def resend_all(self) -> None:
        """A commit failed: what was planned is not what the broker holds, so plan it all
        again (an idle partition's position would otherwise stay behind for good)."""
        self._last.clear()

    def forget(self, key: PartitionKey) -> None:
        """A partition left: its next assignment starts from whatever the broker holds."""
        self._last.pop(key, None)
