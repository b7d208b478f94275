"""`make demo` (the README's main command) stays true: it runs, its checks pass, and they can fail."""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path

import pulsar
import pytest
from rich.console import Console

from consumers.dev.embedded.pulsar import PULSAR_TEST_CLIENT_KWARGS, PulsarLiteBroker
from orchestration.demo.events import generate
from orchestration.demo.report import DayRow, Outcome, Watched, print_reconciliation, print_summary
from orchestration.demo.runner import demo_days, pulsar_unacknowledged, run_demo
from orchestration.shop.backfill import DayCounts
from tests.backends import PulsarBackend

# Whole-platform runs share the 2 cores with the other workers (make test): about 4 to 5
# minutes then, past the default 300 s timeout, which is for a hang, not a slow machine.
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]


def test_demo_runs_end_to_end_and_reconciles(tmp_path: Path) -> None:
    out = io.StringIO()
    ok = run_demo(
        Console(file=out, width=200),
        state=tmp_path,
        days=2,
        users=30,
        sessions=1.0,
        malformed=0.05,
        partitions=2,
    )
    text = out.getvalue()
    assert ok, text
    assert "clickstream (Kafka)" in text and "orders (Pulsar)" in text
    assert "persistent://public/default/orders" in text
    assert "NO" not in text
    days = demo_days(2)
    records = list(generate(days, users=30, sessions_per_user_per_day=1.0, malformed_fraction=0.05))
    clicks = sum(r.stream == "clicks" for r in records)
    assert f"{clicks:,} / {clicks:,} (offsets)" in text
    for day in days:  # one reconciled row per stream and day
        for stream in ("clicks", "orders"):
            [row] = [
                line
                for line in text.splitlines()
                if line.startswith(f"│ {stream}") and str(day) in line
            ]
            assert row.rstrip(" │").endswith("yes"), row
    lake = tmp_path / "demo" / "lake"
    assert {p.name for p in (lake / "landed").iterdir()} == {"clickstream", "orders"}
    assert (lake / "tables" / "clean_clicks").is_dir()


def day_row(**changes: object) -> DayRow:
    counts = DayCounts(landed=10, clean=8, quarantined=2, duplicates=0, unaccounted=0)
    fields: dict[str, object] = {
        "stream": "clicks",
        "day": date(2026, 11, 20),
        "produced": 10,
        "expected_valid": 8,
        "expected_malformed": 2,
        "counts": counts,
        **changes,
    }
    return DayRow(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"produced": 11},
        {"expected_valid": 9, "expected_malformed": 1},
        {"counts": None},
        {"counts": DayCounts(landed=10, clean=7, quarantined=2, duplicates=1, unaccounted=0)},
        {"counts": DayCounts(landed=10, clean=8, quarantined=1, duplicates=0, unaccounted=1)},
    ],
    ids=str,
)
def test_reconciliation_fails_when_one_day_does_not_add_up(bad: dict[str, object]) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    assert print_reconciliation([day_row(), day_row(stream="orders")], {"w": 0}, console)
    assert not print_reconciliation([day_row(), day_row(**bad)], {"w": 0}, console)
    assert "NO (expected" in out.getvalue()
    assert not print_reconciliation([day_row()], {"w": 1}, console)  # an unexplained dead letter


def outcome(**changes: object) -> Outcome:
    fields: dict[str, object] = {
        "label": "w (Kafka)",
        "topic": "t",
        "produced": 10,
        "handled": 10,
        "keys": 2,
        "violations": 0,
        "committed": "10 / 10",
        "committed_all": True,
        "watched": Watched(pool="default", peak_permits=3),
        **changes,
    }
    return Outcome(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"handled": 9},
        {"violations": 1},
        {"committed_all": False},
        {"watched": Watched(pool="other", peak_permits=3)},
        {"watched": Watched(pool=None)},
    ],
    ids=str,
)
def test_summary_fails_when_one_workload_misses_one_check(bad: dict[str, object]) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    assert print_summary([outcome(), outcome(label="v (Pulsar)")], console)
    assert not print_summary([outcome(), outcome(label="v (Pulsar)", **bad)], console)
    assert "NO" in out.getvalue()


def test_pulsar_unacknowledged_counts_what_the_subscription_left(
    pulsar_broker: PulsarLiteBroker,
) -> None:
    backend = PulsarBackend(pulsar_broker)  # unbatched: each message is acknowledged alone
    topic = backend.make_topic(1)
    backend.produce(topic, [(b"k", str(i).encode()) for i in range(10)])
    url = pulsar_broker.url
    assert pulsar_unacknowledged(url, topic, "sub") == 10  # a new subscription starts earliest

    def acknowledge(below: int) -> None:
        client = pulsar.Client(url, **PULSAR_TEST_CLIENT_KWARGS)
        try:
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(10 - len(acked)):
                msg = consumer.receive(5000)
                if int(msg.data()) < below:
                    consumer.acknowledge(msg)
                    acked.add(int(msg.data()))
            consumer.close()
        finally:
            client.close()

    acked: set[int] = set()
    acknowledge(below=6)
    assert pulsar_unacknowledged(url, topic, "sub") == 4
    assert pulsar_unacknowledged(url, topic, "sub") == 4  # it acknowledges only its marker
    acknowledge(below=10)
    assert pulsar_unacknowledged(url, topic, "sub") == 0
