"""The daily product funnel: views, then carts, then purchases, per ``event_date`` and product.

Rates divide distinct users, not events: one shopper reloading a page ten times is one
viewer, and "what share of viewers bought" is the question a funnel answers. A user who
carts without viewing that product that day still counts at the cart step, so a rate can
exceed 1 on odd data; it is null when nobody reached the earlier step (no division by zero).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.schemas import FUNNEL_SCHEMA


def daily_funnel(clicks: DataFrame) -> DataFrame:
    """One row per ``event_date`` and ``product_id`` of ``clicks`` (``FUNNEL_SCHEMA``)."""
    steps = clicks.groupBy("event_date", "product_id").agg(
        _events("page_view").alias("views"),
        _events("add_to_cart").alias("carts"),
        _events("purchase").alias("purchases"),
        _users("page_view").alias("viewers"),
        _users("add_to_cart").alias("cart_users"),
        _users("purchase").alias("purchasers"),
    )
    return steps.select(
        "*",
        _rate("cart_users", "viewers").alias("view_to_cart_rate"),
        _rate("purchasers", "cart_users").alias("cart_to_purchase_rate"),
        _rate("purchasers", "viewers").alias("view_to_purchase_rate"),
    ).to(FUNNEL_SCHEMA)


def _events(event_type: str) -> Column:
    return F.count_if(F.col("event_type") == event_type)


def _users(event_type: str) -> Column:
    return F.count_distinct(F.when(F.col("event_type") == event_type, F.col("user_id")))


def _rate(numerator: str, denominator: str) -> Column:
    """``try_divide`` is null when the denominator is 0, where ``/`` would fail under ANSI."""
    return F.try_divide(F.col(numerator).cast("double"), F.col(denominator))
