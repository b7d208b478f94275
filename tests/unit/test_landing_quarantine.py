"""Damaged landed files: found when a partition is assigned, moved aside (kept), named in the
log, and their offsets landed again from the broker; the workload never crash-loops on one."""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path

import pytest

from consumers import ConsumerApp, DamagedFile, SourceIdentity
from consumers.backends.memory import MemoryBroker
from consumers.landing.files import LandedRow, landed_path, trim_from, write_landed
from consumers.landing.quarantine import QUARANTINE_DIR, move_aside, quarantined
from tests.landing import every_offset_once, memory_landing, per_offset, visible

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

SOURCE = SourceIdentity("kafka", "127.0.0.1:9092", "events", "id-1")
DAY = date(2026, 11, 20)
TOPIC = "events"


def land(lake: Path, first: int, count: int) -> Path:
    path = landed_path(lake, "events", DAY, SOURCE, 0, first)
    rows = [LandedRow(0, o, b"k", b"v", 1_795_000_000_000) for o in range(first, first + count)]
    write_landed(path, SOURCE, rows, 0, "w", "h")
    return path


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated: the footer is gone
        lambda data: b"",  # emptied
        lambda data: bytes(len(data)),  # overwritten with zeros
    ],
    ids=["truncated", "empty", "zeros"],
)
def test_a_damaged_file_below_the_position_is_named_not_a_bare_arrow_error(
    tmp_path: Path, damage: object
) -> None:
    land(tmp_path, 0, 10)
    bad = land(tmp_path, 10, 10)
    bad.write_bytes(damage(bad.read_bytes()))  # type: ignore[operator]
    with pytest.raises(DamagedFile) as raised:
        trim_from(tmp_path, "events", SOURCE, 0, 25, since=0)
    assert raised.value.path == str(bad)


def test_a_file_moved_aside_is_kept_under_its_day_and_never_replaced(tmp_path: Path) -> None:
    root = tmp_path / "landed" / "events"
    first = land(tmp_path, 0, 10)
    content = first.read_bytes()
    moved = move_aside(root, first)
    assert moved == root / QUARANTINE_DIR / "event_date=2026-11-20" / first.name
    assert moved.read_bytes() == content and not first.exists()
    again = move_aside(root, land(tmp_path, 0, 5))  # the same name damaged a second time
    assert again.name == f"{first.stem}~q1.parquet" and moved.read_bytes() == content
    assert quarantined(root, [DAY]) == sorted([moved, again])
    assert quarantined(root, [date(2026, 11, 21)]) == []
    assert visible(tmp_path) == []  # Spark's readers skip the quarantine


def fill(broker: MemoryBroker, count: int) -> dict[int, int]:
    broker.create_topic(TOPIC, 2)
    for i in range(count):
        broker.produce(TOPIC, str(i).encode(), f"k{i % 40}".encode())
    return dict(enumerate(broker.end_offsets(TOPIC)))


def damage_a_middle_file(lake: Path, partition: int) -> tuple[Path, int]:
    """Truncate one of the partition's landed files below its committed position; returns it
    and its first offset."""
    files = sorted(
        (p for p in visible(lake) if f"-p{partition}-o" in p.name),
        key=lambda p: int(p.stem.rsplit("-o", 1)[1]),
    )
    assert len(files) >= 4, files
    bad = files[len(files) // 2]
    bad.write_bytes(bad.read_bytes()[:100])
    return bad, int(bad.stem.rsplit("-o", 1)[1])


def quarantine_of(lake: Path, bad: Path) -> Path:
    return lake / "landed" / "events" / QUARANTINE_DIR / bad.parent.name / bad.name


async def test_a_restart_moves_a_damaged_file_aside_and_lands_its_offsets_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the assignment failed with ``ArrowInvalid`` on every restart."""
    broker, lake = MemoryBroker(), tmp_path / "lake"
    ends = fill(broker, 800)
    await ConsumerApp([memory_landing(broker, TOPIC, lake)]).run(until_idle=0.3)
    bad, first = damage_a_middle_file(lake, 0)
    truncated = bad.read_bytes()

    caplog.set_level(logging.INFO, "lanehouse")
    await ConsumerApp([memory_landing(broker, TOPIC, lake)]).run(until_idle=0.3)

    assert quarantine_of(lake, bad).read_bytes() == truncated  # kept as it was found
    assert per_offset(lake) == every_offset_once(ends)  # landed again, once
    assert dict(enumerate(broker.committed_offsets("g", TOPIC))) == ends
    [line] = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert line.startswith(f"workload landing: {TOPIC}[0]: landed file {bad} (offsets {first}-")
    assert str(quarantine_of(lake, bad)) in line and "Parquet magic bytes" in line
    assert f"set back from {ends[0]} to {first}: landed again" in line


async def test_offsets_the_broker_no_longer_holds_are_said_to_be_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker, lake = MemoryBroker(), tmp_path / "lake"
    ends = fill(broker, 800)
    await ConsumerApp([memory_landing(broker, TOPIC, lake)]).run(until_idle=0.3)
    bad, first = damage_a_middle_file(lake, 0)
    broker.delete_before(TOPIC, 0, first + 10)  # retention passed the file's first ten

    caplog.set_level(logging.INFO, "lanehouse")
    await ConsumerApp([memory_landing(broker, TOPIC, lake)]).run(until_idle=0.3)

    assert quarantine_of(lake, bad).exists()
    gone = {(0, o) for o in range(first, first + 10)}
    expected = every_offset_once(ends)
    for key in gone:
        del expected[key]
    assert per_offset(lake) == expected
    [line] = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert f"earliest offset is {first + 10}: offsets {first}-{first + 9} are no longer" in line
    assert "LOST from the lake" in line
