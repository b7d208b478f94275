"""One replica of a bench workload as a Dagster run in a process of its own, as a run worker
executes it: ``python -m bench.replica_run WORKLOAD REPLICA`` runs ``consume_workload`` for
partition WORKLOAD in process on the instance at ``$DAGSTER_HOME``, tagged with the replica, and
exits once the run ends (the bench marks it CANCELING, as the discovery sensor does).

The bench's copy of ``tests/support/replica_run.py`` (bench code never imports tests/).
Observations every 5 s and the engine's log at WARNING, as ``lanehouse consume --log-level
WARNING`` in the bench's cli mode: what a run costs on top of the engine is part of the measure.
"""

from __future__ import annotations

import logging
import sys

from dagster import DagsterInstance

from orchestration.workloads.job import consumer_job
from orchestration.workloads.names import REPLICA_TAG

OBSERVE_EVERY_SECONDS = 5


def main(workload: str, replica: str) -> None:
    """Run the replica until its run ends; the bench reads the run's status, not this exit."""
    with DagsterInstance.get() as instance:
        consumer_job.execute_in_process(
            partition_key=workload,
            instance=instance,
            run_config={
                "ops": {"consume": {"config": {"observe_every_seconds": OBSERVE_EVERY_SECONDS}}}
            },
            tags={REPLICA_TAG: replica},
            raise_on_error=False,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    main(*sys.argv[1:3])
