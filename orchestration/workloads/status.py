"""What ``lanehouse workloads list|status`` shows: each workload as the platform sees it.

Three sources, all read from the Dagster instance and the workloads directory, so the command
works the same against ``lanehouse up`` on a laptop and a production instance on PostgreSQL:

* the **spec** (:mod:`orchestration.workloads.registry`): valid or not, enabled, source, topics;
* the **discovery sensor's cursor**: whether a person stopped the workload, recent crashes, the
  restart backoff;
* the **runs** of the consumer job for the workload's partition (for a hosted workload, its host
  run and the state the host wrote of it), and the engine's metrics as the newest run reported
  them: the ``AssetObservation`` of the workload's asset (throughput, lag,
  in flight, the oldest unfinished record), with its age. Observations of an older run are not
  shown as current, and a workload no replica runs shows the broker's lag read now
  (:mod:`orchestration.workloads.standstill`), never its last run's rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter
from pydantic import BaseModel, ConfigDict

from consumers import WorkloadSpec
from consumers.scaling.lag import Lag, measure_lag
from consumers.scaling.policy import ScaleState
from orchestration.workloads.discovery_model import (
    CRASH_LOOP_TAG,
    FINISHED,
    RESTARTS_TAG,
    DiscoveryState,
    RestartPolicy,
    WorkloadState,
    policy_from_env,
)
from orchestration.workloads.heartbeat import Heartbeat, read_heartbeats
from orchestration.workloads.host_store import MemberStatus, read_statuses, read_stopped
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    DISCOVERY_SENSOR_NAME,
    GENERATION_TAG,
    PARENT_RUN_TAG,
    PARTITION_TAG,
    PLATFORM_STOP_REASON,
    START_JOB_NAME,
    STOP_JOB_NAME,
    replica_of,
    stop_reason_of,
    unit_workload,
)
from orchestration.workloads.progress import TopicProgress, reported_progress, still_progress
from orchestration.workloads.registry import InvalidSpec, Registry, read_registry
from orchestration.workloads.standstill import figures_of_all, standing_still

__all__ = ["RunSummary", "TopicProgress", "WorkloadStatus", "collect_statuses", "sensor_state"]

_FINISHED = frozenset(status.value for status in FINISHED)
_LIVE = [status for status in DagsterRunStatus if status not in FINISHED]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunSummary(_Model):
    run_id: str
    #: Which replica of the workload it serves.
    replica: int
    status: str
    created_at: datetime
    ended_at: datetime | None
    generation: str | None
    restarts: int
    crash_loop: bool
    stop_reason: str | None
    by_sensor: bool


class WorkloadStatus(_Model):
    name: str
    file: str
    valid: bool
    error: str | None
    enabled: bool | None
    source_kind: str | None
    topics: tuple[str, ...]
    #: One word for the table: running, starting, stopping, stopped, crash-looping, ...
    phase: str
    #: Why the phase, when it needs saying.
    note: str | None
    run: RunSummary | None
    recent_runs: tuple[RunSummary, ...]
    progress: tuple[TopicProgress, ...]
    #: Seconds since the current run's worker last beat (its clock against ours), if it beat.
    heartbeat_age: float | None
    crashes: int
    next_start: datetime | None
    #: Replicas the sensor keeps (the spec's, or autoscaling's choice) and runs unfinished now.
    replicas_wanted: int | None
    replicas_running: int
    #: Autoscaling's last decision, as the sensor logged it.
    scaling: str | None


def sensor_state(instance: DagsterInstance) -> tuple[str | None, DiscoveryState | None]:
    """The discovery sensor's status (RUNNING, STOPPED, ...) and cursor, if it has ticked."""
    for state in instance.all_instigator_state():
        if state.name != DISCOVERY_SENSOR_NAME or state.instigator_type.value != "SENSOR":
            continue
        cursor = getattr(state.instigator_data, "cursor", None)
        try:
            parsed = DiscoveryState.from_cursor(cursor) if cursor else None
        except ValueError:
            parsed = None
        return state.status.value, parsed
    return None, None


