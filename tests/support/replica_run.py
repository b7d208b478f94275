"""A run worker for one consumer run: ``python -m tests.support.replica_run RUN_ID``
executes the run (created by the test the way the sensor daemon creates it) on the instance at
``$DAGSTER_HOME``, as ``dagster api execute_run`` does, and exits once the run ends (stop it by
marking it CANCELING, as the sensor does). ``$LH_HEARTBEAT_SECONDS`` shortens the heartbeat so
a test can see a killed worker declared dead in seconds."""

from __future__ import annotations

import logging
import os
import sys

from dagster import DagsterInstance, reconstructable
from dagster._core.execution.api import execute_run

from orchestration.workloads import job as job_module
from orchestration.workloads.job import consumer_job


def main(run_id: str) -> None:
    # The module global the op reads (imported there as a Final constant; this process only).
    vars(job_module)["HEARTBEAT_SECONDS"] = float(os.environ.get("LH_HEARTBEAT_SECONDS", "10"))
    with DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None, run_id
        execute_run(reconstructable(consumer_job), run, instance)


if __name__ == "__main__":
    # The engine's own lines (assignments, revokes, commits) into this process's log.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main(sys.argv[1])
