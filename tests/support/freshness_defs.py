"""A code location for the landed freshness test: the landed assets of one landing workload,
and one dataset a pipeline reads that no workload lands (never landed: FAIL)."""

from __future__ import annotations

from dagster import Definitions

from consumers import WorkloadSpec
from orchestration.platform.catalog import landed_assets

CLICKS = WorkloadSpec.model_validate(
    {
        "name": "clicks",
        "source": {"kind": "kafka", "bootstrap_servers": "k:9092", "topics": ["clicks"]},
        "landing": {"dataset": "clickstream"},
    }
)

defs = Definitions(assets=landed_assets([CLICKS], datasets=["orders"]))