def collect_statuses(
    instance: DagsterInstance,
    directory: Path,
    names: Iterable[str] | None = None,
    history: int = 5,
    now: datetime | None = None,
    policy: RestartPolicy | None = None,
    cursor: DiscoveryState | None = None,
    measure: Callable[[WorkloadSpec], Lag] = measure_lag,
) -> list[WorkloadStatus]:
    """Every workload in ``directory`` (or only ``names``), plus ones the sensor's ``cursor``
    (read from the instance when not given) still remembers. ``measure`` reads a still
    workload's lag from its broker (:mod:`orchestration.workloads.standstill`)."""
    now = now or datetime.now(UTC)
    policy = policy or policy_from_env()
    registry = read_registry(directory) if directory.is_dir() else Registry({})
    if cursor is None:
        _, cursor = sensor_state(instance)
    states = cursor.workloads if cursor is not None else {}
    wanted = set(names) if names is not None else None
    invalid = {spec.name: spec for spec in registry.invalid if spec.name}
    remembered = {unit_workload(unit)[0] for unit in states}
    everyone = sorted(registry.workloads.keys() | invalid.keys() | remembered)
    names = [name for name in everyone if wanted is None or name in wanted]
    placement = cursor.placement if cursor is not None else {}
    hosted: dict[str, MemberStatus | None] = dict.fromkeys(placement)
    hosted.update(read_statuses(instance, placement))
    hosts = {m.run_id: m.host for m in hosted.values() if m is not None and m.run_id}
    beats = read_heartbeats(instance, states.keys() | set(names) | set(hosts.values()))
    # Each host run read once, not once for each of its workloads.
    host_runs = {r: (instance.get_run_record_by_id(r), _age(beats.get(r), now)) for r in hosts}
    stopped = read_stopped(instance, names)
    statuses = []
    for name in names:
        runs = _runs(instance, name, history)
        current = _current(runs)
        age = _age(beats.get(current.run_id) if current is not None else None, now)
        scale = cursor.scale.get(name) if cursor is not None else None
        context = _Context(registry, invalid, states.get(name), now, policy, age, scale)
        status = _status(instance, name, runs, context)
        if name in stopped or name in hosted:
            entry = registry.workloads.get(name)
            spec = entry.spec if entry is not None else None
            member = hosted.get(name)
            status = _hosted(instance, status, spec, name in stopped, member, host_runs, now)
        statuses.append(status)
    return _with_broker_lag(statuses, registry, now, measure)


def _hosted(
    instance: DagsterInstance,
    status: WorkloadStatus,
    spec: WorkloadSpec | None,
    stopped: bool,
    member: MemberStatus | None,
    host_runs: Mapping[str, tuple[RunRecord | None, float | None]],
    now: datetime,
) -> WorkloadStatus:
    """A workload stopped with ``stop_workload``, or one in a host run: its phase, run,
    heartbeat and figures are its host run's and come from the host's report of it, not from
    runs of its own. ``host_runs``: each host run's record and heartbeat age, by run id."""
    if stopped:
        note = f"stopped by a person with {STOP_JOB_NAME}: launch {START_JOB_NAME} to resume"
        return status.model_copy(update={"phase": "stopped", "note": note})
    if member is None:
        return status.model_copy(update={"phase": "starting", "note": "placed on a host run"})
    record, age = host_runs.get(member.run_id, (None, None))
    host_run = record.dagster_run if record is not None else None
    if record is not None:
        status = status.model_copy(update={"run": _summary(record), "heartbeat_age": age})
    if member.state != "stopped" and (host_run is None or host_run.is_finished):
        # Its host ended (a person's terminate, a crash) without writing its state again.
        ended = host_run.status.value if host_run is not None else "gone"
        note = f"its host run {member.host} ({member.run_id}) ended: {ended}"
        return status.model_copy(update={"phase": "stopped", "note": note})
    where = f"in host run {member.host} ({member.run_id})"
    note = f"{where}; failure {member.failures}: {member.error}" if member.error else where
    progress = status.progress
    if member.state == "running" and spec is not None:
        report = reported_progress(instance, spec, [member.run_id], now)
        progress = (report,) if report is not None else progress
    return status.model_copy(
        update={
            "phase": member.state,
            "note": note,
            "progress": progress,
            "replicas_running": int(member.state == "running"),
        }
    )


