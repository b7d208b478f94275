"""The shop's Spark tables: each one's schema, description and column lineage.

landed_clickstream ──▶ clean_clicks, click_quarantine, click_duplicates
                       clean_clicks ──▶ sessions, daily_funnel
landed_orders ──▶ clean_orders, order_quarantine, order_duplicates
                  clean_orders + sessions ──▶ daily_revenue
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dagster import AssetKey, TableColumnDep, TableColumnLineage
from pyspark.sql.types import StructType

from orchestration.platform import landed_key, table_schema
from orchestration.shop.datasets import CLICKS_DATASET, ORDERS_DATASET
from spark_jobs import (
    CLICK_SCHEMA,
    DUPLICATE_SCHEMA,
    FUNNEL_SCHEMA,
    LINEAGE_COLUMNS,
    ORDER_SCHEMA,
    QUARANTINE_SCHEMA,
    REVENUE_SCHEMA,
    SESSION_SCHEMA,
)

#: The clean table of each dataset, which carries its reconciliation check.
PROCESSED_DATASET: Final = {"clean_clicks": CLICKS_DATASET, "clean_orders": ORDERS_DATASET}


def _deps(asset_name: str, *columns: str) -> list[TableColumnDep]:
    return [TableColumnDep(asset_key=AssetKey(asset_name), column_name=c) for c in columns]


_KEPT: Final = (*LINEAGE_COLUMNS, "_timestamp", "event_date")


@dataclass(frozen=True)
class Table:
    """One Spark asset's table: its schema and where each column comes from."""

    name: str
    schema: StructType
    description: str
    lineage: Mapping[str, list[TableColumnDep]]

    @property
    def key(self) -> AssetKey:
        return AssetKey(self.name)

    def metadata(self) -> dict[str, Any]:
        return {
            "dagster/column_schema": table_schema(self.schema),
            "dagster/column_lineage": TableColumnLineage(deps_by_column=dict(self.lineage)),
            "table": f"tables/{self.name}",
        }


def _split_tables(dataset: str, prefix: str, clean: str, schema: StructType) -> list[Table]:
    landed = landed_key(dataset).to_user_string()
    kept = {c: _deps(landed, c) for c in _KEPT}
    parsed = {c: _deps(landed, "value") for c in schema.fieldNames() if c not in kept}
    return [
        Table(clean, schema, f"Valid, deduplicated {dataset} rows.", {**parsed, **kept}),
        Table(
            f"{prefix}_quarantine",
            QUARANTINE_SCHEMA,
            f"Landed {dataset} rows that failed validation, with the reason.",
            {**{c: _deps(landed, "value") for c in ("reason", "raw", "raw_encoding")}, **kept},
        ),
        Table(
            f"{prefix}_duplicates",
            DUPLICATE_SCHEMA,
            f"Landed {dataset} rows removed as replays or producer retries.",
            {"duplicate_of": _deps(landed, "value", *LINEAGE_COLUMNS), **kept},
        ),
    ]


CLICK_TABLES: Final = _split_tables(CLICKS_DATASET, "click", "clean_clicks", CLICK_SCHEMA)
ORDER_TABLES: Final = _split_tables(ORDERS_DATASET, "order", "clean_orders", ORDER_SCHEMA)
_SESSION_COUNTS: Final = ("events", "page_views", "add_to_cart", "purchases")
SESSIONS: Final = Table(
    "sessions",
    SESSION_SCHEMA,
    "User sessions (30 minutes of inactivity ends one), by the UTC day they start.",
    {
        "session_id": _deps("clean_clicks", "user_id", "event_ts"),
        "user_id": _deps("clean_clicks", "user_id"),
        "session_start": _deps("clean_clicks", "event_ts"),
        "session_end": _deps("clean_clicks", "event_ts"),
        "event_date": _deps("clean_clicks", "event_ts"),
        **{c: _deps("clean_clicks", "event_type", "event_id") for c in _SESSION_COUNTS},
        "duration_seconds": _deps("clean_clicks", "event_ts"),
    },
)
_FUNNEL_COUNTS: Final = ("views", "carts", "purchases")
_FUNNEL_USERS: Final = ("viewers", "cart_users", "purchasers")
_FUNNEL_RATES: Final = ("view_to_cart_rate", "cart_to_purchase_rate", "view_to_purchase_rate")
FUNNEL: Final = Table(
    "daily_funnel",
    FUNNEL_SCHEMA,
    "Views → carts → purchases per product and day, with conversion rates.",
    {
        "event_date": _deps("clean_clicks", "event_date"),
        "product_id": _deps("clean_clicks", "product_id"),
        **{c: _deps("clean_clicks", "event_type") for c in _FUNNEL_COUNTS},
        **{c: _deps("clean_clicks", "event_type", "user_id") for c in _FUNNEL_USERS},
        **{c: _deps("clean_clicks", "event_type", "user_id") for c in _FUNNEL_RATES},
    },
)
REVENUE: Final = Table(
    "daily_revenue",
    REVENUE_SCHEMA,
    "Revenue, orders and customers per day, related to the day's sessions.",
    {
        "event_date": _deps("clean_orders", "event_date") + _deps("sessions", "event_date"),
        "orders": _deps("clean_orders", "order_id"),
        "revenue": _deps("clean_orders", "total"),
        "customers": _deps("clean_orders", "user_id"),
        "sessions": _deps("sessions", "session_id"),
        "sessions_with_purchase": _deps("sessions", "purchases"),
        "revenue_per_session": _deps("clean_orders", "total") + _deps("sessions", "session_id"),
        "average_order_value": _deps("clean_orders", "total", "order_id"),
    },
)
TABLES: Final = {t.name: t for t in (*CLICK_TABLES, *ORDER_TABLES, SESSIONS, FUNNEL, REVENUE)}
SPARK_ASSET_NAMES: Final = tuple(TABLES)
#: A multi-asset always materializes all its tables together.
SIBLINGS: Final = {
    t.name: tuple(s.name for s in group) for group in (CLICK_TABLES, ORDER_TABLES) for t in group
}
