"""Pure PySpark transformations: landed Kafka/Pulsar records to clean tables and daily metrics.

Each function takes DataFrames and returns one (or a ``CleanResult`` of three) whose schema is
the matching constant in ``spark_jobs.schemas``; none reads or writes storage, so the Dagster
assets stay thin wrappers and tests need nothing but a local session.
"""

from spark_jobs.cleaning import CleanResult, clean_clicks, clean_orders, reconcile
from spark_jobs.funnel import daily_funnel
from spark_jobs.revenue import daily_revenue
from spark_jobs.schemas import (
    CLICK_SCHEMA,
    DUPLICATE_SCHEMA,
    FUNNEL_SCHEMA,
    LANDED_SCHEMA,
    LINEAGE_COLUMNS,
    ORDER_SCHEMA,
    QUARANTINE_SCHEMA,
    RECONCILIATION_SCHEMA,
    REVENUE_SCHEMA,
    SESSION_SCHEMA,
)
from spark_jobs.session import (
    LOCAL_SPARK_CONF,
    LOCAL_SPARK_ENV,
    local_spark_session,
    prepare_local_environment,
)
from spark_jobs.sessions import sessionize

# Plain `sorted()` order, the order tests/unit/test_public_api.py holds `consumers` to; ruff's
# isort-style order (constants, classes, functions) would differ.
__all__ = [  # noqa: RUF022
    "CLICK_SCHEMA",
    "CleanResult",
    "DUPLICATE_SCHEMA",
    "FUNNEL_SCHEMA",
    "LANDED_SCHEMA",
    "LINEAGE_COLUMNS",
    "LOCAL_SPARK_CONF",
    "LOCAL_SPARK_ENV",
    "ORDER_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RECONCILIATION_SCHEMA",
    "REVENUE_SCHEMA",
    "SESSION_SCHEMA",
    "clean_clicks",
    "clean_orders",
    "daily_funnel",
    "daily_revenue",
    "local_spark_session",
    "prepare_local_environment",
    "reconcile",
    "sessionize",
]
