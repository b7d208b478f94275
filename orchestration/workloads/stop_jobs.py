"""Stop and start one workload by hand, wherever it runs: two small jobs partitioned by workload.

    stop_workload  (partition = workload) ─► marked stopped by a person: at its next tick the
                   discovery sensor takes it off its host run (it drains and commits, its
                   neighbours go on), or stops its own runs, and starts nothing for it
    start_workload (partition = workload) ─► the mark is cleared: the sensor places it again

For a workload in a host run, terminating the run would stop all its neighbours: these jobs are
how a person stops one (Jobs → ``stop_workload`` → Launchpad → pick the workload → Launch). A
workload with runs of its own can be stopped the same way, or by terminating its run.
"""

# No ``from __future__ import annotations``: Dagster reads the ops' ``context`` annotation.
from dagster import OpExecutionContext, job, op

from orchestration.workloads.host_store import write_stopped
from orchestration.workloads.names import START_JOB_NAME, STOP_JOB_NAME
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS

__all__ = ["start_workload_job", "stop_workload_job"]


@op(description="Marks the workload (the partition key) stopped by a person.")
def mark_stopped(context: OpExecutionContext) -> None:
    name = context.partition_key
    write_stopped(context.instance, name, True, context.run_id)
    context.log.info(
        f"workload {name}: stopped by a person; the discovery sensor drains it at its next tick "
        f"and starts nothing for it until {START_JOB_NAME} runs for {name!r}"
    )


@op(description="Clears the workload's stop: the discovery sensor starts it again.")
def clear_stopped(context: OpExecutionContext) -> None:
    name = context.partition_key
    write_stopped(context.instance, name, False, context.run_id)
    context.log.info(f"workload {name}: started again; the discovery sensor places it next tick")


@job(
    name=STOP_JOB_NAME,
    partitions_def=WORKLOAD_PARTITIONS,
    description="Stop one workload (the partition) wherever it runs, its neighbours untouched.",
)
def stop_workload_job() -> None:
    mark_stopped()


@job(
    name=START_JOB_NAME,
    partitions_def=WORKLOAD_PARTITIONS,
    description="Start again a workload stopped with stop_workload (the partition).",
)
def start_workload_job() -> None:
    clear_stopped()
