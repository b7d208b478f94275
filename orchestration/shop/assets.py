"""The shop's Spark assets, their reconciliation checks and the ``spark_daily`` job: a user
of the public surface (:mod:`orchestration.platform`), as a team's own assets would be.

Every Spark asset is a thin wrapper over ``spark_jobs``: read the days of its run from the lake,
call one pure function, write the same days back; its table and lineage are in
:mod:`orchestration.shop.tables`. Everything is partitioned by one UTC day;
``BackfillPolicy.single_run()`` makes a range backfill one run, hence one Spark job over all
its days, not one JVM per day.
"""

# No ``from __future__ import annotations``: Dagster compares the asset functions' ``context``
# and resource annotations with the real classes.

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date
from typing import Any, Final

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
    MaterializeResult,
    MetadataValue,
    TableRecord,
    define_asset_job,
    in_process_executor,
    multi_asset,
)
from pyspark.sql import DataFrame

from orchestration.platform import (
    LAKE_PARTITIONS,
    SPARK_POOL,
    SPARK_RUN_TAG,
    LakeSparkResource,
    landed_key,
    platform_settings,
    read_days,
    read_landed_days,
    row_counts,
    run_days,
    table_root,
    table_schema,
    total_rows,
    write_days,
)
from orchestration.shop.datasets import CLICKS_DATASET, ORDERS_DATASET
from orchestration.shop.tables import (
    CLICK_TABLES,
    FUNNEL,
    ORDER_TABLES,
    REVENUE,
    SESSIONS,
    SPARK_ASSET_NAMES,
    TABLES,
    Table,
)
from spark_jobs import (
    RECONCILIATION_SCHEMA,
    CleanResult,
    clean_clicks,
    clean_orders,
    daily_funnel,
    daily_revenue,
    reconcile,
    sessionize,
)

SPARK_JOB_NAME: Final = "spark_daily"
RECONCILE_CHECK: Final = "reconciles"


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
    root = table_root(platform_settings().lake, table.name)
    write_days(frame, root, days, context.run.run_id)
    per_day = row_counts(root, days)
    for day, rows in per_day.items():
        context.add_asset_metadata(
            {"dagster/row_count": MetadataValue.int(rows)},
            asset_key=table.key,
            partition_key=day.isoformat(),
        )
    metadata = {
        **table.metadata(),
        "range_row_count": MetadataValue.int(sum(per_day.values())),
        "table_row_count": MetadataValue.int(total_rows(root)),
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
        read = read_landed_days(spark, dataset, days)
        for path, why in read.skipped.items():
            context.log.warning(f"landed file {path} left out: {why}")
        landed = read.frame.cache()
        try:
            result = clean(landed)
            outputs = [(clean_table, result.clean), (quarantine_table, result.quarantined)]
            outputs.append((duplicates_table, result.duplicates))
            for table, frame in outputs:
                yield _write(context, table, frame, days, read.skipped)
            lake = platform_settings().lake
            written = [read_days(spark, table_root(lake, t.name), t.schema, days) for t in tables]
            yield reconciliation_check(clean_table, landed, CleanResult(*written), days)
        finally:
            landed.unpersist()

    return _split


def _derived_asset(
    table: Table, inputs: Sequence[Table], compute: Callable[..., DataFrame]
) -> AssetsDefinition:
    """An asset computing ``table`` from ``inputs``' rows of the same days.

    A one-spec ``multi_asset``, not ``@asset``: ``@asset``'s ``backfill_policy`` is still a beta
    parameter in Dagster 1.13 and warns at every load; ``multi_asset``'s is not."""

    @multi_asset(
        name=table.name,
        specs=[
            AssetSpec(
                table.key,
                deps=[i.key for i in inputs],
                description=table.description,
                group_name="spark",
                kinds={"spark", "parquet"},
                metadata=table.metadata(),
            )
        ],
        partitions_def=LAKE_PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        pool=SPARK_POOL,
    )
    def _derived(
        context: AssetExecutionContext, pyspark: LakeSparkResource
    ) -> MaterializeResult[Any]:
        spark, days = pyspark.session(), run_days(context)
        lake = platform_settings().lake
        frames = [read_days(spark, table_root(lake, i.name), i.schema, days) for i in inputs]
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