def _with_broker_lag(
    statuses: list[WorkloadStatus],
    registry: Registry,
    now: datetime,
    measure: Callable[[WorkloadSpec], Lag],
) -> list[WorkloadStatus]:
    """Each still workload's figures, from its broker (all read at once)."""
    still = [
        (registry.workloads[s.name].spec, s.phase)
        for s in statuses
        if s.name in registry.workloads and standing_still(s.phase, s.replicas_running)
    ]
    read = figures_of_all(still, measure)
    return [
        s.model_copy(update={"progress": (still_progress(read[s.name], now),)})
        if s.name in read
        else s
        for s in statuses
    ]


@dataclass(frozen=True)
class _Context:
    registry: Registry
    invalid: Mapping[str, InvalidSpec]
    state: WorkloadState | None
    now: datetime
    policy: RestartPolicy
    heartbeat_age: float | None
    scale: ScaleState | None


def _runs(instance: DagsterInstance, name: str, limit: int) -> list[RunSummary]:
    """The newest ``limit`` runs of the workload, and every unfinished one (all replicas)."""
    runs = RunsFilter(job_name=CONSUMER_JOB_NAME, tags={PARTITION_TAG: name})
    live = RunsFilter(job_name=CONSUMER_JOB_NAME, tags={PARTITION_TAG: name}, statuses=_LIVE)
    records = {r.dagster_run.run_id: r for r in instance.get_run_records(live)}
    for record in instance.get_run_records(runs, limit=limit):
        records.setdefault(record.dagster_run.run_id, record)
    return [_summary(r) for r in sorted(records.values(), key=lambda r: r.storage_id, reverse=True)]


def _summary(record: RunRecord) -> RunSummary:
    run = record.dagster_run
    tags = run.tags
    restarts = tags.get(RESTARTS_TAG, "0")
    return RunSummary(
        run_id=run.run_id,
        replica=replica_of(tags),
        status=run.status.value,
        created_at=_aware(record.create_timestamp),
        ended_at=_stamp(record.end_time),
        generation=tags.get(GENERATION_TAG),
        restarts=int(restarts) if restarts.isdecimal() else 0,
        crash_loop=tags.get(CRASH_LOOP_TAG) == "true",
        stop_reason=stop_reason_of(run.run_id, tags),
        by_sensor=GENERATION_TAG in tags and PARENT_RUN_TAG not in tags,
    )


def _age(beat: Heartbeat | None, now: datetime) -> float | None:
    """Seconds since the beat by its writer's clock, if it beat."""
    return max(now.timestamp() - beat.at, 0.0) if beat is not None and beat.at else None


