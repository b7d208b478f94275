"""Clicks to user sessions: a new session starts after ``gap_minutes`` or more of inactivity.

Why window functions: ``lag`` finds each click's gap to the user's previous one and a running
sum of "gap too long" flags numbers the sessions, all in Catalyst. A Python UDF or
``groupBy().applyInPandas`` would ship every row through a Python worker for the same result.

``session_id`` is ``<user_id>-<epoch millis of session_start>``: deterministic, so a rerun
writes the same ids. Times and ``event_date`` are derived in UTC whatever the session's time
zone. Sessions are also cut at midnight UTC: a day's sessions then depend on that day's clicks
only, so a run over one day and a run over a range give the same rows (the daily partitions
and single-run backfills rely on it).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.schemas import SESSION_SCHEMA

DEFAULT_GAP_MINUTES: Final = 30
_SECONDS_PER_DAY: Final = 86_400


def sessionize(clicks: DataFrame, gap_minutes: int = DEFAULT_GAP_MINUTES) -> DataFrame:
    """Sessions (``SESSION_SCHEMA``) of ``clicks`` (``CLICK_SCHEMA``), one row each."""
    if isinstance(gap_minutes, bool) or not isinstance(gap_minutes, int) or gap_minutes <= 0:
        raise ValueError(f"gap_minutes must be a positive int, got {gap_minutes!r}")
    by_user_day = Window.partitionBy("user_id", "_day").orderBy("event_ts", "event_id")
    micros = F.unix_micros(F.col("event_ts"))
    gap = micros - F.lag(micros).over(by_user_day)
    starts = F.coalesce(gap >= gap_minutes * 60 * 1_000_000, F.lit(True))
    numbered = (
        clicks.withColumn("_day", utc_date(F.col("event_ts")))
        .withColumn("_starts", starts.cast("int"))
        .withColumn(
            "_session",
            F.sum("_starts").over(by_user_day.rowsBetween(Window.unboundedPreceding, 0)),
        )
    )
    sessions = numbered.groupBy("user_id", "_day", "_session").agg(
        F.min("event_ts").alias("session_start"),
        F.max("event_ts").alias("session_end"),
        F.count(F.lit(1)).alias("events"),
        _count_of("page_view").alias("page_views"),
        _count_of("add_to_cart").alias("add_to_cart"),
        _count_of("purchase").alias("purchases"),
    )
    start, end = F.col("session_start"), F.col("session_end")
    return sessions.select(
        F.concat_ws("-", "user_id", F.unix_millis(start).cast("string")).alias("session_id"),
        "user_id",
        start,
        end,
        utc_date(start).alias("event_date"),
        "events",
        "page_views",
        "add_to_cart",
        "purchases",
        ((F.unix_micros(end) - F.unix_micros(start)) / 1_000_000).alias("duration_seconds"),
    ).to(SESSION_SCHEMA)


def utc_date(timestamp: Column) -> Column:
    """The UTC calendar day of a timestamp; ``to_date`` would use the session time zone."""
    return F.date_from_unix_date(F.floor(F.unix_seconds(timestamp) / _SECONDS_PER_DAY))


def _count_of(event_type: str) -> Column:
    return F.count_if(F.col("event_type") == event_type)
