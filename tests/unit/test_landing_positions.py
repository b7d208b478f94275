"""The index of a partition's landed days: a partition's next owner lists only the days that
may hold its files from the committed position on, not every day of the lake."""

from __future__ import annotations

import os
from datetime import date, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from consumers import SourceIdentity
from consumers.landing.files import (
    LandedRow,
    clear_from,
    ensure_index,
    landed_path,
    remove_stale_temporaries,
    trim_from,
    write_landed,
)
from consumers.landing.positions import HEADROOM, PositionIndex, index_dir, read_bounds

pytestmark = pytest.mark.unit

SOURCE = SourceIdentity("kafka", "127.0.0.1:9092", "clicks", "id")
DAY = date(2026, 11, 1)


def land(lake: Path, day: date, first: int, index: PositionIndex | None = None) -> Path:
    """A one-row file of partition 0 at ``first``, its day's bound raised first unless no
    ``index`` is given (a file the index does not know of)."""
    if index is not None:
        index.note(positions(lake), day, first)
    path = landed_path(lake, "events", day, SOURCE, 0, first)
    write_landed(path, SOURCE, [LandedRow(0, first, b"k", b"v", 0)], 0, "w", "h")
    return path


def positions(lake: Path) -> Path:
    return index_dir(lake / "landed" / "events", SOURCE.file_prefix(), 0)


def test_bounds_are_raised_before_files_and_rarely(tmp_path: Path) -> None:
    index = PositionIndex()
    land(tmp_path, DAY, 10, index)
    land(tmp_path, DAY + timedelta(days=1), 20, index)
    assert read_bounds(positions(tmp_path)) == {
        DAY: 10 + HEADROOM,
        DAY + timedelta(days=1): 20 + HEADROOM,
    }
    marker = positions(tmp_path) / DAY.isoformat()
    written = marker.stat().st_mtime_ns
    land(tmp_path, DAY, 500_000, index)  # under the bound: nothing written
    assert marker.stat().st_mtime_ns == written
    land(tmp_path, DAY, HEADROOM + 11, PositionIndex())  # a new owner, past it
    assert read_bounds(positions(tmp_path))[DAY] == 2 * HEADROOM + 11  # type: ignore[index]


def test_a_clear_lists_only_the_days_that_may_hold_files_from_the_position(
    tmp_path: Path,
) -> None:
    index = PositionIndex()
    old = [land(tmp_path, DAY + timedelta(days=d), d * 10, index) for d in range(30)]
    recent = land(tmp_path, DAY + timedelta(days=30), 5 * HEADROOM, index)
    # A file the index does not know of, in an old day: not looked at, so it stays. (Before the
    # index, every day was listed and it went.)
    stray = land(tmp_path, DAY, 3 * HEADROOM)
    assert clear_from(tmp_path, "events", SOURCE, 0, 2 * HEADROOM) == 1
    assert not recent.exists()
    assert stray.exists() and all(path.exists() for path in old)
    # From offset 0 every indexed day is listed: the 30 old files and the stray one go.
    assert clear_from(tmp_path, "events", SOURCE, 0, 0) == 31


def test_a_lake_landed_before_the_index_is_indexed_once(tmp_path: Path) -> None:
    files = [land(tmp_path, DAY + timedelta(days=d), 100 * d) for d in range(3)]
    land(tmp_path, DAY, 50)
    assert ensure_index(tmp_path, "events", SOURCE, 0) is True
    assert read_bounds(positions(tmp_path)) == {
        DAY: 50 + HEADROOM,
        DAY + timedelta(days=1): 100 + HEADROOM,
        DAY + timedelta(days=2): 200 + HEADROOM,
    }
    assert ensure_index(tmp_path, "events", SOURCE, 0) is False
    assert clear_from(tmp_path, "events", SOURCE, 0, 100) == 2
    assert files[0].exists() and not files[1].exists() and not files[2].exists()
    # A partition that never landed anything gets an empty index: nothing to list.
    empty = SourceIdentity("kafka", "127.0.0.1:9092", "other", "id")
    assert ensure_index(tmp_path, "events", empty, 0) is True
    assert clear_from(tmp_path, "events", empty, 0, 0) == 0


def test_stale_temporaries_are_looked_for_in_the_indexed_days_only(tmp_path: Path) -> None:
    index = PositionIndex()
    land(tmp_path, DAY, 10, index)
    land(tmp_path, DAY + timedelta(days=1), 5 * HEADROOM, index)
    left = []
    for day, first in ((DAY, 20), (DAY + timedelta(days=1), 5 * HEADROOM + 1)):
        path = landed_path(tmp_path, "events", day, SOURCE, 0, first)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_bytes(b"half a file")
        os.utime(temporary, (0, 0))
        left.append(temporary)
    removed = remove_stale_temporaries(
        tmp_path, "events", SOURCE, 0, now=10_000, position=HEADROOM * 2
    )
    assert removed == 1 and left[0].exists() and not left[1].exists()
    assert remove_stale_temporaries(tmp_path, "events", SOURCE, 0, now=10_000) == 1  # every day


def test_a_file_holding_records_past_the_position_is_cut_back_to_it(tmp_path: Path) -> None:
    """Records complete out of offset order: a file cut while offset 5 still ran holds 3, 4 and
    6, 7 of other keys; 5 lands in the next file. A crash with the position at 5: the next
    owner handles 5, 6, 7 again, so the earlier file keeps only 3 and 4."""
    index = PositionIndex()
    index.note(positions(tmp_path), DAY, 3)
    straddling = landed_path(tmp_path, "events", DAY, SOURCE, 0, 3)
    rows = [LandedRow(0, offset, b"k", b"v", 0) for offset in (3, 4, 6, 7)]
    write_landed(straddling, SOURCE, rows, 0, "w", "h")
    below = land(tmp_path, DAY, 0, index)  # ends below the position: its footer says so
    untouched = below.stat().st_mtime_ns
    assert trim_from(tmp_path, "events", SOURCE, 0, 5, since=0) == 1
    assert pq.read_table(straddling)["_offset"].to_pylist() == [3, 4]
    assert below.stat().st_mtime_ns == untouched  # not rewritten
    # Far below ``since``, files are not looked at.
    write_landed(straddling, SOURCE, rows, 0, "w", "h")
    assert trim_from(tmp_path, "events", SOURCE, 0, 5, since=4) == 0
