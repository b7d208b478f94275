"""The lake in Dagster: landed datasets, the Spark assets built from them, their checks and job.

    topics/<topic> ──▶ landed_clickstream ──▶ clean_clicks, click_quarantine, click_duplicates
                                               clean_clicks ──▶ sessions, daily_funnel
    topics/<topic> ──▶ landed_orders ──▶ clean_orders, order_quarantine, order_duplicates
                                  clean_orders + sessions ──▶ daily_revenue

Landed assets are ``AssetSpec``s only (:mod:`orchestration.lake.landed`, with the day
partitions): consumer runs report their materializations (one per closed file or day). Every
Spark asset is a thin wrapper over ``spark_jobs``: read the days of its run from storage, call
one pure function, write the same days back (:mod:`orchestration.lake.tables`).
Everything is partitioned by one UTC day; ``BackfillPolicy.single_run()`` makes a range
backfill one run, hence one Spark job over all its days, not one JVM per day.
"""

# No ``from __future__ import annotations``: Dagster compares the asset functions' ``context``
# and resource annotations with the real classes.

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Final, cast

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    BackfillPolicy,
    InitResourceContext,
    MaterializeResult,
    MetadataValue,
    TableColumnDep,
    TableColumnLineage,
    TableRecord,
    asset,
    define_asset_job,
    in_process_executor,
    multi_asset,
)
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from consumers.landing.files import default_lake
from orchestration.lake import tables as lake_tables
from orchestration.lake.landed import (
    CLICKS_DATASET,
    LAKE_PARTITIONS,
    ORDERS_DATASET,
    landed_key,
    table_schema,
)
from orchestration.lake.runs import SPARK_POOL, SPARK_RUN_TAG
from orchestration.lake.spark_config import is_local, public_conf, secret_conf, session_conf
from spark_jobs import (
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
    CleanResult,
    clean_clicks,
    clean_orders,
    daily_funnel,
    daily_revenue,
    prepare_local_environment,
    reconcile,
    sessionize,
)

SPARK_JOB_NAME: Final = "spark_daily"
#: The clean table of each dataset, which carries its reconciliation check.
PROCESSED_DATASET: Final = {"clean_clicks": CLICKS_DATASET, "clean_orders": ORDERS_DATASET}
RECONCILE_CHECK: Final = "reconciles"


# --------------------------------------------------------------------------- Spark resource


class LakeSparkResource(PySparkResource):
    """``PySparkResource`` for the Spark assets (settings: ``orchestration.lake.spark_config``).

    With a local master it first puts ``LOCAL_SPARK_ENV`` in the environment the JVM inherits
    (never for a cluster: ``SPARK_LOCAL_IP=127.0.0.1`` would hide the driver from executors).
    Properties that look secret are not in ``spark_config`` (the UI shows it): they are read
    from ``LANEHOUSE_SPARK_CONF`` when the run starts. It never stops the session: one run
    (in-process executor) shares one.
    """

    def effective_conf(self) -> dict[str, str]:
        """What the session is built with: the config plus the secret properties."""
        return {**self.spark_config, **secret_conf(session_conf())}

    def setup_for_execution(self, context: InitResourceContext) -> None:
        conf = self.effective_conf()
        if is_local(str(conf.get("spark.master", ""))):
            prepare_local_environment()
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        self._spark_session = builder.getOrCreate()

    def session(self) -> SparkSession:
        return cast(SparkSession, self.spark_session)


def spark_resource() -> LakeSparkResource:
    """The Spark assets' resource; a bad ``LANEHOUSE_SPARK_CONF`` stops the code location from
    loading with a ``ValueError`` naming it."""
    config: dict[str, Any] = public_conf(session_conf())
    return LakeSparkResource(spark_config=config)


# --------------------------------------------------------------------------- tables


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


def run_days(context: AssetExecutionContext) -> list[date]:
    """The days of this run: one partition, or a whole range under a single-run backfill."""
    return [date.fromisoformat(key) for key in context.partition_keys]


def _write(
    context: AssetExecutionContext,
    table: Table,
    frame: DataFrame,
    days: Sequence[date],
    skipped: Mapping[str, str] | None = None,
) -> MaterializeResult[Any]:
    """Write ``days`` of ``table``; the materialization with its row counts as written. A range
    run materializes each day with the result's metadata, so ``dagster/row_count`` is set per
    day (a day without rows reads 0, not the range's total); the range's and the table's totals
    are named as such, and landed files left out of the input (``skipped``) are listed."""
    root = lake_tables.table_root(default_lake(), table.name)
    lake_tables.write_days(frame, root, days, context.run.run_id)
    per_day = lake_tables.row_counts(root, days)
    for day, rows in per_day.items():
        context.add_asset_metadata(
            {"dagster/row_count": MetadataValue.int(rows)},
            asset_key=table.key,
            partition_key=day.isoformat(),
        )
    metadata = {
        **table.metadata(),
        "range_row_count": MetadataValue.int(sum(per_day.values())),
        "table_row_count": MetadataValue.int(lake_tables.total_rows(root)),
        "rows_per_day": MetadataValue.json({d.isoformat(): n for d, n in per_day.items()}),
        "path": MetadataValue.path(str(root)),
    }
    if skipped is not None:
        metadata["skipped_files"] = MetadataValue.int(len(skipped))
        metadata["skipped_paths"] = MetadataValue.json(dict(skipped))
    return MaterializeResult(asset_key=table.key, metadata=metadata)


