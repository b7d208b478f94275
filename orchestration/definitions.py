"""The Dagster code location (``workspace.yaml`` loads ``defs`` from here).

For now it declares the topics every workload spec reads as external source assets, so the
lineage starts at the broker. Sensors, consumer jobs and Spark assets come with the
orchestration and landing issues.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dagster import AssetSpec, Definitions

from consumers.spec import WorkloadSpec, load_specs

#: Where workload specs live; ``LANEHOUSE_WORKLOADS`` overrides it.
DEFAULT_WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"


def topic_asset_key(topic: str) -> list[str]:
    """``["topics", "<topic with . and - as _>"]``: Dagster keys allow only word characters."""
    return ["topics", re.sub(r"[^A-Za-z0-9_]", "_", topic)]


def topic_assets(specs: list[WorkloadSpec]) -> list[AssetSpec]:
    readers: dict[str, list[str]] = {}
    for spec in specs:
        for topic in spec.source.topics:
            readers.setdefault(topic, []).append(spec.name)
    return [
        AssetSpec(
            key=topic_asset_key(topic),
            description=f"Kafka topic {topic!r}, read by {', '.join(sorted(names))}.",
            group_name="topics",
            kinds={"kafka"},
            metadata={"topic": topic, "workloads": ", ".join(sorted(names))},
        )
        for topic, names in sorted(readers.items())
    ]


def build_definitions(workloads_dir: Path) -> Definitions:
    specs = load_specs([workloads_dir], import_handler=False)
    return Definitions(assets=topic_assets(specs))


defs = build_definitions(Path(os.environ.get("LANEHOUSE_WORKLOADS", DEFAULT_WORKLOADS)))
