"""Daily revenue, joined with the day's sessions to relate money to traffic.

A full outer join on ``event_date`` keeps a day that had sessions but no orders (revenue 0)
and one with orders but no sessions (e.g. sessions not computed yet): both are worth seeing.
Money stays decimal; per-session and per-order values are rounded half-up to the cent and
null when there is nothing to divide by.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.schemas import REVENUE_SCHEMA, REVENUE_TYPE


def daily_revenue(orders: DataFrame, sessions: DataFrame) -> DataFrame:
    """Per ``event_date`` (``REVENUE_SCHEMA``) from clean orders and ``sessionize`` output."""
    money = orders.groupBy("event_date").agg(
        F.count(F.lit(1)).alias("orders"),
        F.sum("total").alias("revenue"),
        F.count_distinct("user_id").alias("customers"),
    )
    traffic = sessions.groupBy("event_date").agg(
        F.count(F.lit(1)).alias("sessions"),
        F.count_if(F.col("purchases") > 0).alias("sessions_with_purchase"),
    )
    day = money.join(traffic, "event_date", "full").fillna(
        0, subset=["orders", "customers", "sessions", "sessions_with_purchase"]
    )
    revenue = F.coalesce(F.col("revenue"), F.lit(0).cast(REVENUE_TYPE))
    return day.select(
        "event_date",
        "orders",
        revenue.alias("revenue"),
        "customers",
        "sessions",
        "sessions_with_purchase",
        _per(revenue, "sessions").alias("revenue_per_session"),
        _per(revenue, "orders").alias("average_order_value"),
    ).to(REVENUE_SCHEMA)


def _per(amount: Column, count: str) -> Column:
    return F.when(F.col(count) > 0, F.round(amount / F.col(count), 2))
