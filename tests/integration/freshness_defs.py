"""A code location for the landed freshness test: the landed assets of one landing workload."""

from __future__ import annotations

from dagster import Definitions

from consumers.config.spec import WorkloadSpec
from orchestration.lake.landed import landed_assets

CLICKS = WorkloadSpec.model_validate(
    {
        "name": "clicks",
        "source": {"kind": "kafka", "bootstrap_servers": "k:9092", "topics": ["clicks"]},
        "landing": {"dataset": "clickstream"},
    }
)

defs = Definitions(assets=landed_assets([CLICKS]))
