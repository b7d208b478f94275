"""What a rewind changes, partition by partition: the record a dry run prints and a real run
applies, logs and stores as run metadata."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Move", "RewindPlan"]


class Move(BaseModel):
    """One partition (Kafka: offsets) or one topic of a subscription (Pulsar, ``partition`` -1:
    its backlog in messages, before and after)."""

    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    #: The committed position now; None when there is none (the reset policy applies).
    committed: int | None
    #: The position written.
    new: int
    #: Records that will be handled a second time (they were before ``committed``).
    again: int
    #: Landed files cut back to ``new`` (their records from ``new`` on are landed again).
    trimmed_files: int = 0


class RewindPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    workload: str
    kind: str
    group: str
    target: str
    moves: tuple[Move, ...]
    applied: bool = False

    @property
    def again(self) -> int:
        return sum(move.again for move in self.moves)

    def lines(self) -> list[str]:
        """One human line per partition, then the total; the same in a terminal and a log."""
        verb = "rewound" if self.applied else "would rewind"
        out = [f"{self.workload}: {verb} {self.kind} {self.group} to {self.target}"]
        for move in self.moves:
            if move.partition < 0:
                where, now = move.topic, f"backlog {move.committed}"
                new = f"backlog {move.new}"
            else:
                where, new = f"{move.topic}[{move.partition}]", str(move.new)
                now = "nothing committed" if move.committed is None else str(move.committed)
            out.append(f"  {where}: {now} -> {new}, {move.again} handled again")
        out.append(f"  total: {self.again} records handled again")
        return out
