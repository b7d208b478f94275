"""Landed files that cannot be read: found, named, and moved aside (kept, never deleted).

A landed Parquet file can be damaged after it was written: truncated by a failing disk,
overwritten by a person or a tool. Reading it then raises (``ArrowInvalid: Parquet magic bytes
not found in footer``), and a partition's next owner reads the footers of the files just below
its committed position (:func:`consumers.landing.files.trim_from`). Instead of failing there on
every restart, the engine moves the file to the dataset's quarantine::

    <lake>/landed/<dataset>/_quarantine/event_date=<day>/<file name>

Spark and the lake's readers skip it (the directory's name starts with ``_``), the Spark assets
report it, and the engine sets the partition's position back to the file's first offset so the
broker lands those records again (:meth:`consumers.engine.lake.WorkloadLake.prepare`). A file is moved
with one rename (no disk space needed), never rewritten or removed; restoring it is moving it
back (``docs/lake.md``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Final

from consumers.errors import DamagedFile

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "QUARANTINE_DIR",
    "first_offset",
    "move_aside",
    "next_first_offset",
    "quarantined",
    "read_footer",
    "read_rows",
]

QUARANTINE_DIR: Final = "_quarantine"
#: A landed file's name: ``<source>-p<partition>-o<first offset>[-<digest>].parquet``.
_NAME: Final = re.compile(r"(?P<prefix>.+-p\d+-o)(?P<first>\d+)(?:-[0-9a-f]+)?\.parquet")
#: Errors pyarrow raises for a file whose bytes are not a readable Parquet file (``ArrowInvalid``
#: is a ``ValueError``, ``ArrowIOError`` an ``OSError``).
_UNREADABLE = (OSError, ValueError)


def read_footer(path: Path) -> pq.FileMetaData:
    """The file's footer; :class:`DamagedFile` when it cannot be read or has no ``_offset``
    column (``FileNotFoundError`` passes: a file removed meanwhile is not damaged)."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
    except FileNotFoundError:
        raise
    except _UNREADABLE as exc:
        raise DamagedFile(str(path), str(exc)) from exc
    if "_offset" not in metadata.schema.names:
        raise DamagedFile(str(path), "no _offset column: not a landed file")
    return metadata


def read_rows(path: Path) -> pa.Table:
    """Every row of the file; :class:`DamagedFile` when they cannot be read."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except FileNotFoundError:
        raise
    except _UNREADABLE as exc:
        raise DamagedFile(str(path), str(exc)) from exc


def first_offset(path: Path) -> int | None:
    """The first offset a landed file's name gives (None: not a landed file's name)."""
    match = _NAME.fullmatch(path.name)
    return int(match.group("first")) if match else None


def next_first_offset(path: Path) -> int | None:
    """The first offset of the next file of the same partition in the same day directory: the
    bound of a damaged file's offsets when its footer is gone (None: it is the last one)."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        return None
    prefix, first = match.group("prefix"), int(match.group("first"))
    after = [
        offset
        for sibling in path.parent.glob(f"{prefix}*.parquet")
        if (offset := first_offset(sibling)) is not None and offset > first
    ]
    return min(after, default=None)


def move_aside(dataset_root: Path, path: Path) -> Path:
    """Move a landed file into the dataset's quarantine, under its day, durably; return where
    it went. A name already taken there gets a ``~q<n>`` suffix: nothing is replaced."""
    directory = dataset_root / QUARANTINE_DIR / path.parent.name
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / path.name
    attempt = 0
    while target.exists():
        attempt += 1
        target = directory / f"{path.stem}~q{attempt}{path.suffix}"
    os.replace(path, target)
    for changed in (directory, path.parent):
        fd = os.open(changed, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return target


def quarantined(dataset_root: Path, days: Sequence[date]) -> list[Path]:
    """The files moved aside from ``days`` of a dataset (for the Spark assets' reports)."""
    found: list[Path] = []
    for day in days:
        directory = dataset_root / QUARANTINE_DIR / f"event_date={day.isoformat()}"
        if directory.is_dir():
            found += sorted(directory.glob("*.parquet"))
    return found
