"""One replica's consumer run in a process of its own, as a run worker executes it:
``python -m tests.integration.replica_run WORKLOAD REPLICA`` runs ``consume_workload`` for
partition WORKLOAD in process on the instance at ``$DAGSTER_HOME``, tagged with the replica, and
exits once the run ends (terminate it by marking it CANCELING, as Dagster does)."""

from __future__ import annotations

import logging
import sys

from dagster import DagsterInstance

from orchestration.workloads.job import consumer_job
from orchestration.workloads.names import REPLICA_TAG


def main(workload: str, replica: str) -> None:
    with DagsterInstance.get() as instance:
        consumer_job.execute_in_process(
            partition_key=workload,
            instance=instance,
            run_config={"ops": {"consume": {"config": {"observe_every_seconds": 0.5}}}},
            tags={REPLICA_TAG: replica},
            raise_on_error=False,
        )


if __name__ == "__main__":
    # The engine's own lines (assignments, revokes, commits) into the test's log of this process.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main(*sys.argv[1:3])
