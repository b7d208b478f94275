"""The crash journal's rules (``consumers.engine.crashes``), file by file, without a process
dying: which deaths count, when a window opens, when a record is set aside."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from consumers.engine.crashes import CrashJournal, Mark

pytestmark = pytest.mark.unit


def die(journal: CrashJournal, topic: str = "t", partition: int = 0) -> None:
    """The holder dies: its file stays as it is, its descriptor goes with the process."""
    os.close(journal._fds.pop((topic, partition)))


def test_deaths_count_only_while_the_position_stays(tmp_path: Path) -> None:
    journal = CrashJournal(tmp_path, "w", window=100)
    assert journal.open("t", 0, position=10) is None
    die(journal)
    assert journal.open("t", 0, position=50) is None  # died after moving on: first in a row
    die(journal)
    assert journal.open("t", 0, position=50) is not None  # second in a row, no progress
    journal.close("t", 0)
    assert not list((tmp_path / "w").iterdir()), "an assignment that ended alive leaves no file"
    assert journal.open("t", 0, position=50) is None


def test_a_record_is_set_aside_after_two_deaths_while_it_ran_alone(tmp_path: Path) -> None:
    journal = CrashJournal(tmp_path, "w", window=100)
    journal.open("t", 0, None)
    die(journal)
    journal.open("t", 0, None)
    die(journal)
    suspect = journal.open("t", 0, None)
    assert suspect is not None and not suspect.culprit(7)
    suspect.running(7)
    die(journal)  # while 7 ran alone: named once
    suspect = journal.open("t", 0, None)
    assert suspect is not None and suspect.mark.named == 7 and not suspect.culprit(7)
    suspect.running(7)
    die(journal)  # again while 7 ran: set aside
    suspect = journal.open("t", 0, None)
    assert suspect is not None and suspect.culprit(7)
    assert "2 deaths while it ran alone" in suspect.reason()


def test_a_named_record_that_returns_is_cleared(tmp_path: Path) -> None:
    mark = Mark(deaths=3, named=7, strikes=1)
    journal = CrashJournal(tmp_path, "w", window=100)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "t-0").write_text(
        '{"deaths": 3, "running": null, "named": 7, "strikes": 1, "position": null}'
    )
    suspect = journal.open("t", 0, None)
    assert suspect is not None and suspect.mark.named == mark.named
    suspect.running(7)
    suspect.ran(7)
    assert suspect.mark.named is None and suspect.mark.strikes == 0


def test_a_detached_suspect_never_writes_to_a_reused_descriptor(tmp_path: Path) -> None:
    journal = CrashJournal(tmp_path, "w", window=100)
    for _ in range(2):
        journal.open("t", 0, None)
        die(journal)
    suspect = journal.open("t", 0, None)
    assert suspect is not None
    suspect.detach()
    journal.close("t", 0)
    other = tmp_path / "other"
    with other.open("wb") as f:  # likely given the descriptor just closed
        suspect.running(3)
        suspect.ran(3)
        f.write(b"data")
    assert other.read_bytes() == b"data"


def test_an_unreadable_file_counts_as_one_death(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "t-0").write_bytes(b"\x00garbage")
    journal = CrashJournal(tmp_path, "w", window=100)
    assert journal.open("t", 0, 5) is None
    die(journal)
    assert journal.open("t", 0, 5) is not None
