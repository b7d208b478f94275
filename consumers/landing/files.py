"""Landed files: where a batch of records goes on disk, and how it gets there durably.

Layout (Hive-style, so Spark discovers ``event_date`` as a partition column)::

    <lake>/landed/<dataset>/event_date=<YYYY-MM-DD>/<source>-p<partition>-o<first offset>.parquet

``<source>`` is the topic name made path-safe plus a short hash of (cluster, topic, topic id): a
topic deleted and recreated under the same name has a new topic id, so its files (whose offsets
restart at 0) never overwrite the old ones, and Spark's deduplication on the lineage key (which
includes ``_topic_id``) never confuses them.

Why the first offset names the file: after a crash the engine re-reads a partition from its
committed position, which is the first offset of the first file whose records were not yet
committed. The replay writes a file of that very name, replacing the one written before the crash
instead of adding a second copy. :func:`clear_from` removes the partition's files above the
position before the replay starts, since the replay may cut its batches elsewhere.

Durability: each file is written to a temporary name in the same directory, flushed and fsynced,
renamed over the final name, and the directory is fsynced; only then does the caller complete the
records' offsets. A crash leaves either the old file, the new one, or a ``.tmp`` that readers skip
(Spark ignores names starting with ``.``) and the next write of that name replaces.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Final

from consumers.landing.positions import build_index, days_from, in_days
from consumers.landing.quarantine import read_footer, read_rows
from consumers.record import SourceIdentity

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "LandedRow",
    "clear_from",
    "ensure_index",
    "landed_arrow_schema",
    "landed_path",
    "remove_stale_temporaries",
    "trim_from",
    "write_landed",
]


@functools.cache
def landed_arrow_schema() -> pa.Schema:
    """The columns of every landed file (``event_date`` comes from the directory). pyarrow is imported here and in :func:`write_landed`,
    not with the module: it adds about 40 MB to every consumer process, and only workloads
    that land files need it."""
    import pyarrow as pa

    return pa.schema(
        [
            ("value", pa.binary()),
            ("_source_kind", pa.string()),
            ("_cluster", pa.string()),
            ("_topic", pa.string()),
            ("_topic_id", pa.string()),
            ("_partition", pa.int32()),
            ("_offset", pa.int64()),
            ("_key", pa.binary()),
            ("_timestamp", pa.timestamp("ms", tz="UTC")),
            ("_landed_at", pa.timestamp("ms", tz="UTC")),
            ("_workload", pa.string()),
            ("_spec_hash", pa.string()),
        ]
    )


@dataclass(frozen=True)
class LandedRow:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: Record time, epoch milliseconds.
    timestamp_ms: int


def landed_path(
    lake: Path,
    dataset: str,
    day: date,
    source: SourceIdentity,
    partition: int,
    first: int,
    content: str | None = None,
) -> Path:
    """``content``: a digest of the file's positions, for sources whose replays are not cut
    at the same places (Pulsar); such files are never replaced, Spark dedups their rows."""
    suffix = f"-{content}" if content else ""
    name = f"{source.file_prefix()}-p{partition}-o{first}{suffix}.parquet"
    return lake / "landed" / dataset / f"event_date={day.isoformat()}" / name


def write_landed(
    path: Path,
    source: SourceIdentity,
    rows: Sequence[LandedRow],
    landed_at_ms: int,
    workload: str,
    spec_hash: str,
) -> None:
    """Write ``rows`` to ``path`` atomically and durably (see the module docstring)."""
    if not rows:
        raise ValueError("write_landed: no rows")
    import pyarrow as pa

    count = len(rows)
    table = pa.table(
        {
            "value": [r.value for r in rows],
            "_source_kind": [source.kind] * count,
            "_cluster": [source.cluster] * count,
            "_topic": [source.topic] * count,
            "_topic_id": [source.topic_id] * count,
            "_partition": [r.partition for r in rows],
            "_offset": [r.offset for r in rows],
            "_key": [r.key for r in rows],
            "_timestamp": [r.timestamp_ms for r in rows],
            "_landed_at": [landed_at_ms] * count,
            "_workload": [workload] * count,
            "_spec_hash": [spec_hash] * count,
        },
        schema=landed_arrow_schema(),
    )
    _write_atomically(path, table)


def _write_atomically(path: Path, table: pa.Table) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with temporary.open("wb") as sink:
            pq.write_table(table, sink, compression="zstd")
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, path)
    except BaseException:
        # A full disk fails every retry: leave no empty temporary behind each time.
        temporary.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def clear_from(
    lake: Path,
    dataset: str,
    source: SourceIdentity,
    partition: int,
    position: int,
    keep: AbstractSet[int] = frozenset(),
) -> int:
    """Delete the partition's landed files starting at ``position`` or later; return how many.

    Called when the engine starts (re)reading a partition at ``position``: every record from
    there on will be landed again, possibly cut into different files. Files whose first offset
    is in ``keep`` stay: a previous owner completed (landed) those records and recorded them in
    its commit metadata, so the engine skips them and would never land them again. A file is
    completed all at once, so its first offset stands for all of its records.
    """
    removed = 0
    days = _days_from(lake, dataset, source, partition, position)
    for path, first in _offset_named(lake, dataset, source, partition, days):
        if first >= position and first not in keep:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def ensure_index(lake: Path, dataset: str, source: SourceIdentity, partition: int) -> bool:
    """Give a partition landed before its index existed one (:func:`~consumers.landing.positions.
    build_index`); True if it had to. Called on assignment, before anything is cleared or landed."""
    return build_index(lake / "landed" / dataset, source.file_prefix(), partition)


def _days_from(
    lake: Path, dataset: str, source: SourceIdentity, partition: int, position: int
) -> list[date] | None:
    return days_from(lake / "landed" / dataset, source.file_prefix(), partition, position)


def _offset_named(
    lake: Path,
    dataset: str,
    source: SourceIdentity,
    partition: int,
    days: Sequence[date] | None = None,
) -> Iterator[tuple[Path, int]]:
    """The partition's landed files named by their first offset alone, with that offset (files
    named with a content digest as well, Pulsar's, are never replaced or cut); in ``days``
    only, or every day."""
    root = lake / "landed" / dataset
    if not root.is_dir():
        return
    prefix = f"{source.file_prefix()}-p{partition}-o"
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.parquet")
    for path in in_days(root, days, f"{prefix}*.parquet"):
        match = pattern.fullmatch(path.name)
        if match is not None:
            yield path, int(match.group(1))


def trim_from(
    lake: Path,
    dataset: str,
    source: SourceIdentity,
    partition: int,
    position: int,
    since: int | None = None,
) -> int:
    """Cut the partition's landed files back to the offsets before ``position``; return how many
    files changed. ``since``: only files starting at or above it (None: every file).

    Two reasons a file starting below a position holds records at or above it:

    * a rewind sets a group's position anywhere, also inside a landed file;
    * records complete out of offset order (keys run in parallel), so a file cut while record
      ``n`` still ran holds later records of other keys, and once ``n`` lands in the next file
      the committed position can stop at ``n`` with those later records in the earlier file.
      After a crash the next owner handles them again from ``n``: left in place they would
      land twice. Such a file starts at most about ``max_buffered`` offsets below the position
      (a partition pauses at that many uncommitted records), hence ``since``.

    The file keeps its records before the position, rewritten atomically under its own name;
    the engine lands the rest again when it re-reads from there (:func:`clear_from` removes
    whole files past it). Files whose footer says they end below the position are not read.
    Raises :class:`~consumers.errors.DamagedFile` for a file it cannot read (its footer or,
    for a file it cuts, its rows), before changing any other file.
    """
    import pyarrow.compute as pc

    changed = 0
    days = None if since is None else _days_from(lake, dataset, source, partition, since)
    cut: list[tuple[Path, pa.Table]] = []
    for path, first in _offset_named(lake, dataset, source, partition, days):
        if first >= position or (since is not None and first < since):
            continue
        try:
            if _highest_offset(path) < position:
                continue
            table = read_rows(path)
        except FileNotFoundError:
            continue  # removed since the listing
        cut.append((path, table))
    for path, table in cut:
        kept = table.filter(pc.less(table["_offset"], position))
        if kept.num_rows < table.num_rows:
            _write_atomically(path, kept)
            changed += 1
    return changed


def _highest_offset(path: Path) -> float:
    """The largest ``_offset`` in the file's footer statistics (infinity when it has none)."""
    metadata = read_footer(path)
    column = metadata.schema.names.index("_offset")
    highest = -1.0
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            return float("inf")
        highest = max(highest, float(stats.max))
    return highest


