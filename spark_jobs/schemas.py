"""The schema of every table the Spark jobs read or write, in one place.

Why one module: the landing sink, the jobs, the Dagster assets (``dagster/column_schema``) and
the tests must agree on names and types; each job returns ``df.to(SCHEMA)``, so its output
has exactly these columns, in this order, of these types.

Every field is declared nullable, which is what a Parquet read reports. A job's output may
still mark a column non-nullable where Spark proves it (a count, a literal): ``to`` keeps the
stricter flag, so compare schemas ignoring nullability. Required values are enforced by the
cleaning rules (``spark_jobs.cleaning``), which quarantine a row instead.

Money is ``decimal(10,2)`` (a unit price up to 99,999,999.99) and sums are wider decimals:
decimals add exactly, so a day's revenue equals the sum of its orders to the cent, where
doubles would drift (``0.1 + 0.2 != 0.3``) and make reconciliation tolerance-dependent.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PRICE_TYPE: Final = DecimalType(10, 2)
TOTAL_TYPE: Final = DecimalType(12, 2)  # an order's total
REVENUE_TYPE: Final = DecimalType(18, 2)  # sums over many orders

#: Identifies one landed record: a topic deleted and recreated gets a new ``_topic_id``, so
#: its offsets start again without colliding with the old incarnation's.
_LINEAGE: Final = (
    ("_cluster", StringType()),
    ("_topic", StringType()),
    ("_topic_id", StringType()),
    ("_partition", IntegerType()),
    ("_offset", LongType()),
)
LINEAGE_COLUMNS: Final = tuple(name for name, _ in _LINEAGE)


def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind, nullable=True) for name, kind in fields])


#: Lineage kept on every derived row, so any output row leads back to its landed record.
_KEPT: Final = (*_LINEAGE, ("_timestamp", TimestampType()), ("event_date", DateType()))

#: What the consumer's landing sink writes (Parquet, partitioned by ``event_date``, the UTC
#: day of ``_timestamp``). A replay after a crash can land one record twice: same lineage key.
LANDED_SCHEMA: Final = _struct(
    ("value", BinaryType()),
    ("_source_kind", StringType()),  # "kafka" | "pulsar"
    *_LINEAGE,
    ("_key", BinaryType()),
    ("_timestamp", TimestampType()),
    ("_landed_at", TimestampType()),
    ("_workload", StringType()),
    ("_spec_hash", StringType()),
    ("event_date", DateType()),
)

#: Typed, valid, deduplicated clicks. ``event_date`` is the landed partition (the UTC day of
#: the record time) so that a day's output derives from exactly that day's landed rows;
#: ``event_ts`` is the time the event itself carries.
CLICK_SCHEMA: Final = _struct(
    ("event_id", StringType()),
    ("user_id", StringType()),
    ("event_type", StringType()),  # page_view | add_to_cart | purchase
    ("product_id", StringType()),
    ("price", PRICE_TYPE),  # null for page views
    ("quantity", IntegerType()),  # null for page views
    ("event_ts", TimestampType()),
    *_KEPT,
)

ORDER_ITEM_TYPE: Final = _struct(
    ("product_id", StringType()),
    ("quantity", IntegerType()),
    ("unit_price", PRICE_TYPE),
)

ORDER_SCHEMA: Final = _struct(
    ("order_id", StringType()),
    ("user_id", StringType()),
    ("items", ArrayType(ORDER_ITEM_TYPE)),
    ("item_count", IntegerType()),
    ("total", TOTAL_TYPE),
    ("currency", StringType()),
    ("order_ts", TimestampType()),
    *_KEPT,
)

#: Every landed row that failed validation, with why. ``raw`` is the value decoded as UTF-8
#: (``raw_encoding`` "utf-8") or, when it is not valid UTF-8, its base64 ("base64"); both are
#: null when the value itself is null.
QUARANTINE_SCHEMA: Final = _struct(
    ("stream", StringType()),  # clicks | orders
    ("reason", StringType()),
    ("raw", StringType()),
    ("raw_encoding", StringType()),
    *_KEPT,
)

#: Every landed row removed as a duplicate: ``duplicate_of`` says what it repeated, the
#: ``lineage`` key (a replay) or the ``event_id``/``order_id`` (a producer retry).
DUPLICATE_SCHEMA: Final = _struct(
    ("stream", StringType()),
    ("duplicate_of", StringType()),
    *_KEPT,
)

#: Per ``event_date``: landed rows = clean + quarantined + duplicates; ``unaccounted`` is
#: landed minus the three, zero when nothing was lost or counted twice.
RECONCILIATION_SCHEMA: Final = _struct(
    ("event_date", DateType()),
    ("landed", LongType()),
    ("clean", LongType()),
    ("quarantined", LongType()),
    ("duplicates", LongType()),
    ("unaccounted", LongType()),
)

SESSION_SCHEMA: Final = _struct(
    ("session_id", StringType()),  # "<user_id>-<epoch millis of session_start>"
    ("user_id", StringType()),
    ("session_start", TimestampType()),
    ("session_end", TimestampType()),
    ("event_date", DateType()),  # UTC day of session_start
    ("events", LongType()),
    ("page_views", LongType()),
    ("add_to_cart", LongType()),
    ("purchases", LongType()),
    ("duration_seconds", DoubleType()),
)

#: Counts are events; ``viewers``/``cart_users``/``purchasers`` are distinct users; each rate
#: divides distinct users of a later step by those of an earlier one, null when none.
FUNNEL_SCHEMA: Final = _struct(
    ("event_date", DateType()),
    ("product_id", StringType()),
    ("views", LongType()),
    ("carts", LongType()),
    ("purchases", LongType()),
    ("viewers", LongType()),
    ("cart_users", LongType()),
    ("purchasers", LongType()),
    ("view_to_cart_rate", DoubleType()),
    ("cart_to_purchase_rate", DoubleType()),
    ("view_to_purchase_rate", DoubleType()),
)

REVENUE_SCHEMA: Final = _struct(
    ("event_date", DateType()),
    ("orders", LongType()),
    ("revenue", REVENUE_TYPE),
    ("customers", LongType()),
    ("sessions", LongType()),
    ("sessions_with_purchase", LongType()),
    ("revenue_per_session", REVENUE_TYPE),  # null on a day without sessions
    ("average_order_value", REVENUE_TYPE),  # null on a day without orders
)
