"""The landing sink on a real filesystem: when files are cut, what they hold, what their names
guarantee, and that records complete only once their file is in place."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from consumers import LandingSettings, SourceIdentity
from consumers.clock import ManualClock
from consumers.landing.files import (
    LandedRow,
    clear_from,
    landed_path,
    remove_stale_temporaries,
)
from consumers.landing.positions import INDEX_DIR
from consumers.landing.sink import LandingSink
from tests.helpers import until

pytestmark = pytest.mark.unit

SOURCE = SourceIdentity("kafka", "127.0.0.1:9092", "clicks", "id-1")
DAY1 = int(datetime(2026, 11, 20, 12, tzinfo=UTC).timestamp() * 1000)
DAY2 = int(datetime(2026, 11, 21, 0, 0, 1, tzinfo=UTC).timestamp() * 1000)


def row(partition: int, offset: int, at: int = DAY1) -> LandedRow:
    return LandedRow(partition, offset, f"u{offset}".encode(), f'{{"n":{offset}}}'.encode(), at)


class Harness:
    def __init__(self, lake: Path, **settings: float) -> None:
        self.clock = ManualClock()
        base = LandingSettings(lake, "clickstream", "clicks-workload", "abc123")
        self.sink = LandingSink(LandingSettings(**{**base.__dict__, **settings}), self.clock)
        self.done: list[tuple[int, int]] = []
        self.lake = lake

    def add(self, source: SourceIdentity, r: LandedRow) -> None:
        def done(error: str | None) -> None:
            assert error is None
            # Completion comes only once the record's file is in place.
            files = list((self.lake / "landed").rglob(f"*-p{r.partition}-o*.parquet"))
            assert any(r.offset in pq.read_table(f)["_offset"].to_pylist() for f in files)
            self.done.append((r.partition, r.offset))

        self.sink.add(source, r, done)

    async def settle(self) -> None:
        while self.sink._writes:
            await asyncio.gather(*list(self.sink._writes))


def parquet_files(lake: Path) -> list[Path]:
    return sorted(lake.rglob("*.parquet"))


def files(lake: Path) -> list[str]:
    """Every file of the lake but the index of days (:mod:`consumers.landing.positions`)."""
    return sorted(
        str(p.relative_to(lake))
        for p in lake.rglob("*")
        if p.is_file() and INDEX_DIR not in p.parts
    )


async def test_a_full_buffer_lands_one_file_named_by_its_first_offset(tmp_path: Path) -> None:
    h = Harness(tmp_path, flush_rows=3)
    for offset in (7, 8):
        h.add(SOURCE, row(0, offset))
    assert (h.sink._writes, h.sink.buffered) == (set(), 2)  # flushes start inside add()
    h.add(SOURCE, row(0, 9))
    await h.settle()
    path = landed_path(tmp_path, "clickstream", datetime(2026, 11, 20).date(), SOURCE, 0, 7)
    assert files(tmp_path) == [str(path.relative_to(tmp_path))]
    assert "event_date=2026-11-20" in str(path) and path.name.endswith("-p0-o7.parquet")
    table = pq.read_table(path).to_pylist()
    assert [r["_offset"] for r in table] == [7, 8, 9]
    first = table[0]
    assert (first["value"], first["_key"]) == (b'{"n":7}', b"u7")
    assert (first["_source_kind"], first["_cluster"], first["_topic"]) == (
        "kafka",
        "127.0.0.1:9092",
        "clicks",
    )
    assert (first["_topic_id"], first["_partition"], first["_workload"]) == (
        "id-1",
        0,
        "clicks-workload",
    )
    assert first["_spec_hash"] == "abc123"
    assert first["_timestamp"] == datetime(2026, 11, 20, 12, tzinfo=UTC)
    assert sorted(h.done) == [(0, 7), (0, 8), (0, 9)]


async def test_the_interval_days_partitions_revoke_and_close_each_cut_files(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, flush_rows=1000, flush_interval=60)
    h.add(SOURCE, row(0, 1))
    h.add(SOURCE, row(0, 2, DAY2))  # next day: its own file
    h.add(SOURCE, row(1, 5))
    await until(lambda: h.clock.sleeping == 1)  # the flush timer is armed
    h.clock.advance(59)
    assert h.clock.sleeping == 1 and h.sink.buffered == 3  # not due yet
    h.clock.advance(1)
    await until(lambda: h.sink.buffered == 0)
    await h.settle()
    assert sorted(h.done) == [(0, 1), (0, 2), (1, 5)]
    assert [Path(f).parent.name for f in files(tmp_path)] == [
        "event_date=2026-11-20",
        "event_date=2026-11-20",
        "event_date=2026-11-21",
    ]

    h.add(SOURCE, row(0, 3))
    h.add(SOURCE, row(1, 6))
    h.sink.flush_partition("clicks", 1)  # revoked: only its rows land now
    await h.settle()
    assert (0, 3) not in h.done and (1, 6) in h.done
    await h.sink.close()
    assert (0, 3) in h.done and h.sink.buffered == 0
    assert not any(".tmp" in f for f in files(tmp_path))
    assert (h.sink.files_landed, h.sink.rows_landed) == (5, 5)


async def test_a_replay_replaces_its_file_and_a_recreated_topic_never_meets_the_old_one(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, flush_rows=2)
    h.add(SOURCE, row(0, 0))
    h.add(SOURCE, row(0, 1))
    h.add(SOURCE, row(0, 2))
    h.add(SOURCE, row(0, 3))
    await h.settle()
    assert len(files(tmp_path)) == 2
    # A crash before the commit of offset 2; the replay starts there and cuts differently.
    assert clear_from(tmp_path, "clickstream", SOURCE, 0, 2) == 1
    h2 = Harness(tmp_path, flush_rows=1)
    h2.add(SOURCE, row(0, 2))
    h2.add(SOURCE, row(0, 3))
    await h2.settle()
    landed = [o for f in parquet_files(tmp_path) for o in pq.read_table(f)["_offset"].to_pylist()]
    assert sorted(landed) == [0, 1, 2, 3], "a replayed record landed twice"

    recreated = SourceIdentity("kafka", "127.0.0.1:9092", "clicks", "id-2")
    h3 = Harness(tmp_path, flush_rows=2)
    h3.add(recreated, row(0, 0))
    h3.add(recreated, row(0, 1))
    await h3.settle()
    starting_at_0 = [f for f in parquet_files(tmp_path) if f.name.endswith("-p0-o0.parquet")]
    assert len(starting_at_0) == 2, "the new topic overwrote the old"
    assert clear_from(tmp_path, "clickstream", recreated, 0, 0) == 1
    assert len(parquet_files(tmp_path)) == 3


async def test_landed_files_are_taken_once_and_put_back_ones_come_first(tmp_path: Path) -> None:
    h = Harness(tmp_path, flush_rows=1)
    for offset in (1, 2, 3):
        h.add(SOURCE, row(0, offset))
        await h.settle()
    taken = h.sink.take_landed()
    assert [(f.first_offset, f.last_offset, f.rows) for f in taken] == [
        (1, 1, 1),
        (2, 2, 1),
        (3, 3, 1),
    ]
    assert h.sink.take_landed() == []
    h.add(SOURCE, row(0, 4))
    await h.settle()
    h.sink.put_back(taken[1:])  # a report that failed after taking them
    assert [f.first_offset for f in h.sink.take_landed()] == [2, 3, 4]


def test_stale_temporary_files_of_a_partition_are_removed_young_and_other_ones_kept(
    tmp_path: Path,
) -> None:
    """What a kill mid-write leaves: Pulsar names hold a content digest, so no later write of
    the same name would ever replace it."""
    now = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
    pulsar = SourceIdentity("pulsar", "pulsar://127.0.0.1:6650", "persistent://t/n/orders", "")
    day = datetime(2026, 11, 20, tzinfo=UTC).date()

    def temporary(partition: int, first: int, age: float, source: SourceIdentity = pulsar) -> Path:
        final = landed_path(tmp_path, "orders", day, source, partition, first, content="c0ffee")
        final.parent.mkdir(parents=True, exist_ok=True)
        path = final.with_name(f".{final.name}.tmp")
        path.write_bytes(b"half a file")
        os.utime(path, (now - age, now - age))
        return path

    stale = temporary(0, 100, age=3600)
    young = temporary(0, 200, age=5)
    other_partition = temporary(1, 100, age=3600)
    other_source = temporary(0, 100, age=3600, source=SOURCE)
    assert remove_stale_temporaries(tmp_path, "orders", pulsar, 0, now) == 1
    assert not stale.exists()
    assert young.exists() and other_partition.exists() and other_source.exists()
    assert remove_stale_temporaries(tmp_path, "nothing_landed_yet", pulsar, 0, now) == 0
