"""The Dagster code location of this repository (``workspace.yaml`` loads ``defs`` from here):
the platform for the workload specs (:mod:`orchestration.platform`) plus the shop's pipeline
(:mod:`orchestration.shop`), merged, as a team would assemble its own project."""

from __future__ import annotations

from pathlib import Path

from dagster import Definitions

from orchestration.platform import lanehouse_definitions
from orchestration.shop.datasets import SHOP_DATASETS
from orchestration.shop.pipeline import shop_definitions


def build_definitions(directory: Path | None = None) -> Definitions:
    """Platform and shop; ``directory`` of workload specs, default ``LANEHOUSE_WORKLOADS``."""
    return Definitions.merge(
        lanehouse_definitions(directory, datasets=SHOP_DATASETS), shop_definitions()
    )


defs = build_definitions()
