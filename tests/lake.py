"""Lake test helpers: land demo records as the consumers' landing sink does, read tables back."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from consumers import SourceIdentity
from consumers.landing.files import LandedRow, landed_path, write_landed
from orchestration.demo.events import DemoRecord
from orchestration.lake import tables as lake_tables
from orchestration.shop.tables import TABLES

DATASETS = {"clicks": "clickstream", "orders": "orders"}
SOURCES = {
    "clicks": SourceIdentity("kafka", "127.0.0.1:9092", "clickstream.events", "topic-id-1"),
    "orders": SourceIdentity("pulsar", "pulsar://127.0.0.1:6650", "orders", ""),
}
PARTITIONS = 3
LANDED_AT_MS = 1_795_000_000_000


@dataclass
class Landed:
    """What was landed: the files per (dataset, day), and the replayed rows per (dataset, day)."""

    files: dict[tuple[str, date], list[Path]] = field(default_factory=dict)
    replayed: dict[tuple[str, date], int] = field(default_factory=dict)


def land(lake: Path, records: Iterable[DemoRecord], *, replay_first_file: bool = True) -> Landed:
    """One file per (stream, day, partition); with ``replay_first_file``, each (stream, day)'s
    first file is landed a second time under another name, as a replay after a crash can."""
    batches: dict[tuple[str, date, int], list[LandedRow]] = defaultdict(list)
    offsets: dict[tuple[str, int], int] = defaultdict(int)
    for record in records:
        partition = zlib.crc32(record.key) % PARTITIONS
        offset = offsets[record.stream, partition]
        offsets[record.stream, partition] += 1
        row = LandedRow(partition, offset, record.key, record.value, record.timestamp_ms)
        batches[record.stream, record.day, partition].append(row)
    landed = Landed()
    for (stream, day, partition), rows in sorted(batches.items()):
        dataset, source = DATASETS[stream], SOURCES[stream]
        path = landed_path(lake, dataset, day, source, partition, rows[0].offset)
        write_landed(path, source, rows, LANDED_AT_MS, f"demo-{stream}", "spec-1")
        files = landed.files.setdefault((dataset, day), [])
        files.append(path)
        if replay_first_file and len(files) == 1:
            again = landed_path(lake, dataset, day, source, partition, rows[0].offset + 10**6)
            write_landed(again, source, rows, LANDED_AT_MS + 60_000, f"demo-{stream}", "spec-1")
            landed.replayed[dataset, day] = len(rows)
    return landed


def snapshot(
    lake: Path, days: Sequence[date], names: Iterable[str] = TABLES
) -> dict[tuple[str, date], list[tuple[Any, ...]]]:
    """Every table's rows per day, sorted, for comparing two lakes or two runs.

    Read with pyarrow (a Spark job per table and day would cost more than the runs).
    """
    result = {}
    for name in names:
        for day in days:
            rows: list[tuple[Any, ...]] = []
            for path in lake_tables.visible_files(lake_tables.day_dir(lake / "tables" / name, day)):
                rows += [tuple(r.values()) for r in pq.read_table(path).to_pylist()]
            result[name, day] = sorted(rows, key=repr)
    return result


def day_files(lake: Path, name: str, day: date) -> list[str]:
    return [
        p.name for p in lake_tables.visible_files(lake_tables.day_dir(lake / "tables" / name, day))
    ]
