"""Which day directories hold a partition's landed files from a position on, without listing
every day of the dataset.

A partition's next owner removes the files at or above its committed position before it lands
those records again (:func:`consumers.landing.files.clear_from`). Files are grouped by the
records' day, so without help that means listing every ``event_date=`` directory of the
dataset, on every assignment of every partition: a cost that grows with the lake's age.

So the sink keeps a small index per partition::

    <lake>/landed/<dataset>/_positions/<source>-p<partition>/<YYYY-MM-DD>   (text: a bound)

The bound is above the first offset of every file the partition has in that day: it is written
(durably, before the file) as the file's first offset plus :data:`HEADROOM`, so the next files
of the day usually fit under it and the marker is rewritten about once per million offsets.
Removing files never lowers a bound; a bound that is too high only costs one directory listed
for nothing. Spark and the lake's readers skip the ``_positions`` directory (its name starts
with ``_``).

A partition whose files were landed before the index existed has no index directory: the first
clear lists every day once and writes the index from what it finds.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import Final

#: How far above a file's first offset its day's bound is set.
HEADROOM: Final = 1_000_000
INDEX_DIR: Final = "_positions"


def index_dir(root: Path, prefix: str, partition: int) -> Path:
    """``root``: the dataset's directory, ``<lake>/landed/<dataset>``."""
    return root / INDEX_DIR / f"{prefix}-p{partition}"


def read_bounds(directory: Path) -> dict[date, int] | None:
    """Each day's bound; None when the partition has no index yet."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    bounds: dict[date, int] = {}
    for name in names:
        try:
            day = date.fromisoformat(name)
            bounds[day] = int((directory / name).read_text())
        except (ValueError, FileNotFoundError):
            continue  # a temporary, or a marker being replaced
    return bounds


def write_bound(directory: Path, day: date, bound: int) -> None:
    """Replace the day's marker atomically and durably (before the file it stands for)."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / day.isoformat()
    # Its own temporary: two writers (threads, or a partition's old and new owner) may race.
    temporary = directory / f".{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with temporary.open("w") as sink:
            sink.write(str(bound))
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, marker)
    except BaseException:
        temporary.unlink(missing_ok=True)  # a full disk fails every retry: leave none behind
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PositionIndex:
    """The sink's side: raise a day's bound before a file that would exceed it is written.
    Remembers the bounds it has read or written, so a file under its bound costs nothing."""

    def __init__(self) -> None:
        self._bounds: dict[Path, dict[date, int]] = {}
        # The sink lands files from several threads at once: one lock per partition, so a slow
        # disk's marker writes of one partition never hold up another's files.
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def note(self, directory: Path, day: date, first: int) -> None:
        with self._guard:
            lock = self._locks.setdefault(directory, threading.Lock())
        with lock:
            self._note(directory, day, first)

    def _note(self, directory: Path, day: date, first: int) -> None:
        with self._guard:
            bounds = self._bounds.setdefault(directory, {})
        if bounds.get(day, -1) >= first:
            return
        # Another owner of the partition may have raised it since: bounds only ever go up.
        on_disk = (read_bounds(directory) or {}).get(day, -1)
        if on_disk >= first:
            bounds[day] = on_disk
            return
        bound = first + HEADROOM
        write_bound(directory, day, bound)
        bounds[day] = bound


def build_index(root: Path, prefix: str, partition: int) -> bool:
    """Index a partition whose files were landed before the index existed, from one listing of
    every day (``root``: the dataset's directory); True if it had to."""
    directory = index_dir(root, prefix, partition)
    if directory.is_dir():
        return False
    pattern = re.compile(re.escape(f"{prefix}-p{partition}-o") + r"(\d+)")
    highest: dict[date, int] = {}
    for path in root.glob(f"event_date=*/{prefix}-p{partition}-o*.parquet"):
        match = pattern.match(path.name)
        day = _day_of(path.parent)
        if match is not None and day is not None:
            highest[day] = max(highest.get(day, -1), int(match.group(1)))
    for day, first in highest.items():
        write_bound(directory, day, first + HEADROOM)
    directory.mkdir(parents=True, exist_ok=True)
    return True


def days_from(root: Path, prefix: str, partition: int, position: int) -> list[date] | None:
    """The days that may hold the partition's files at ``position`` or later (None: no index,
    every day)."""
    bounds = read_bounds(index_dir(root, prefix, partition))
    if bounds is None:
        return None
    return sorted(day for day, bound in bounds.items() if bound >= position)


def in_days(root: Path, days: Sequence[date] | None, names: str) -> Iterator[Path]:
    """Files matching ``names`` in the day directories of ``days``, or of every day."""
    if days is None:
        yield from root.glob(f"event_date=*/{names}")
        return
    for day in days:
        yield from (root / f"event_date={day.isoformat()}").glob(names)


def _day_of(directory: Path) -> date | None:
    try:
        return date.fromisoformat(directory.name.removeprefix("event_date="))
    except ValueError:
        return None
