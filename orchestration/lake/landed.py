"""The lake's day partitions and its landed datasets: ``landed_<dataset>`` assets (one per
dataset a workload lands into, plus the two the Spark assets read, plus retired ones whose files
the lake still holds), each with a freshness policy.

Landed assets are ``AssetSpec``s only: consumer runs report their materializations
(:mod:`orchestration.workloads.reporting`), and the Spark assets (:mod:`orchestration.lake.assets`)
read them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Final

from dagster import (
    AssetKey,
    AssetSpec,
    DailyPartitionsDefinition,
    FreshnessPolicy,
    TableColumn,
    TableSchema,
)
from pyspark.sql.types import StructType

from consumers.config.sections import is_dataset_name
from consumers.config.spec import WorkloadSpec
from orchestration.demo.events import STREAM_DATASETS
from orchestration.workloads.names import topic_asset_key
from spark_jobs import LANDED_SCHEMA

DEFAULT_LAKE_START: Final = date(2026, 1, 1)
#: A landed dataset whose latest materialization is older than this is stale (freshness FAIL).
DEFAULT_LANDED_MAX_AGE_MINUTES: Final = 60
#: Datasets the Spark assets read: their landed assets exist even when no spec lands there.
CLICKS_DATASET: Final = STREAM_DATASETS["clicks"]
ORDERS_DATASET: Final = STREAM_DATASETS["orders"]


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
    if not raw.isdigit() or int(raw) == 0:
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


def landed_assets(specs: Sequence[WorkloadSpec], lake: Path | None = None) -> list[AssetSpec]:
    """One ``landed_<dataset>`` per dataset some spec lands into, plus clickstream and orders,
    plus each dataset the ``lake`` holds files of that no spec lands into any more: retired
    (metadata ``retired``), defined while its files stay so the catalog never lists it without
    a definition, and without a freshness policy (nobody lands it).

    Its deps are the topics of the workloads landing there.
    """
    writers: dict[str, list[WorkloadSpec]] = {CLICKS_DATASET: [], ORDERS_DATASET: []}
    for spec in specs:
        if spec.landing is not None:
            writers.setdefault(spec.landing.dataset, []).append(spec)
    retired = set(_datasets_in(lake)) - writers.keys() if lake is not None else set()
    writers.update({dataset: [] for dataset in retired})
    assets = []
    for dataset, landing_specs in sorted(writers.items()):
        topics = sorted(
            {
                AssetKey(topic_asset_key(topic, spec.source.kind))
                for spec in landing_specs
                for topic in spec.source.topics
            },
            key=AssetKey.to_user_string,
        )
        workloads = ", ".join(sorted(s.name for s in landing_specs)) or "no workload yet"
        description = f"Records landed as Parquet under landed/{dataset}/ by {workloads}."
        if dataset in retired:
            workloads = "none now (retired)"
            description = (
                f"Records landed earlier as Parquet under landed/{dataset}/; no workload lands "
                "here now (retired). Its files stay in the lake until you delete them."
            )
        assets.append(
            AssetSpec(
                key=landed_key(dataset),
                deps=list(topics),
                description=description,
                group_name="landed",
                kinds={"parquet"},
                partitions_def=LAKE_PARTITIONS,
                # Fresh while some day was landed within the window (evaluated by Dagster's
                # freshness daemon, see instance.py); a retired dataset is landed by nobody.
                freshness_policy=None if dataset in retired else landed_freshness(),
                metadata={
                    "dataset": dataset,
                    "workloads": workloads,
                    "retired": dataset in retired,
                    "dagster/column_schema": table_schema(LANDED_SCHEMA),
                },
            )
        )
    return assets


def _datasets_in(lake: Path) -> list[str]:
    """Datasets the lake holds a directory of (other names are not ours: ignored)."""
    try:
        return [
            d.name for d in (lake / "landed").iterdir() if d.is_dir() and is_dataset_name(d.name)
        ]
    except OSError:  # no lake yet
        return []