#: A temporary file this old was left by a writer that died mid-write: a write takes seconds.
STALE_TEMPORARY_SECONDS: Final = 600.0


def remove_stale_temporaries(
    lake: Path,
    dataset: str,
    source: SourceIdentity,
    partition: int,
    now: float,
    older_than: float = STALE_TEMPORARY_SECONDS,
    position: int | None = None,
) -> int:
    """Remove the partition's ``.tmp`` files older than ``older_than`` seconds at ``now`` (epoch
    seconds, as file times are); return how many.

    A kill during a write leaves one. Kafka's next write of that name replaces it, but a Pulsar
    file's name holds a digest of its positions, which a replay may cut elsewhere, so nothing
    else ever would. A young one may belong to a previous owner still finishing a write.
    With the committed ``position``, only the days the index says may hold files from there on
    are looked at (an uncommitted write's file starts at or above it); without, every day.
    """
    root = lake / "landed" / dataset
    if not root.is_dir():
        return 0
    removed = 0
    names = f".{source.file_prefix()}-p{partition}-o*.tmp"
    days = None if position is None else _days_from(lake, dataset, source, partition, position)
    for path in in_days(root, days, names):
        try:
            if now - path.stat().st_mtime >= older_than:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue  # renamed or removed meanwhile
    return removed


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
