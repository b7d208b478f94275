"""The Dagster code location (``workspace.yaml`` loads ``defs`` from here).

- the topics every valid workload spec reads (Kafka and Pulsar), as external source assets, so
  the lineage starts at the broker (an invalid spec leaves the others' assets alone: the
  discovery sensor reports it);
- the consumer job (one long-running run per workload partition);
- the discovery sensor, which keeps one consumer run per enabled workload;
- the dead-letter replay job and its schedule (off until switched on in the UI).

Spark assets come with the landing issue.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from dagster import AssetSpec, Definitions

from consumers.spec import WorkloadSpec
from orchestration.registry import read_registry
from orchestration.workloads import SourceKind, topic_asset_key, workloads_dir

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
    from orchestration.consumer_job import consumer_job
    from orchestration.dead_letter_replay import dead_letter_replay_schedule, replay_job
    from orchestration.discovery import workload_discovery_sensor

    specs = read_registry(directory).specs() if directory.is_dir() else []
    return Definitions(
        assets=topic_assets(specs),
        jobs=[consumer_job, replay_job],
        schedules=[dead_letter_replay_schedule],
        sensors=[workload_discovery_sensor],
    )


defs = build_definitions(workloads_dir())