_RECONCILE_SCHEMA: Final = table_schema(RECONCILIATION_SCHEMA)


def reconciliation_check(
    clean_table: Table, landed: DataFrame, written: CleanResult, days: Sequence[date]
) -> AssetCheckResult:
    """Per day: landed rows = clean + quarantined + duplicates, as written to disk."""
    got = {r["event_date"]: r.asDict() for r in reconcile(landed, written).collect()}
    zero = {"landed": 0, "clean": 0, "quarantined": 0, "duplicates": 0, "unaccounted": 0}
    rows = [{**zero, **got.get(day, {}), "event_date": day.isoformat()} for day in days]
    off = [r["event_date"] for r in rows if r["unaccounted"] != 0]
    return AssetCheckResult(
        asset_key=clean_table.key,
        check_name=RECONCILE_CHECK,
        passed=not off,
        severity=AssetCheckSeverity.ERROR,
        description=f"unaccounted rows on {', '.join(off)}" if off else "all rows accounted for",
        metadata={
            "per_day": MetadataValue.table(
                records=[TableRecord(r) for r in rows], schema=_RECONCILE_SCHEMA
            ),
            "days_unaccounted": MetadataValue.int(len(off)),
        },
    )


def _cleaning_asset(
    name: str, dataset: str, tables: list[Table], clean: Callable[[DataFrame], CleanResult]
) -> AssetsDefinition:
    clean_table, quarantine_table, duplicates_table = tables

    @multi_asset(
        name=name,
        pool=SPARK_POOL,
        specs=[
            AssetSpec(
                t.key,
                deps=[landed_key(dataset)],
                description=t.description,
                group_name="spark",
                kinds={"spark", "parquet"},
                metadata=t.metadata(),
            )
            for t in tables
        ],
        check_specs=[
            AssetCheckSpec(
                RECONCILE_CHECK,
                asset=clean_table.key,
                description=f"{landed_key(dataset).to_user_string()} rows = clean + "
                "quarantined + duplicates, per day",
            )
        ],
        partitions_def=LAKE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
    )
    def _split(
        context: AssetExecutionContext, pyspark: LakeSparkResource
    ) -> Iterator[MaterializeResult[Any] | AssetCheckResult]:
        spark, days = pyspark.session(), run_days(context)
        root = lake_tables.landed_root(default_lake(), dataset)
        read = lake_tables.read_landed(spark, root, LANDED_SCHEMA, days)
        for path, why in read.skipped.items():
            context.log.warning(f"landed file {path} left out: {why}")
        landed = read.frame.cache()
        try:
            result = clean(landed)
            outputs = [(clean_table, result.clean), (quarantine_table, result.quarantined)]
            outputs.append((duplicates_table, result.duplicates))
            for table, frame in outputs:
                yield _write(context, table, frame, days, read.skipped)
            lake = default_lake()
            written = [
                lake_tables.read_days(spark, lake_tables.table_root(lake, t.name), t.schema, days)
                for t in tables
            ]
            yield reconciliation_check(clean_table, landed, CleanResult(*written), days)
        finally:
            landed.unpersist()

    return _split


def _derived_asset(
    table: Table, inputs: Sequence[Table], compute: Callable[..., DataFrame]
) -> AssetsDefinition:
    """An asset computing ``table`` from ``inputs``' rows of the same days."""

    @asset(
        name=table.name,
        deps=[i.key for i in inputs],
        description=table.description,
        group_name="spark",
        kinds={"spark", "parquet"},
        metadata=table.metadata(),
        partitions_def=LAKE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        pool=SPARK_POOL,
    )
    def _derived(
        context: AssetExecutionContext, pyspark: LakeSparkResource
    ) -> MaterializeResult[Any]:
        spark, days = pyspark.session(), run_days(context)
        lake = default_lake()
        frames = [
            lake_tables.read_days(spark, lake_tables.table_root(lake, i.name), i.schema, days)
            for i in inputs
        ]
        return _write(context, table, compute(*frames), days)

    return _derived


def spark_assets() -> list[AssetsDefinition]:
    return [
        _cleaning_asset("clean_clickstream", CLICKS_DATASET, CLICK_TABLES, clean_clicks),
        _cleaning_asset("clean_order_stream", ORDERS_DATASET, ORDER_TABLES, clean_orders),
        _derived_asset(SESSIONS, [TABLES["clean_clicks"]], sessionize),
        _derived_asset(FUNNEL, [TABLES["clean_clicks"]], daily_funnel),
        _derived_asset(REVENUE, [TABLES["clean_orders"], SESSIONS], daily_revenue),
    ]


#: Every Spark asset in one run and one process (one SparkSession), one Spark run at a time on
#: the instance (``SPARK_RUN_TAG``'s concurrency limit).
SPARK_JOB: Final = define_asset_job(
    SPARK_JOB_NAME,
    selection=AssetSelection.assets(*(AssetKey(n) for n in SPARK_ASSET_NAMES)),
    executor_def=in_process_executor,
    run_tags={SPARK_RUN_TAG: "daily"},
    description="Clean tables and daily metrics for a day or a range of days.",
)
