"""Landing test helpers: records produced over several days, and what the lake holds."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka import Producer

from consumers import LandingSettings, RunnerSettings, SourceIdentity, Workload
from consumers.backends.memory import MemoryBroker
from consumers.landing.sink import land_as_is

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


def visible(lake: Path) -> list[Path]:
    """The landed files Spark reads: not under a ``_``/``.`` name (``_quarantine``, ``.tmp``)."""
    root = lake / "landed"
    return [
        path
        for path in sorted(root.rglob("*.parquet"))
        if not any(part.startswith(("_", ".")) for part in path.relative_to(root).parts)
    ]


def landed(lake: Path) -> list[dict[str, object]]:
    """Every landed row Spark reads, with its ``event_date`` directory and its file's name."""
    rows: list[dict[str, object]] = []
    for path in visible(lake):
        day = path.parent.name.removeprefix("event_date=")
        for row in pq.read_table(path).to_pylist():
            rows.append({**row, "event_date": day, "file": path.name})
    return rows


def landing_count_safe(lake: Path) -> int:
    """Rows in complete files (a file being renamed in place is read after the rename)."""
    total = 0
    for path in visible(lake) if lake.exists() else []:
        try:
            total += pq.read_metadata(path).num_rows
        except FileNotFoundError:
            continue
    return total


def per_offset(lake: Path) -> Counter[tuple[int, int]]:
    """How often each ``(partition, offset)`` is in the lake's readable files."""
    return Counter((int(str(r["_partition"])), int(str(r["_offset"]))) for r in landed(lake))


def every_offset_once(ends: dict[int, int]) -> Counter[tuple[int, int]]:
    """What :func:`per_offset` is for a lake holding each partition's ``ends`` exactly once."""
    return Counter({(p, o): 1 for p, end in ends.items() for o in range(end)})


def memory_landing(
    broker: MemoryBroker, topic: str, lake: Path, group: str = "g", **settings: Any
) -> Workload:
    """A landing workload on the in-memory broker: files of 50 rows or 50 ms, fast commits and a
    short drain, so engine faults run in well under a second."""
    name = "landing"
    landing = LandingSettings(lake, "events", name, "spec-1", flush_rows=50, flush_interval=0.05)
    fast: dict[str, Any] = {"concurrency": 20, "commit_interval": 0.05, "drain_timeout": 2.0}
    runner = RunnerSettings(name=name, landing=landing, **{**fast, **settings})
    return Workload(
        runner,
        land_as_is,
        [topic],
        lambda on_commit: broker.consumer(group, on_commit),
        identify=lambda topics: {t: SourceIdentity("kafka", "memory", t, "id-1") for t in topics},
    )
