"""The Dagster instance Lanehouse runs on: ``$DAGSTER_HOME/dagster.yaml`` under the state dir.

Why each setting:

- storage: Dagster's default, SQLite files under ``DAGSTER_HOME`` (production points it at
  PostgreSQL; see docs/operations.md).
- ``concurrency.runs.max_concurrent_runs: -1``: a consumer run never ends, so Dagster's default
  limit of 10 runs in progress would fill up with consumers and queue everything else forever.
  Spark runs, which do end, are limited by their tag and by the ``spark`` pool of their assets
  (which also catches runs launched without the tag, like a backfill from the UI), and
  dead-letter replays to one per workload.
- telemetry off.
- ``freshness``: the daemon evaluates the landed datasets' freshness policies
  (:func:`orchestration.lake.landed.landed_freshness`) every 30 s; off, they stay UNKNOWN.
- ``run_monitoring``: the daemon fails a run stuck STARTING (its worker never came up) after
  ``start_timeout_seconds`` and ends a run stuck CANCELING (nobody left to finish the drain)
  after ``cancel_timeout_seconds``; the discovery sensor then starts the workload again. A
  drain longer than that timeout is cut short, so keep ``drain_timeout`` well below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import yaml

from consumers.config.loading import default_lake, state_dir
from orchestration.lake.runs import SPARK_RUN_LIMIT, SPARK_RUN_TAG
from orchestration.workloads.names import REPLAY_RUN_TAG


def lake_dir(state: Path | None = None) -> Path:
    """Where landed files and Spark tables live: ``LANEHOUSE_LAKE``, else ``<state>/lake``."""
    return default_lake(state_dir(state))


#: Seconds a run may stay STARTING, and CANCELING, before the daemon gives up on its worker.
RUN_START_TIMEOUT: Final = 180
RUN_CANCEL_TIMEOUT: Final = 600


def instance_config() -> dict[str, Any]:
    return {
        "telemetry": {"enabled": False},
        "run_monitoring": {
            "enabled": True,
            "start_timeout_seconds": RUN_START_TIMEOUT,
            "cancel_timeout_seconds": RUN_CANCEL_TIMEOUT,
        },
        "freshness": {"enabled": True},
        "concurrency": {
            "runs": {
                "max_concurrent_runs": -1,
                "tag_concurrency_limits": [
                    {"key": SPARK_RUN_TAG, "limit": SPARK_RUN_LIMIT},
                    # one dead-letter replay per workload at a time (its group does not lock)
                    {
                        "key": REPLAY_RUN_TAG,
                        "value": {"applyLimitPerUniqueValue": True},
                        "limit": 1,
                    },
                ],
            },
            # Run granularity: a run waits in the queue, before its process (and JVM) starts,
            # until its ops' pools have a free slot. Only the Spark assets have a pool.
            "pools": {"granularity": "run", "default_limit": SPARK_RUN_LIMIT},
        },
    }


def prepare_dagster_home(state: Path) -> Path:
    """Create ``<state>/dagster`` with Lanehouse's ``dagster.yaml``; return it (``DAGSTER_HOME``).

    The file is rewritten every time so an upgrade of Lanehouse brings its settings along; runs,
    event logs and schedules in the same directory are kept.
    """
    home = (state / "dagster").resolve()
    _write_generated(home / "dagster.yaml", instance_config())
    return home


def _write_generated(path: Path, config: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# Written by `lanehouse up` (orchestration/local/instance.py); edits are overwritten.\n"
    )
    path.write_text(header + yaml.safe_dump(config, sort_keys=False))


#: The shared pool every workload of ``lanehouse up`` draws from unless a config file says more.
UP_POOL_SIZE: Final = 1000


def prepare_platform_config(state: Path) -> Path:
    """The platform config ``lanehouse up`` gives its runs: ``LANEHOUSE_CONFIG`` or
    ``./lanehouse.yaml`` if there is one, else ``<state>/lanehouse.yaml`` (rewritten each time)
    declaring the ``default`` pool shared through ``<state>/permits.db`` and the default
    clusters the example workloads name (addresses from the runs' environment). Every
    consumer run is its own process, so only a shared pool makes the limit hold across
    workloads."""
    from consumers.config.platform import DEFAULT_CLUSTERS, config_path, default_permits_url

    given = config_path()
    if given is not None:
        return given.resolve()
    path = (state / "lanehouse.yaml").resolve()
    pools = {"default": {"size": UP_POOL_SIZE}}
    permits = {"url": default_permits_url(state), "pools": pools}
    clusters = {name: dict(cluster) for name, cluster in DEFAULT_CLUSTERS.items()}
    _write_generated(path, {"permits": permits, "clusters": clusters})
    return path
