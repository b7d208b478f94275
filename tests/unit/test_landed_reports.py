"""A landed day's materialization counts the whole day from the lake, not the last report's
files: other runs' files count, a replaced file counts once, a removed one not at all."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from consumers import SourceIdentity
from consumers.landing.files import LandedRow, landed_path, write_landed
from consumers.landing.sink import LandedFile
from consumers.landing.totals import DayTotals
from orchestration.workloads.reporting import landed_materializations

pytestmark = pytest.mark.unit

DAY = date(2026, 11, 20)
SOURCE = SourceIdentity("kafka", "127.0.0.1:9092", "clicks", "id")


def land(lake: Path, partition: int, first: int, rows: int) -> LandedFile:
    path = landed_path(lake, "events", DAY, SOURCE, partition, first)
    batch = [LandedRow(partition, first + i, b"k", b"v", 1_763_600_000_000) for i in range(rows)]
    write_landed(path, SOURCE, batch, 0, "lander", "hash")
    return LandedFile("events", DAY, path, "clicks", partition, first, first + rows - 1, rows)


def report(files: list[LandedFile], totals: DayTotals) -> dict[str, object]:
    [event], outside = landed_materializations(files, "lander", "hash", totals)
    assert outside == [] and event.partition == DAY.isoformat()
    return {k: v.value for k, v in event.metadata.items()}


def test_each_report_counts_the_day_as_the_lake_holds_it(tmp_path: Path) -> None:
    totals = DayTotals()
    first = report([land(tmp_path, 0, 0, 100)], totals)
    assert (first["dagster/row_count"], first["files"], first["new_rows"]) == (100, 1, 100)

    land(tmp_path, 1, 0, 40)  # another replica's file, reported by its own run
    second = report([land(tmp_path, 0, 100, 25)], totals)
    assert (second["dagster/row_count"], second["files"]) == (165, 3)
    assert (second["new_rows"], second["new_files"]) == (25, 1)

    # A replay after a crash replaces a file under its name; a rewind removes one.
    replayed = land(tmp_path, 0, 100, 30)
    land(tmp_path, 1, 0, 40).path.unlink()
    third = report([replayed], totals)
    assert (third["dagster/row_count"], third["files"]) == (130, 2)


def test_temporaries_and_markers_are_not_counted(tmp_path: Path) -> None:
    file = land(tmp_path, 0, 0, 10)
    (file.path.parent / f".{file.path.name}.tmp").write_bytes(file.path.read_bytes())
    (file.path.parent / "_SUCCESS").write_bytes(b"")
    assert DayTotals().of(file.path.parent) == (10, 1)
    assert DayTotals().of(tmp_path / "no-such-day") == (0, 0)
