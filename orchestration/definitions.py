"""The Dagster code location (``workspace.yaml`` loads ``defs`` from here).

- the topics every valid workload spec reads (Kafka and Pulsar), as external source assets, so
  the lineage starts at the broker (an invalid spec leaves the others' assets alone: the
  discovery sensor reports it);
- one asset per workload (``workloads/<name>``, its page in the UI) with its checks
  (:mod:`orchestration.workloads.assets`); the discovery sensor reloads the code location when
  the workload files no longer match what was loaded (:mod:`orchestration.workloads.reload`);
- the consumer job (one long-running run per workload partition);
- the discovery sensor, which keeps one consumer run per enabled workload;
- the dead-letter replay job and its schedule (off until switched on in the UI);
- the lake (docs/lake.md): ``landed_<dataset>`` assets fed by those topics, the Spark assets
  and their checks, the ``spark_daily`` job, the closed-day sensor and two schedules.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from dagster import AssetSpec, Definitions

from consumers.config.spec import WorkloadSpec
from orchestration.workloads.names import SourceKind, topic_asset_key, workloads_dir
from orchestration.workloads.registry import read_registry

_KINDS: Final[Mapping[SourceKind, str]] = {"kafka": "Kafka", "pulsar": "Pulsar"}


def topic_assets(specs: list[WorkloadSpec]) -> list[AssetSpec]:
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


def build_definitions(directory: Path) -> Definitions:
    from consumers.landing.files import default_lake
    from orchestration.lake.assets import SPARK_JOB, spark_assets, spark_resource
    from orchestration.lake.automation import SCHEDULES, SENSORS
    from orchestration.lake.landed import landed_assets
    from orchestration.workloads.assets import workload_assets
    from orchestration.workloads.discovery import workload_discovery_sensor
    from orchestration.workloads.health import workload_checks
    from orchestration.workloads.job import consumer_job
    from orchestration.workloads.reload import definitions_loaded
    from orchestration.workloads.replay_job import dead_letter_replay_schedule, replay_job
    from orchestration.workloads.rewind_job import rewind_job

    specs = read_registry(directory).specs() if directory.is_dir() else []
    definitions_loaded(directory, specs)
    landed = landed_assets(specs, default_lake())
    return Definitions(
        assets=[*topic_assets(specs), *workload_assets(specs), *landed, *spark_assets()],
        asset_checks=workload_checks(specs),
        jobs=[consumer_job, replay_job, rewind_job, SPARK_JOB],
        schedules=[dead_letter_replay_schedule, *SCHEDULES],
        sensors=[
            workload_discovery_sensor,
            *SENSORS,
        ],
        resources={"pyspark": spark_resource()},
    )


defs = build_definitions(workloads_dir())
