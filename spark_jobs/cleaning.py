"""Landed rows to typed clean rows, quarantined rows (with a reason) and counted duplicates.

Every landed row ends up in exactly one of the three outputs, so per ``event_date``:
landed = clean + quarantined + duplicates (``reconcile`` checks it). Nothing is dropped
silently.

Steps, in this order:

1. Replays: a crash between landing and commit lands a record again under the same lineage
   key (cluster, topic, topic id, partition, offset). One row per key is kept (the first
   landed); the others are duplicates of the ``lineage``.
2. Validation (rules in ``spark_jobs.rules``, checks in ``spark_jobs.validation``): null
   value, invalid UTF-8, not JSON, not an object, then each field: missing, wrong JSON type,
   out of range, empty, unknown enum value, negative amount; for orders also each item and
   whether ``total`` matches the items (within 0.01). An invalid row is quarantined with all its field problems, ``; ``-separated.
3. Producer retries: a producer that retries a send it thought failed writes the same event
   again at a new offset. Among valid rows one per ``event_id`` (clicks) or ``order_id``
   (orders) is kept, the one with the earliest record time then lineage key; the others are
   duplicates of the id. This is only within the rows passed in (a day's partition): a retry
   that straddles midnight is not caught.

The three outputs share one plan: persist the landed input (or the outputs) when writing
them all, or the parsing runs once per output.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs import validation as v
from spark_jobs.rules import CLICKS, ORDERS, VARIANT, StreamRules
from spark_jobs.schemas import (
    DUPLICATE_SCHEMA,
    LINEAGE_COLUMNS,
    QUARANTINE_SCHEMA,
    RECONCILIATION_SCHEMA,
)

_KEPT: Final = (*LINEAGE_COLUMNS, "_timestamp", "event_date")
_REASON: Final = "_reason"
_PROBLEMS: Final = "_problems"


@dataclass(frozen=True)
class CleanResult:
    """The three disjoint parts of one landed table (see the module docstring)."""

    clean: DataFrame
    quarantined: DataFrame  # QUARANTINE_SCHEMA
    duplicates: DataFrame  # DUPLICATE_SCHEMA, one row per landed row removed


def clean_clicks(landed: DataFrame) -> CleanResult:
    """Clicks as ``CLICK_SCHEMA``; a click repeating an ``event_id`` counts as a duplicate."""
    return _clean(landed, CLICKS)


def clean_orders(landed: DataFrame) -> CleanResult:
    """Orders as ``ORDER_SCHEMA``; an order repeating an ``order_id`` counts as a duplicate."""
    return _clean(landed, ORDERS)


def reconcile(landed: DataFrame, result: CleanResult) -> DataFrame:
    """Counts per ``event_date`` (``RECONCILIATION_SCHEMA``): ``unaccounted`` must be 0."""
    parts = {
        "landed": landed,
        "clean": result.clean,
        "quarantined": result.quarantined,
        "duplicates": result.duplicates,
    }
    per_day = [
        frame.groupBy("event_date").agg(F.count(F.lit(1)).alias(name))
        for name, frame in parts.items()
    ]
    counts = reduce(lambda a, b: a.join(b, "event_date", "full"), per_day)
    counts = counts.fillna(0, subset=list(parts))
    unaccounted = F.col("landed") - F.col("clean") - F.col("quarantined") - F.col("duplicates")
    return counts.withColumn("unaccounted", unaccounted).to(RECONCILIATION_SCHEMA)


def _clean(landed: DataFrame, rules: StreamRules) -> CleanResult:
    first_landed = (F.col("_landed_at"), F.col("_spec_hash"), F.col("_workload"), F.col("value"))
    unique, replays = _first_per(landed, list(LINEAGE_COLUMNS), first_landed)

    value = F.col("value")
    parsed = unique.withColumn(VARIANT, v.parsed(value))
    structural = v.structural_problem(value, F.col(VARIANT))
    checked = (
        rules.inspect(parsed)
        .withColumn(_PROBLEMS, rules.problems())
        .withColumn(_REASON, v.reason(structural, F.col(_PROBLEMS)))
    )
    raw, raw_encoding = v.raw_columns(value)
    quarantined = checked.where(F.col(_REASON).isNotNull()).select(
        F.lit(rules.stream).alias("stream"),
        F.col(_REASON).alias("reason"),
        raw.alias("raw"),
        raw_encoding.alias("raw_encoding"),
        *_KEPT,
    )

    valid = checked.where(F.col(_REASON).isNull()).select(*rules.columns(), *_KEPT)
    earliest = tuple(F.col(c) for c in ("_timestamp", *LINEAGE_COLUMNS))
    clean, retries = _first_per(valid, [rules.id_column], earliest)

    def duplicate(rows: DataFrame, of: str) -> DataFrame:
        return rows.select(
            F.lit(rules.stream).alias("stream"), F.lit(of).alias("duplicate_of"), *_KEPT
        )

    duplicates = duplicate(replays, "lineage").unionByName(duplicate(retries, rules.id_column))
    return CleanResult(
        clean=clean.to(rules.schema),
        quarantined=quarantined.to(QUARANTINE_SCHEMA),
        duplicates=duplicates.to(DUPLICATE_SCHEMA),
    )


def _first_per(
    frame: DataFrame, keys: list[str], order: tuple[Column, ...]
) -> tuple[DataFrame, DataFrame]:
    """``(first row per key, every other row)`` by ``order``, without the rank column."""
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(*order))
    ranked = frame.withColumn("_rank", rank)
    first = ranked.where(F.col("_rank") == 1).drop("_rank")
    rest = ranked.where(F.col("_rank") > 1).drop("_rank")
    return first, rest
