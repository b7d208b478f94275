"""Reading and writing day partitions of the lake's Parquet tables, the only storage code.

Layout: ``<lake>/landed/<dataset>/event_date=D/`` (written by consumer runs) and
``<lake>/tables/<asset>/event_date=D/`` (written here), Hive-style so Spark reads
``event_date`` from the directory.

Why a staged swap instead of Spark's ``partitionOverwriteMode=dynamic``: dynamic overwrite only
replaces the days the new output has rows for, so a day that now has none would keep its old
rows. Here the output is written to ``<lake>/tables/.staging/<asset>-<run>/`` first, then every
day of the range is replaced by its staged directory, or removed when there is none. A failed
write leaves the table as it was; a concurrent reader may find a day missing for the instant
between two renames, but never half-written.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Final

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from consumers.landing.quarantine import quarantined

#: The partition column of every lake table, landed or derived.
PARTITION_COLUMN: Final = "event_date"


def landed_root(lake: Path, dataset: str) -> Path:
    return lake / "landed" / dataset


def table_root(lake: Path, name: str) -> Path:
    return lake / "tables" / name


def day_dir(root: Path, day: date) -> Path:
    return root / f"{PARTITION_COLUMN}={day.isoformat()}"


def visible_files(directory: Path) -> list[Path]:
    """The Parquet files of a day directory that Spark reads (it skips ``.``/``_`` names)."""
    if not directory.is_dir():
        return []
    return sorted(
        path
        for path in directory.iterdir()
        if path.suffix == ".parquet" and not path.name.startswith((".", "_"))
    )


def has_data(directory: Path) -> bool:
    return bool(visible_files(directory))


def row_counts(root: Path, days: Sequence[date]) -> dict[date, int]:
    """Rows per day as written, from the Parquet footers: exact, and no Spark job."""
    return {
        day: sum(pq.read_metadata(f).num_rows for f in visible_files(day_dir(root, day)))
        for day in days
    }


def total_rows(root: Path) -> int:
    """Rows of every day of the table (footers only)."""
    return sum(
        pq.read_metadata(f).num_rows
        for directory in root.glob(f"{PARTITION_COLUMN}=*")
        for f in visible_files(directory)
    )


def read_days(
    spark: SparkSession, root: Path, schema: StructType, days: Sequence[date]
) -> DataFrame:
    """The rows of ``days`` (``schema``, in its column order); a missing day has no rows."""
    present = [str(day_dir(root, day)) for day in days if has_data(day_dir(root, day))]
    if not present:
        return spark.createDataFrame([], schema)
    frame = spark.read.schema(schema).option("basePath", str(root)).parquet(*present)
    return frame.select(*schema.fieldNames())


def read_all(spark: SparkSession, root: Path, schema: StructType) -> DataFrame:
    """Every day of a table (the whole directory); none yet means no rows."""
    if not root.is_dir() or not any(has_data(d) for d in root.glob(f"{PARTITION_COLUMN}=*")):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(str(root)).select(*schema.fieldNames())


@dataclass(frozen=True)
class LandedDays:
    """A landed dataset's rows of some days, and the files left out of them."""

    frame: DataFrame
    #: Path -> why it was left out: moved aside by a consumer run (``quarantined``), or a file
    #: in the day whose footer cannot be read (left where it is; the consumer moves it aside
    #: and lands its records again when the partition is next assigned).
    skipped: dict[str, str] = field(default_factory=dict)


def landed_inputs(root: Path, days: Sequence[date]) -> tuple[list[str], dict[str, str]]:
    """A landed dataset's files of ``days`` whose footers can be read, and those left out
    (:attr:`LandedDays.skipped`)."""
    skipped = {str(path): "quarantined" for path in quarantined(root, days)}
    readable: list[str] = []
    for day in days:
        for path in visible_files(day_dir(root, day)):
            try:
                pq.read_metadata(path)
            except FileNotFoundError:
                continue  # replaced or removed since the listing
            except (OSError, ValueError) as exc:  # pyarrow: ArrowInvalid is a ValueError
                skipped[str(path)] = f"unreadable: {exc}"
                continue
            readable.append(str(path))
    return readable, skipped


def read_landed(
    spark: SparkSession, root: Path, schema: StructType, days: Sequence[date]
) -> LandedDays:
    """:func:`read_days` for a landed dataset, without the files that cannot be read: one
    damaged file no longer fails the whole run (Spark would stop at it)."""
    readable, skipped = landed_inputs(root, days)
    if not readable:
        return LandedDays(spark.createDataFrame([], schema), skipped)
    frame = spark.read.schema(schema).option("basePath", str(root)).parquet(*readable)
    return LandedDays(frame.select(*schema.fieldNames()), skipped)


def write_days(frame: DataFrame, root: Path, days: Sequence[date], stage: str) -> None:
    """Replace exactly ``days`` of the table at ``root`` with ``frame``'s rows.

    ``stage`` names the staging directory (the run id: two runs never share one). Raises
    ``ValueError`` when ``frame`` has rows of a day outside ``days``: writing them would
    change partitions the run does not own.
    """
    staging = root.parent / ".staging" / f"{root.name}-{stage}"
    shutil.rmtree(staging, ignore_errors=True)
    frame.write.mode("overwrite").partitionBy(PARTITION_COLUMN).parquet(str(staging))
    try:
        wanted = {day_dir(staging, day).name for day in days}
        staged = {p.name for p in staging.glob(f"{PARTITION_COLUMN}=*")}
        if staged - wanted:
            raise ValueError(
                f"output for {root.name} has rows outside the partitions being written "
                f"({', '.join(sorted(staged - wanted))}); refusing to write them"
            )
        root.mkdir(parents=True, exist_ok=True)
        for day in days:
            _swap(day_dir(staging, day), day_dir(root, day), staging / f".old-{day.isoformat()}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap(new: Path, current: Path, trash: Path) -> None:
    """``current`` becomes ``new`` (or disappears when there is no ``new``)."""
    if current.exists():
        current.rename(trash)
    if new.exists():
        new.rename(current)
    shutil.rmtree(trash, ignore_errors=True)
