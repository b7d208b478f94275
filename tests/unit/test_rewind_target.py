"""What ``--to`` accepts and refuses, and how a rewind plan reads."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consumers.rewind.plan import Move, RewindPlan
from consumers.rewind.target import RewindTarget, parse_target

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", RewindTarget("earliest")),
        (" LATEST ", RewindTarget("latest")),
        ("-2h", RewindTarget("time", NOW_MS - 7_200_000)),
        ("-90s", RewindTarget("time", NOW_MS - 90_000)),
        ("2026-11-25T08:00:00Z", RewindTarget("time", NOW_MS - 4 * 3_600_000)),
        ("2026-11-25T09:00:00+01:00", RewindTarget("time", NOW_MS - 4 * 3_600_000)),
        ("2026-11-25 08:00:00.250", RewindTarget("time", NOW_MS - 4 * 3_600_000 + 250)),
    ],
)
def test_accepted_targets(text: str, expected: RewindTarget) -> None:
    assert parse_target(text, now=NOW) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2026-11-25T12:00:01Z", "is in the future"),
        ("tomorrow", "cannot read 'tomorrow'"),
        ("-2 days", "cannot read '-2 days'"),
        ("", "cannot read ''"),
        ("1969-12-31T00:00:00Z", "before 1970"),
    ],
)
def test_refused_targets_say_what_is_accepted(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        parse_target(text, now=NOW)
    assert "earliest, latest" in str(caught.value) or "future" in reason


def test_a_plan_reads_per_partition_with_the_total() -> None:
    plan = RewindPlan(
        workload="orders",
        kind="kafka group",
        group="lanehouse.orders",
        target=RewindTarget("time", NOW_MS).describe(),
        moves=(
            Move(topic="t", partition=0, committed=500, new=200, again=300),
            Move(topic="t", partition=1, committed=None, new=0, again=0),
        ),
    )
    assert plan.lines() == [
        "orders: would rewind kafka group lanehouse.orders to 2026-11-25T12:00:00.000Z",
        "  t[0]: 500 -> 200, 300 handled again",
        "  t[1]: nothing committed -> 0, 0 handled again",
        "  total: 300 records handled again",
    ]
