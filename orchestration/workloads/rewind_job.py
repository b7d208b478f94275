"""The ``rewind_workload`` job: move one workload (partition key) back to a point in time.

    launch (launchpad: partition = workload, config {to: "-2h"}; or ``lanehouse workloads rewind``)
      ─► stop the workload's consumer runs (tagged ``lanehouse/stop_reason=rewind``; they drain
         and commit) and wait until they ended and the group has no member
      ─► consumers.rewind: new positions written, landed files cut back to them
      ─► the plan as the run's output metadata and ``lanehouse/rewind`` tag; an observation of
     each source topic's asset (target, workload, records handled again)
      ─► the run ends; the discovery sensor, which launches nothing for a workload while its
         rewind runs, starts the consumer run again

``dry_run: true`` only prints what would change and stops nothing. A refused rewind (unknown
partition, a member that does not leave, a broker error) fails the run and changes nothing; the
consumer runs it stopped are started again by the sensor.
"""

# No ``from __future__ import annotations``: Dagster reads the op's ``config`` annotation.
import logging
import time

from dagster import (
    AssetKey,
    AssetObservation,
    Config,
    DagsterInstance,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunsFilter,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from consumers import LanehouseError, RewindRefused, WorkloadSpec
from consumers.rewind.apply import rewind_workload, rewinder_for
from consumers.rewind.plan import RewindPlan
from consumers.rewind.target import RewindTarget, parse_target
from orchestration import settings
from orchestration.workloads.discovery_model import Cancel, StopReason
from orchestration.workloads.finding import find_workload
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    PARTITION_TAG,
    REWIND_JOB_NAME,
    REWIND_TAG,
    topic_asset_key,
    workloads_dir,
)
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from orchestration.workloads.run_control import UNFINISHED, stop_run

__all__ = ["REWIND_STOP_REASON", "RewindConfig", "rewind_job"]

#: The stop reason of consumer runs a rewind stopped: the sensor starts them again.
REWIND_STOP_REASON: StopReason = "rewind"
_POLL_SECONDS = 0.5


class RewindConfig(Config):
    """Run config: ``{"ops": {"rewind": {"config": {"to": "-2h"}}}}``."""

    to: str = Field(
        description="earliest | latest | an ISO datetime (UTC when it has no zone) | a span "
        "back from now such as -2h or -30m"
    )
    partitions: list[int] | None = Field(
        default=None, description="Kafka partitions to rewind (every topic); all by default."
    )
    dry_run: bool = Field(default=False, description="Show what would change; change nothing.")
    stop_timeout: float = Field(
        default=180.0, gt=0, description="Seconds to wait for the consumer runs to drain."
    )


@op(description="Rewinds the workload (partition key) to the configured point in time.")
def rewind(context: OpExecutionContext, config: RewindConfig) -> Output[RewindPlan]:
    name = context.partition_key
    _, spec = find_workload(workloads_dir(), name, disabled_too=True)
    try:
        target = parse_target(config.to)
    except ValueError as exc:
        raise Failure(f"rewind of {name}: {exc}") from exc
    instance = context.instance
    instance.add_run_tags(context.run_id, {REWIND_TAG: target.describe()})
    try:
        if not config.dry_run:
            stop_consumer_runs(instance, context.log, name, target, config.stop_timeout)
            wait_for_no_members(spec, config.stop_timeout)
        plan = rewind_workload(
            spec, target, config.partitions, dry_run=config.dry_run, lake=settings.current().lake
        )
    except LanehouseError as exc:
        raise Failure(f"rewind of {name} refused, nothing changed: {exc}") from exc
    for line in plan.lines():
        context.log.info(line)
    if plan.applied:  # on the topics' assets too, where the workload's progress is reported
        for topic in spec.source.topics:
            key = AssetKey(topic_asset_key(topic, spec.source.kind))
            again = sum(m.again for m in plan.moves if m.topic == topic)
            metadata = {
                "rewind": MetadataValue.text(plan.target),
                "workload": MetadataValue.text(name),
                "records_handled_again": MetadataValue.int(again),
            }
            context.log_event(AssetObservation(asset_key=key, metadata=metadata))
    return Output(plan, metadata=plan_metadata(plan))


def stop_consumer_runs(
    instance: DagsterInstance,
    log: logging.Logger,
    name: str,
    target: RewindTarget,
    timeout: float,
) -> list[str]:
    """Stop every unfinished consumer run of ``name`` (they drain and commit) and wait until they
    ended; a run launched meanwhile is stopped too. Returns the stopped run ids."""
    stopped: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        runs = instance.get_runs(
            RunsFilter(job_name=CONSUMER_JOB_NAME, statuses=UNFINISHED, tags={PARTITION_TAG: name})
        )
        if not runs:
            if stopped:
                log.info(f"{name}: {len(stopped)} consumer run(s) ended")
            return stopped
        for run in runs:
            if run.run_id not in stopped:
                log.info(f"{name}: stopping consumer run {run.run_id} for the rewind")
                instance.add_run_tags(run.run_id, {REWIND_TAG: target.describe()})
                stop_run(instance, log, Cancel(run.run_id, name, REWIND_STOP_REASON))
                stopped.append(run.run_id)
        if time.monotonic() > deadline:
            ids = ", ".join(run.run_id for run in runs)
            raise RewindRefused(f"consumer run(s) {ids} did not end within {timeout:.0f} s")
        time.sleep(_POLL_SECONDS)


def wait_for_no_members(spec: WorkloadSpec, timeout: float) -> None:
    """Until the group has no member: a Kafka member killed outright stays until its session
    times out. (A Pulsar rewind's exclusive consumer is its own check.)"""
    group = rewinder_for(spec)
    deadline = time.monotonic() + timeout
    while members := group.members():
        if time.monotonic() > deadline:
            raise RewindRefused(
                f"{group.kind} {group.group!r} still has members after {timeout:.0f} s: "
                f"{', '.join(members)}"
            )
        time.sleep(_POLL_SECONDS)


def plan_metadata(plan: RewindPlan) -> dict[str, MetadataValue]:
    rows = "\n".join(
        f"| {m.topic} | {m.partition if m.partition >= 0 else '-'} | "
        f"{'-' if m.committed is None else m.committed} | {m.new} | {m.again} | {m.trimmed_files} |"
        for m in plan.moves
    )
    table = (
        "| topic | partition | committed before | new position | handled again | landed files cut |\n"
        "|---|---|---|---|---|---|\n" + rows
    )
    return {
        "target": MetadataValue.text(plan.target),
        "applied": MetadataValue.bool(plan.applied),
        "records_handled_again": MetadataValue.int(plan.again),
        "positions": MetadataValue.md(table),
    }


@job(
    name=REWIND_JOB_NAME,
    partitions_def=WORKLOAD_PARTITIONS,
    executor_def=in_process_executor,
    description="Rewinds one workload (partition) to a point in time: stops its consumer runs, "
    "moves its group or subscription, cuts its landed files back; the sensor restarts it.",
)
def rewind_job() -> None:
    rewind()
