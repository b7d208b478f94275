"""The whole platform for a directory of workload specs, as one ``Definitions``.

- the topics every valid spec reads and the datasets they land into (:mod:`.catalog`); an
  invalid spec leaves the others' assets alone (the discovery sensor reports it);
- one asset per workload (``workloads/<name>``, its page in the UI) with its checks; the
  discovery sensor reloads the code location when the workload files no longer match what was
  loaded (:mod:`orchestration.workloads.reload`);
- the host job (long-running runs of up to ``host_workloads`` workloads each), the consumer job
  (runs of one workload, for those that need a process of their own) and the discovery sensor,
  which places and keeps every enabled workload in them;
- the rewind job, the dead-letter replay job and its schedule (off until switched on in the UI).

A pipeline (the shop's Spark assets, or a team's own) is merged next to it with
``Definitions.merge``; it reads landed datasets through :mod:`orchestration.platform`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dagster import Definitions

from orchestration import settings
from orchestration.platform.catalog import landed_assets, topic_assets
from orchestration.workloads.assets import workload_assets
from orchestration.workloads.discovery import build_discovery_sensor
from orchestration.workloads.health import workload_checks
from orchestration.workloads.host_job import host_job
from orchestration.workloads.job import consumer_job
from orchestration.workloads.placement import check_host_budget
from orchestration.workloads.registry import read_registry
from orchestration.workloads.reload import definitions_loaded
from orchestration.workloads.replay_job import dead_letter_replay_schedule, replay_job
from orchestration.workloads.rewind_job import rewind_job
from orchestration.workloads.stop_jobs import start_workload_job, stop_workload_job


def lanehouse_definitions(
    workloads: Path | str | None = None,
    *,
    lake: Path | str | None = None,
    dagster_url: str | None = None,
    datasets: Iterable[str] = (),
    host_workloads: int | None = None,
) -> Definitions:
    """The platform for the specs in ``workloads``, landing into ``lake``; ``dagster_url`` lets
    the discovery sensor reload the location when the spec files change.

    Each of them left out comes from the environment (:mod:`orchestration.settings`).
    ``datasets``: landed datasets your own assets read, defined even before a spec lands there.
    ``host_workloads``: workloads per host run (default ``LANEHOUSE_HOST_WORKLOADS``, else 50; 0
    gives every workload a run of its own). Raises ``ValueError`` naming a bad value; a missing
    ``workloads`` directory given here is one (from the environment it means no workloads yet).
    """
    if workloads is not None and not Path(workloads).expanduser().is_dir():
        raise ValueError(f"workloads directory {workloads} does not exist (or is not a directory)")
    if host_workloads is not None:
        check_host_budget(host_workloads)
    places = settings.configure(workloads=workloads, lake=lake, dagster_url=dagster_url)
    directory = places.workloads
    specs = read_registry(directory).specs() if directory.is_dir() else []
    definitions_loaded(directory, specs)
    return Definitions(
        assets=[
            *topic_assets(specs),
            *workload_assets(specs),
            *landed_assets(specs, places.lake, datasets),
        ],
        asset_checks=workload_checks(specs),
        jobs=[
            consumer_job,
            host_job,
            replay_job,
            rewind_job,
            stop_workload_job,
            start_workload_job,
        ],
        schedules=[dead_letter_replay_schedule],
        # A sensor of its own: its budget is read now, and its memory of the members it wrote
        # is this platform's alone.
        sensors=[build_discovery_sensor(host_budget=host_workloads)],
    )
