"""A workload's counters: plain integers bumped on the hot path and read by the metrics
collector at scrape time (no locks, no metric objects per record)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class WorkloadCounters:
    """Plain integer counters, bumped on the hot path and read by the metrics collector."""

    consumed: int = 0
    completed: int = 0
    failed: int = 0
    timeouts: int = 0
    skipped: int = 0
    client_errors: int = 0
    dropped_unassigned: int = 0
    dropped_on_revoke: int = 0
    late_completions: int = 0
    redelivered: int = 0
    retries: int = 0
    dead_lettered: int = 0
    dead_letter_write_failures: int = 0
    dropped_by_handler: int = 0
    parked: int = 0
    forwarded: int = 0
    superseded: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
