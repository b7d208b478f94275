"""Lanehouse as a Dagster Component: a project declares the platform in a ``defs.yaml``::

    type: orchestration.platform.LanehouseComponent
    attributes:
      workloads: workloads          # a directory of workload specs
      lake: .lanehouse/lake         # where landed files and tables live
      dagster_url: http://127.0.0.1:3000
      datasets: [clickstream]       # landed datasets your own assets read
      host_workloads: 50            # workloads per host run; 0: a run each

Relative paths are read from the project's root. The fields are checked when the location
loads (``dg check defs`` shows a bad one with its line); everything else is
:func:`orchestration.platform.lanehouse_definitions`.
"""

# No ``from __future__ import annotations``: Dagster resolves the fields' annotations.

from pathlib import Path

from dagster import Component, ComponentLoadContext, Definitions, Model, Resolvable
from pydantic import Field, field_validator

from consumers.config.sections import check_dataset_name
from orchestration.platform.definitions import lanehouse_definitions
from orchestration.settings import check_dagster_url
from orchestration.workloads.placement import check_host_budget


class LanehouseComponent(Component, Model, Resolvable):
    """Kafka and Pulsar consuming workloads, their landed datasets, and the jobs, sensor and
    checks that keep them running, for a directory of workload specs."""

    workloads: str = Field(description="Directory of workload spec files (YAML).")
    lake: str | None = Field(
        default=None,
        description="Where landed Parquet files and tables live (default: LANEHOUSE_LAKE, or "
        ".lanehouse/lake of the working directory).",
    )
    dagster_url: str | None = Field(
        default=None,
        description="The webserver's address, e.g. http://127.0.0.1:3000: the discovery sensor "
        "reloads the location through it when workload files change.",
    )
    datasets: list[str] = Field(
        default_factory=list,
        description="Landed datasets your own assets read, defined before any spec lands there.",
    )

    host_workloads: int | None = Field(
        default=None,
        description="Workloads per host run (default: LANEHOUSE_HOST_WORKLOADS, else 50); 0 "
        "gives every workload a run of its own.",
    )

    @field_validator("dagster_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return check_dagster_url(url)

    @field_validator("host_workloads")
    @classmethod
    def _host_workloads(cls, budget: int | None) -> int | None:
        return check_host_budget(budget) if budget is not None else None

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, names: list[str]) -> list[str]:
        return [check_dataset_name(name) for name in names]

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        root = Path(context.project_root)
        workloads = root / self.workloads
        if not workloads.is_dir():
            raise ValueError(
                f"LanehouseComponent.workloads: {workloads} is not a directory (relative paths "
                f"are read from the project root {root})"
            )
        return lanehouse_definitions(
            workloads,
            lake=root / self.lake if self.lake else None,
            dagster_url=self.dagster_url,
            datasets=self.datasets,
            host_workloads=self.host_workloads,
        )
