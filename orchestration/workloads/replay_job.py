"""Scheduled dead-letter replay: the ``dead_letter_replay`` schedule and its job.

    schedule dead_letter_replay (hourly, STOPPED until someone switches it on in the UI)
      └─► one ``replay_dead_letters`` run per workload (partition) whose spec opts in with
          ``dead_letter: {scheduled_replay: true}`` (Kafka or Pulsar; enabled ones only)
            └─► consumers.dead_letters.places.replay_workload_dead_letters: republish its dead
                letters not yet replayed to their source topic, at most ``max_replays`` times
                each; progress in the group ``lanehouse.<workload>.dlq-replay``

Off by default twice over (the schedule and the spec flag): replaying a record that fails for a
reason nobody fixed only sends it round again. The job can also be launched by hand from the
launchpad for any workload with a dead-letter topic, whatever its flag. Two replays of one
workload must not overlap; the instance's tag limit on ``REPLAY_TAG`` (one run per value)
serialises them (``REPLAY_RUN_TAG``, limited per value by the instance: :mod:`orchestration.local.instance`).
"""

# No ``from __future__ import annotations``: Dagster reads the op's ``config`` annotation.
from datetime import datetime

from dagster import (
    Config,
    DefaultScheduleStatus,
    Failure,
    OpExecutionContext,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    schedule,
)
from pydantic import Field

from consumers import LanehouseError, WorkloadSpec
from consumers.dead_letters.places import replay_workload_dead_letters
from orchestration.workloads.finding import find_workload
from orchestration.workloads.names import (
    REPLAY_RUN_TAG,
    WORKLOAD_PARTITIONS_NAME,
    WORKLOAD_TAG,
    workloads_dir,
)
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from orchestration.workloads.registry import read_registry

__all__ = ["REPLAY_JOB_NAME", "dead_letter_replay_schedule", "replay_job", "replayable"]

REPLAY_JOB_NAME = "replay_dead_letters"
#: On every replay run, value = workload: at most one replay per workload runs at a time.
#: When the schedule runs once it is switched on.
REPLAY_CRON = "0 * * * *"


class ReplayConfig(Config):
    """Run config of a replay: ``{"ops": {"replay": {"config": {...}}}}``."""

    limit: int | None = Field(default=None, ge=1, description="Handle at most this many.")
    max_replays: int | None = Field(
        default=None, ge=1, description="Overrides the spec's dead_letter.max_replays."
    )


def replayable(spec: WorkloadSpec) -> str | None:
    """Why ``spec``'s dead letters cannot be replayed, or None when they can."""
    if spec.dead_letter is None:
        return "its spec sets no dead_letter topic"
    return None


@op(description="Republishes the workload's (partition key) dead letters to their source topic.")
def replay(context: OpExecutionContext, config: ReplayConfig) -> None:
    name = context.partition_key
    path, spec = find_workload(workloads_dir(), name)
    dead_letter, source = spec.dead_letter, spec.source
    if dead_letter is None:
        raise Failure(f"workload {name!r} ({path}): nothing to replay: {replayable(spec)}")
    target = source.topics[0] if len(source.topics) == 1 else None
    max_replays = config.max_replays or dead_letter.max_replays
    context.log.info(
        f"replaying dead letters of {name} from {dead_letter.topic} to "
        f"{target or 'each one source topic'} (max_replays {max_replays})"
    )
    try:
        summary = replay_workload_dead_letters(
            spec, target, limit=config.limit, max_replays=max_replays
        )
    except LanehouseError as exc:
        raise Failure(f"replay of {name} failed: {exc}") from exc
    context.log.info(
        f"replayed {summary.replayed}; exhausted {summary.exhausted} (replayed {max_replays} "
        f"times already, left in {dead_letter.topic}); skipped {summary.skipped_other_workloads} "
        f"of other workloads, {summary.malformed} unreadable"
    )


@job(
    name=REPLAY_JOB_NAME,
    partitions_def=WORKLOAD_PARTITIONS,
    executor_def=in_process_executor,
    description="Replays one workload's (partition) dead letters once; see dead_letter_replay.",
)
def replay_job() -> None:
    replay()


@schedule(
    name="dead_letter_replay",
    cron_schedule=REPLAY_CRON,
    job=replay_job,
    default_status=DefaultScheduleStatus.STOPPED,
    description="Hourly once switched on: replays the dead letters of every enabled "
    "workload whose spec sets dead_letter.scheduled_replay: true.",
)
def dead_letter_replay_schedule(
    context: ScheduleEvaluationContext,
) -> list[RunRequest] | SkipReason:
    registry = read_registry(workloads_dir())
    registered = set(context.instance.get_dynamic_partitions(WORKLOAD_PARTITIONS_NAME))
    at = context.scheduled_execution_time or datetime.now()
    requests = []
    for entry in registry.workloads.values():
        spec = entry.spec
        wanted = spec.enabled and spec.dead_letter is not None and spec.dead_letter.scheduled_replay
        if not wanted or spec.name not in registered or replayable(spec) is not None:
            continue
        tags = {WORKLOAD_TAG: spec.name, REPLAY_RUN_TAG: spec.name}
        requests.append(
            RunRequest(run_key=f"{spec.name}:{at.isoformat()}", partition_key=spec.name, tags=tags)
        )
    if not requests:
        return SkipReason(
            "no enabled workload (registered by the discovery sensor) sets "
            "dead_letter.scheduled_replay: true"
        )
    return requests
