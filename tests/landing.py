"""Landing test helpers: records produced over several days, and what the lake holds."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
from confluent_kafka import Producer

DAY_MS = 86_400_000
#: 2026-11-18 00:00 UTC; records spread over three days from here.
START_MS = int(datetime(2026, 11, 18, tzinfo=UTC).timestamp() * 1000)


def produce_days(bootstrap: str, topic: str, count: int, partitions: int) -> list[int]:
    """``count`` records, keys ``u<i % 50>``, timestamps rising over three days; returns each
    record's timestamp by its index (the value is ``<index>``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stamps = [START_MS + i * (3 * DAY_MS // count) for i in range(count)]
    for i, stamp in enumerate(stamps):
        producer.produce(
            topic, str(i).encode(), f"u{i % 50}".encode(), partition=i % partitions, timestamp=stamp
        )
    assert producer.flush(30) == 0
    return stamps


def landed(lake: Path) -> list[dict[str, object]]:
    """Every landed row, with its ``event_date`` directory and its file's name."""
    rows: list[dict[str, object]] = []
    for path in sorted((lake / "landed").rglob("*.parquet")):
        day = path.parent.name.removeprefix("event_date=")
        for row in pq.read_table(path).to_pylist():
            rows.append({**row, "event_date": day, "file": path.name})
    return rows


def landing_count_safe(lake: Path) -> int:
    """Rows in complete files (a file being renamed in place is read after the rename)."""
    total = 0
    for path in (lake / "landed").rglob("*.parquet") if lake.exists() else []:
        try:
            total += pq.read_metadata(path).num_rows
        except FileNotFoundError:
            continue
    return total
