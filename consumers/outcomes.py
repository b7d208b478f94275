"""What a handler may return, and how the engine names what happened to a record.

A handler returns ``None`` (done) or one of:

- :class:`Forward` — one or more records for the workload's output topic. They are produced in
  source order per partition, and the source record completes only once the broker
  acknowledged every one of them.
- :class:`Drop` — done, on purpose (counted, with a reason).
- :class:`Retry` — try again after ``after`` seconds (or the retry policy's backoff); counts as
  an attempt, so ``retries.max_attempts`` still applies.
- :class:`DeadLetter` — give up now: write the record to the dead-letter topic.
- :class:`Land` — (landing workloads) land this value instead of the record's; ``None`` lands
  the record as it is.

Raising is a failed attempt handled by the retry policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from consumers.errors import HandlerError, HandlerTimeout


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """A record for the output topic; ``key=None`` keeps the source record's key."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] | None = None


class Forward:
    """``Forward(b"a", OutputRecord(b"b", key=b"k"))``: records for the output topic."""

    __slots__ = ("records",)

    def __init__(self, *records: OutputRecord | bytes | str) -> None:
        self.records = [_as_output(r) for r in records]

    def __repr__(self) -> str:
        return f"Forward({len(self.records)} records)"


@dataclass(frozen=True, slots=True)
class Drop:
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Retry:
    after: float | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Land:
    """``Land(b'{"clean": 1}')``: the row to land for this record (its lineage stays the record's)."""

    value: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.value, bytes):
            raise TypeError(f"Land takes bytes, not {type(self.value).__name__}")


Outcome = Forward | Drop | Retry | DeadLetter | Land | None


def _as_output(record: OutputRecord | bytes | str) -> OutputRecord:
    if isinstance(record, OutputRecord):
        return record
    if isinstance(record, str):
        return OutputRecord(record.encode())
    if isinstance(record, bytes):
        return OutputRecord(record)
    raise TypeError(f"Forward takes OutputRecord, bytes or str, not {type(record).__name__}")


def outcome_name(outcome: Outcome, error: HandlerError | None) -> str:
    """The label a live tap shows for a handler result."""
    if error is not None:
        return "timeout" if isinstance(error, HandlerTimeout) else "failed"
    return _OUTCOME_NAMES.get(type(outcome), "ok")


_OUTCOME_NAMES: dict[type, str] = {
    Forward: "forward",
    Drop: "drop",
    Retry: "retry",
    DeadLetter: "dead_letter",
    Land: "land",
}