def _aware(moment: datetime) -> datetime:
    """Run storage keeps naive UTC times."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _stamp(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch is not None else None


def _status(
    instance: DagsterInstance, name: str, runs: list[RunSummary], context: _Context
) -> WorkloadStatus:
    entry = context.registry.workloads.get(name)
    broken = context.invalid.get(name)
    state, now = context.state, context.now
    spec = entry.spec if entry is not None else None
    run = _current(runs)
    live = [r.run_id for r in runs if r.status not in _FINISHED]
    crashes = len(state.crashes) if state is not None else 0
    next_start = _stamp(state.next_start) if state is not None else None
    phase, note = _phase(entry is not None, broken, spec, run, crashes, context)
    progress: list[TopicProgress] = []  # a still workload's: _with_broker_lag
    if (
        spec is not None
        and not standing_still(phase, len(live))
        and (reporting := live or ([run.run_id] if run is not None else []))
    ):
        report = reported_progress(instance, spec, reporting, now)
        if report is not None:
            progress.append(report)
    if entry is not None:
        file = entry.file
    elif broken is not None:
        file = broken.file
    else:
        file = (state.file if state is not None else None) or ""
    return WorkloadStatus(
        name=name,
        file=file,
        valid=entry is not None,
        error=str(broken) if broken is not None else None,
        enabled=spec.enabled if spec is not None else None,
        source_kind=spec.source.kind if spec is not None else None,
        topics=tuple(spec.source.topics) if spec is not None else (),
        phase=phase,
        note=note,
        run=run,
        recent_runs=tuple(runs),
        progress=tuple(progress),
        heartbeat_age=context.heartbeat_age,
        crashes=crashes,
        next_start=next_start,
        replicas_wanted=_wanted(spec, context.scale),
        replicas_running=len({r.replica for r in runs if r.status not in _FINISHED}),
        scaling=context.scale.reason if context.scale is not None else None,
    )


def _current(runs: list[RunSummary]) -> RunSummary | None:
    """The run the workload's phase is about: replica 0's newest (any newest without one)."""
    return next((r for r in runs if r.replica == 0), runs[0] if runs else None)


def _wanted(spec: WorkloadSpec | None, scale: ScaleState | None) -> int | None:
    """Replicas the sensor keeps: the spec's count, or autoscaling's within its bounds."""
    if spec is None or not spec.enabled:
        return None
    if not spec.replicas.autoscaled:
        return spec.replicas.min
    current = scale.replicas if scale is not None else spec.replicas.min
    return min(max(current, spec.replicas.min), spec.replicas.max)


def _phase(
    registered: bool,
    broken: InvalidSpec | None,
    spec: WorkloadSpec | None,
    run: RunSummary | None,
    crashes: int,
    context: _Context,
) -> tuple[str, str | None]:
    """The phase the operator cares about first, with a note when there is more to say."""
    state, now, policy = context.state, context.now, context.policy
    live = run is not None and run.status not in _FINISHED
    if not registered:
        if broken is not None:
            return "invalid", "spec file is invalid; the last valid spec keeps running"
        return ("stopping", "spec removed") if live else ("removed", None)
    if run is not None and run.status == "CANCELING":
        return "stopping", run.stop_reason
    silent = context.heartbeat_age
    if live and run is not None and silent is not None and silent >= policy.heartbeat_timeout:
        return "unresponsive", (
            f"no heartbeat for {silent:.0f}s: its worker may be gone; the discovery sensor marks "
            "it failed and restarts it (if the sensor is running)"
        )
    if live and run is not None:
        phase = "running" if run.status == "STARTED" else "starting"
        if crashes >= policy.crash_loop_threshold:
            return phase, f"crash-looping: {crashes} crashes in {_window(policy)}"
        return phase, None
    if spec is None or not spec.enabled:
        return "disabled", "enabled: false"
    if state is not None and state.stopped_by_user:
        return "stopped", (
            "stopped by a person: re-execute its stopped run in the UI (or launch its "
            "partition) to resume"
        )
    if crashes >= policy.crash_loop_threshold:
        return "crash-looping", f"{crashes} crashes in {_window(policy)}"
    if state is not None and state.next_start is not None and state.next_start > now.timestamp():
        return "waiting", f"restart after a crash at {_stamp(state.next_start):%H:%M:%S} UTC"
    if run is None:
        return "new", "the discovery sensor has not launched it yet"
    if run.stop_reason == PLATFORM_STOP_REASON:
        return "stopped", "stopped with the platform; it starts again when the platform is up"
    return "starting", "the discovery sensor launches it on its next tick"


def _window(policy: RestartPolicy) -> str:
    return f"the last {policy.crash_window / 60:g} min"
