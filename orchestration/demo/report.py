"""What ``lanehouse demo`` measured and how it shows it: the consuming table (per workload:
records, order, commits, the shared permit pool) and the per-day reconciliation table (produced
= landed = clean + quarantined + duplicates, against what the generator says it made).

Each ``print_*`` returns True when every check in its table passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

from rich.console import Console
from rich.table import Table

from consumers import WorkloadSpec
from orchestration.demo.events import DemoRecord, expected_per_day
from orchestration.platform import landed_key
from orchestration.shop.backfill import DayCounts, RangeRun


@dataclass
class Watched:
    """What sampling one workload during the run saw (every few milliseconds)."""

    pool: str | None = None  # the permit pool it drew from
    peak_permits: int = 0
    completed: int = 0
    first_at: float | None = None  # the last sample before its first completed record
    last_at: float = 0.0  # the first sample that saw its last completed record

    @property
    def per_second(self) -> float:
        if self.first_at is None or self.last_at <= self.first_at:
            return 0.0
        return self.completed / (self.last_at - self.first_at)


@dataclass(frozen=True)
class Outcome:
    """What the demo measured of one workload."""

    label: str
    topic: str
    produced: int
    handled: int
    keys: int
    violations: int
    committed: str  # "<done> / <all> (<what>)"
    committed_all: bool
    watched: Watched


@dataclass(frozen=True)
class DayRow:
    """One day of one stream in the reconciliation table."""

    stream: str
    day: date
    produced: int
    expected_valid: int
    expected_malformed: int
    counts: DayCounts | None  # None: the Spark run reported nothing for this day

    @property
    def ok(self) -> bool:
        c = self.counts
        return (
            c is not None
            and c.landed == self.produced
            and c.clean == self.expected_valid
            and c.quarantined == self.expected_malformed
            and c.duplicates == 0
            and c.unaccounted == 0
        )


def reconciliation_rows(
    records: list[DemoRecord], run: RangeRun, specs: dict[str, WorkloadSpec]
) -> list[DayRow]:
    """What the generator made, beside what the Spark run counted, per stream and day."""
    expected = expected_per_day(records)
    rows = []
    for stream, spec in specs.items():
        assert spec.landing is not None, f"{spec.name} must land (workloads/{spec.name}.yaml)"
        counted = run.reconciliation.get(landed_key(spec.landing.dataset).to_user_string(), {})
        for day in sorted(expected):
            numbers = expected[day]
            rows.append(
                DayRow(
                    stream,
                    day,
                    numbers[f"{stream}_produced"],
                    numbers[f"{stream}_valid"],
                    numbers[f"{stream}_malformed"],
                    counted.get(day),
                )
            )
    return rows


def print_reconciliation(rows: list[DayRow], dead: dict[str, int], console: Console) -> bool:
    """The per-day table; True when every day reconciles and nothing was dead-lettered
    without being accounted for (the demo handlers dead-letter nothing)."""
    table = Table(title="Per day: produced = landed = clean + quarantined + duplicates")
    for column in ("stream", "day", "produced", "landed", "clean", "quarantined", "dupes", "ok"):
        table.add_column(column, justify="left" if column in ("stream", "day") else "right")
    for row in rows:
        c = row.counts
        expected = f"{row.expected_valid:,} clean / {row.expected_malformed:,} malformed"
        table.add_row(
            row.stream,
            row.day.isoformat(),
            f"{row.produced:,}",
            f"{c.landed:,}" if c else "-",
            f"{c.clean:,}" if c else "-",
            f"{c.quarantined:,}" if c else "-",
            f"{c.duplicates:,}" if c else "-",
            _yes(row.ok) if row.ok else f"{_yes(False)} (expected {expected})",
        )
    console.print(table)
    dead_total = sum(dead.values())
    console.print(f"Dead-lettered by the workloads: {dead_total:,}")
    return all(row.ok for row in rows) and dead_total == 0


def print_summary(outcomes: list[Outcome], console: Console) -> bool:
    """One column per workload, checks last; True when every check passed."""
    pools = {outcome.watched.pool for outcome in outcomes}
    shared = len(pools) == 1 and None not in pools
    table = Table(title="Consuming: two workloads, one process, one permit pool")
    table.add_column("measure")
    for outcome in outcomes:
        table.add_column(outcome.label, justify="right", overflow="fold")
    rows: dict[str, Callable[[Outcome], str]] = {
        "topic": lambda o: o.topic,
        "records produced": lambda o: f"{o.produced:,}",
        "records handled": lambda o: f"{o.handled:,}",
        "keys": lambda o: f"{o.keys:,}",
        "order violations": lambda o: str(o.violations),
        "throughput (first to last record)": lambda o: f"{o.watched.per_second:,.0f} msg/s",
        "committed": lambda o: o.committed,
        "permit pool (peak permits held)": lambda o: (
            f"{o.watched.pool} ({o.watched.peak_permits:,})"
        ),
    }
    checks: dict[str, Callable[[Outcome], bool]] = {
        "every record handled": lambda o: o.handled == o.produced,
        "per-key order kept": lambda o: o.violations == 0,
        "everything committed": lambda o: o.committed_all,
        # Every handled record held a permit of its workload's pool (an engine invariant).
        "drew on the shared pool": lambda o: shared and o.handled > 0,
    }
    for name, show in rows.items():
        table.add_row(name, *(show(outcome) for outcome in outcomes))
    for name, check in checks.items():
        table.add_row(name, *(_yes(check(outcome)) for outcome in outcomes))
    console.print(table)
    return all(check(outcome) for check in checks.values() for outcome in outcomes)


def _yes(ok: bool) -> str:
    return "[green]yes[/green]" if ok else "[red]NO[/red]"
