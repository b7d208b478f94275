"""The assets the workload specs declare: the topics they read (external source assets, so the
lineage starts at the broker) and the ``landed_<dataset>`` datasets they land into (one per
dataset a spec lands into, the datasets a pipeline reads, and retired ones whose files the lake
still holds), each landed dataset with a freshness policy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from dagster import AssetKey, AssetSpec

from consumers import WorkloadSpec
from consumers.config.sections import check_dataset_name, is_dataset_name
from orchestration.lake.landed import LAKE_PARTITIONS, landed_freshness, landed_key, table_schema
from orchestration.workloads.names import SourceKind, topic_asset_key
from spark_jobs import LANDED_SCHEMA

_KINDS: Final[Mapping[SourceKind, str]] = {"kafka": "Kafka", "pulsar": "Pulsar"}


def topic_assets(specs: Sequence[WorkloadSpec]) -> list[AssetSpec]:
    """One source asset per (broker kind, topic), naming the workloads that read it.

    Raises ``ValueError`` when two topics would get the same key (``a.b`` and ``a_b``).
    """
    readers: dict[tuple[SourceKind, str], list[str]] = {}
    for spec in specs:
        for topic in spec.source.topics:
            readers.setdefault((spec.source.kind, topic), []).append(spec.name)
    assets: list[AssetSpec] = []
    owners: dict[tuple[str, ...], str] = {}
    for (kind, topic), names in sorted(readers.items()):
        key = tuple(topic_asset_key(topic, kind))
        if key in owners:
            raise ValueError(
                f"{_KINDS[kind]} topics {owners[key]!r} and {topic!r} both map to the asset key "
                f"{'/'.join(key)}: rename one of them"
            )
        owners[key] = topic
        workloads = ", ".join(sorted(names))
        asset = AssetSpec(
            key=list(key),
            description=f"{_KINDS[kind]} topic {topic!r}, read by {workloads}.",
            group_name="topics",
            kinds={kind},
            metadata={"topic": topic, "workloads": workloads},
        )
        assets.append(asset)
    return assets


def landed_assets(
    specs: Sequence[WorkloadSpec], lake: Path | None = None, datasets: Iterable[str] = ()
) -> list[AssetSpec]:
    """One ``landed_<dataset>`` per dataset some spec lands into, plus each of ``datasets`` (those
    a pipeline's assets read, defined before any spec lands there),
    plus each dataset the ``lake`` holds files of that no spec lands into any more: retired
    (metadata ``retired``), defined while its files stay so the catalog never lists it without
    a definition, and without a freshness policy (nobody lands it).

    Its deps are the topics of the workloads landing there.
    """
    writers: dict[str, list[WorkloadSpec]] = {}
    for dataset in datasets:
        writers[check_dataset_name(dataset)] = []
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
