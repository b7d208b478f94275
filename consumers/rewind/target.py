"""Where a rewind goes: ``earliest``, ``latest``, an ISO datetime or a span back from now.

One parser for the command line and the Dagster job, so both accept and refuse the same text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from consumers.backends.admin import StartAt
from consumers.config.loading import parse_duration

__all__ = ["RewindTarget", "parse_target"]

_HELP = (
    "use earliest, latest, an ISO datetime such as 2026-11-25T08:00:00Z "
    "(no zone means UTC) or a span back from now such as -2h, -30m, -90s"
)


@dataclass(frozen=True)
class RewindTarget:
    """``at_ms`` (epoch milliseconds) is set for ``kind == "time"`` only."""

    kind: Literal["earliest", "latest", "time"]
    at_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.kind == "time") != (self.at_ms is not None):
            raise ValueError(f"a rewind target of kind {self.kind!r} with at_ms={self.at_ms}")

    def start_at(self) -> StartAt:
        """The target in the brokers' words (:class:`~consumers.backends.admin.GroupRewinder`)."""
        if self.kind == "earliest" or self.kind == "latest":
            return self.kind
        assert self.at_ms is not None  # __post_init__
        return self.at_ms

    def describe(self) -> str:
        if self.at_ms is None:
            return self.kind
        moment = datetime.fromtimestamp(self.at_ms / 1000, tz=UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_target(text: str, now: datetime | None = None) -> RewindTarget:
    """Parse ``text``; ``ValueError`` with the accepted forms for anything else or a future time."""
    now = now or datetime.now(tz=UTC)
    value = text.strip()
    if value.lower() in ("earliest", "latest"):
        return RewindTarget(kind="earliest" if value.lower() == "earliest" else "latest")
    if value.startswith("-"):
        try:
            span = parse_duration(value[1:])
        except ValueError:
            raise ValueError(f"cannot read {text!r} as a rewind target: {_HELP}") from None
        moment = now.timestamp() - span
    else:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"cannot read {text!r} as a rewind target: {_HELP}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        moment = parsed.timestamp()
        if moment > now.timestamp():
            raise ValueError(
                f"{text!r} is in the future (now is {now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}): "
                "a rewind goes back to records that exist; use latest to skip to the end"
            )
    if moment < 0:
        raise ValueError(f"{text!r} is before 1970: {_HELP}")
    return RewindTarget(kind="time", at_ms=int(moment * 1000))
