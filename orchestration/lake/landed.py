"""The lake's day partitions and what a landed dataset is to an asset downstream of it: its
asset key, its freshness, its column schema, and its rows of a run's days read in PySpark.

The ``landed_<dataset>`` assets themselves are built from the workload specs
(:mod:`orchestration.platform.catalog`); consumer runs report their materializations
(:mod:`orchestration.workloads.reporting`), and Spark assets (the shop's in
:mod:`orchestration.shop`, or a user's own) read them with :func:`read_landed_days`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Final

from dagster import (
    AssetExecutionContext,
    AssetKey,
    DailyPartitionsDefinition,
    FreshnessPolicy,
    TableColumn,
    TableSchema,
)
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from orchestration import settings
from orchestration.lake.tables import LandedDays, landed_root, read_landed
from spark_jobs import LANDED_SCHEMA

DEFAULT_LAKE_START: Final = date(2026, 1, 1)
#: A landed dataset whose latest materialization is older than this is stale (freshness FAIL).
DEFAULT_LANDED_MAX_AGE_MINUTES: Final = 60


def lake_partitions() -> DailyPartitionsDefinition:
    """UTC days from ``LANEHOUSE_LAKE_START`` (default 2026-01-01) through today.

    ``end_offset=1``: today's partition exists while it is still being landed.
    """
    raw = os.environ.get("LANEHOUSE_LAKE_START", "").strip()
    try:
        start = date.fromisoformat(raw) if raw else DEFAULT_LAKE_START
    except ValueError:
        raise ValueError(
            f"LANEHOUSE_LAKE_START must be a date like 2026-01-01 (UTC day of the first lake "
            f"partition), got {raw!r}"
        ) from None
    return DailyPartitionsDefinition(
        start_date=start.isoformat(), timezone="UTC", end_offset=1, fmt="%Y-%m-%d"
    )


LAKE_PARTITIONS: Final = lake_partitions()


def landed_freshness() -> FreshnessPolicy:
    """A landed dataset is stale when its newest landed file, of any day, is older than
    ``LANEHOUSE_LANDED_MAX_AGE_MINUTES``: a workload stopped, stuck or landing nothing."""
    return FreshnessPolicy.time_window(fail_window=landed_max_age())


def landed_max_age() -> timedelta:
    raw = os.environ.get("LANEHOUSE_LANDED_MAX_AGE_MINUTES", "").strip()
    if not raw:
        return timedelta(minutes=DEFAULT_LANDED_MAX_AGE_MINUTES)
    if not raw.isdecimal() or int(raw) == 0:
        raise ValueError(f"LANEHOUSE_LANDED_MAX_AGE_MINUTES must be a positive int, got {raw!r}")
    return timedelta(minutes=int(raw))


def table_schema(schema: StructType) -> TableSchema:
    """``dagster/column_schema`` from a ``spark_jobs.schemas`` constant."""
    return TableSchema(
        columns=[TableColumn(name=f.name, type=f.dataType.simpleString()) for f in schema.fields]
    )


def landed_key(dataset: str) -> AssetKey:
    """The asset of a landed dataset (the spec validated the dataset name)."""
    return AssetKey(f"landed_{dataset}")


def run_days(context: AssetExecutionContext) -> list[date]:
    """The days of an asset's run: one partition, or a whole range under a single-run
    backfill."""
    return [date.fromisoformat(key) for key in context.partition_keys]


def read_landed_days(
    spark: SparkSession, dataset: str, days: Sequence[date], lake: Path | None = None
) -> LandedDays:
    """``dataset``'s landed rows of ``days`` (columns: ``spark_jobs.LANDED_SCHEMA``) from the
    platform's lake, or ``lake``. Files that cannot be read are left out and listed in
    ``skipped`` (path -> why), so one damaged file does not fail the whole run."""
    root = landed_root(lake or settings.current().lake, dataset)
    return read_landed(spark, root, LANDED_SCHEMA, days)
