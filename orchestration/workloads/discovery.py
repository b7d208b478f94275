"""The workload discovery sensor: ``replicas`` runs of ``consume_workload`` per enabled workload.

Every tick (10 s apart by default; ``LANEHOUSE_SENSOR_SECONDS``) it reads the workloads directory
(:mod:`orchestration.workloads.registry`), registers each valid workload as a ``workloads`` partition, and
starts, restarts and stops the consumer runs. The decisions are a pure function
(:func:`orchestration.workloads.decisions.decide`); this module gathers its inputs from the instance
and applies its outputs.

What an operator sees:

* **The tick.** When nothing is launched, the skip reason is one summary line: workloads by
  phase (running, starting, stopping, waiting to restart, stopped by a person, rewinding,
  disabled, held),
  ``CRASH-LOOPING: <names>`` and the number of invalid spec files. Every tick logs its decisions,
  each invalid file (file, field, reason) as an error and each crash-looping workload as a
  warning (the tick's "View logs" in the UI).
* **The runs.** Runs it launches carry ``lanehouse/workload``, ``lanehouse/spec_hash`` and
  ``lanehouse/generation``; a restart after crashes adds ``lanehouse/restarts`` (recent crashes)
  and, once crash-looping, ``lanehouse/crash_loop=true`` (filter the Runs page by that tag).
  A run it stops gets ``lanehouse/stop_reason`` (``removed``, ``disabled``, ``spec_changed``,
  ``superseded``, ``scaled_down``), then is marked CANCELING and drains on its own
  (:func:`stop_run`); each replica's run carries ``lanehouse/replica``.
* **Dead runs.** A STARTED or CANCELING run whose heartbeat (:mod:`orchestration.workloads.heartbeat`)
  has not changed for ``heartbeat_timeout`` (120 s; ``LANEHOUSE_HEARTBEAT_TIMEOUT``) lost its
  worker: the sensor marks it FAILURE (then it restarts like any crash) or CANCELED, with the
  reason as the run's failure message.
* **The cursor** (sensor page): the per-workload state as JSON
  (:class:`~orchestration.workloads.discovery_model.DiscoveryState`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from dagster import (
    AddDynamicPartitionsRequest,
    AssetObservation,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    DeleteDynamicPartitionsRequest,
    RunRecord,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from consumers.scaling.lag import measure_lag
from orchestration.workloads.assets import workload_key
from orchestration.workloads.decisions import decide, tracked_run_ids
from orchestration.workloads.discovery_model import (
    FINISHED,
    Abandon,
    Cancel,
    DiscoveryState,
    RestartPolicy,
    RunInfo,
    policy_from_env,
)
from orchestration.workloads.heartbeat import read_heartbeats
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    DISCOVERY_SENSOR_NAME,
    GENERATION_TAG,
    PARENT_RUN_TAG,
    PARTITION_TAG,
    REWIND_JOB_NAME,
    SPEC_HASH_TAG,
    WORKLOAD_PARTITIONS_NAME,
    WORKLOAD_TAG,
    replica_of,
    stop_reason_of,
    stop_tags,
    unit_workload,
    workloads_dir,
)
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from orchestration.workloads.registry import Registry, SpecCache, read_registry
from orchestration.workloads.reload import Reloader
from orchestration.workloads.scaling import SCALING_TAG, Measure, plan_scaling
from orchestration.workloads.standstill import StillWatch

__all__ = [
    "UNFINISHED",
    "build_discovery_sensor",
    "collect_runs",
    "rewinding",
    "run_info",
    "stop_run",
    "workload_discovery_sensor",
]

#: Run changes are re-read with this overlap, for writers whose clocks or commits lag.
WATERMARK_OVERLAP = 60.0
#: Without a watermark (first tick, cursor reset) this many recent runs stand for the history.
HISTORY_LIMIT = 1000

UNFINISHED = [status for status in DagsterRunStatus if status not in FINISHED]
_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def build_discovery_sensor(
    directory: str | os.PathLike[str] | None = None,
    *,
    clock: Callable[[], float] = time.time,
    policy: RestartPolicy | None = None,
    minimum_interval_seconds: int | None = None,
    measure: Measure = measure_lag,
) -> SensorDefinition:
    """The sensor, reading ``directory`` (default: :func:`workloads_dir` at each tick).

    ``clock`` (epoch seconds) times backoffs, crash windows and autoscaling's cool-downs, and
    ``measure`` reads a workload's lag from its broker; tests pass their own.
    """
    cache = SpecCache()
    watch = Watch()
    policy = policy or policy_from_env()
    interval = minimum_interval_seconds or interval_from_env()

    @sensor(
        name=DISCOVERY_SENSOR_NAME,
        job_name=CONSUMER_JOB_NAME,
        minimum_interval_seconds=interval,
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            "Registers every workload spec as a 'workloads' partition and keeps one "
            f"{CONSUMER_JOB_NAME} run per enabled workload: starts new ones, restarts crashed "
            "ones with backoff, stops removed, disabled and changed ones. A run you terminate "
            "stays stopped until you launch its partition again or change its spec."
        ),
    )
    def workload_discovery(context: SensorEvaluationContext) -> SensorResult:
        where = Path(directory) if directory is not None else workloads_dir()
        return _evaluate(context, where, clock(), policy, cache, measure, watch)

    return workload_discovery


#: Seconds between two ticks of the discovery sensor (default 10).
INTERVAL_ENV = "LANEHOUSE_SENSOR_SECONDS"


def interval_from_env() -> int:
    """``LANEHOUSE_SENSOR_SECONDS`` or 10; ``ValueError`` naming the variable when it is not a
    whole number of seconds of at least 1 (the code location then fails to load, saying so)."""
    raw = os.environ.get(INTERVAL_ENV, "10").strip()
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{INTERVAL_ENV}={raw!r}: expected a whole number of seconds, at least 1")
    return int(raw)


def _evaluate(
    context: SensorEvaluationContext,
    directory: Path,
    now: float,
    policy: RestartPolicy | None,
    cache: SpecCache,
    measure: Measure,
    watch: Watch,
) -> SensorResult:
    instance = context.instance
    registry = read_registry(directory, cache=cache)
    origin = context.code_location_origin
    location = origin.location_name if origin is not None else None
    reload = watch.reloader.check(directory, registry, now, location)
    if reload is not None:
        context.log.log(_LEVELS[reload.level], reload.text)
    state = DiscoveryState.from_cursor(context.cursor)
    runs, watermark = collect_runs(instance, state)
    partitions = instance.get_dynamic_partitions(WORKLOAD_PARTITIONS_NAME)
    scaling = plan_scaling(registry, dict(state.scale), now, measure)
    decision = decide(
        registry, state, runs, partitions, now, policy, rewinding(instance), scaling.wanted
    )
    for abandon in decision.abandons:
        _abandon(instance, context.log, abandon)
    for cancel in decision.cancels:
        stop_run(instance, context.log, cancel)
    for message in (*scaling.messages, *decision.messages):
        context.log.log(_LEVELS[message.level], message.text)
    context.log.info(decision.summary)

    partition_requests: list[AddDynamicPartitionsRequest | DeleteDynamicPartitionsRequest] = []
    if decision.add_partitions:
        partition_requests.append(
            WORKLOAD_PARTITIONS.build_add_request(list(decision.add_partitions))
        )
    if decision.delete_partitions:
        partition_requests.append(
            WORKLOAD_PARTITIONS.build_delete_request(list(decision.delete_partitions))
        )
        # A removed workload's page goes with it, as the catalog keeps listing an asset with
        # events after its definition is gone. Its landed dataset stays: the lake keeps it.
        instance.wipe_assets([workload_key(name) for name in decision.delete_partitions])
        context.log.info(f"removed from the catalog: {', '.join(decision.delete_partitions)}")
    run_requests = []
    for launch in decision.launches:
        tags = launch.tags()
        change = scaling.changes.get(launch.workload)
        if change is not None and change.replicas > change.previous:
            tags[SCALING_TAG] = change.reason
        run_requests.append(
            RunRequest(run_key=launch.run_key, partition_key=launch.workload, tags=tags)
        )
    update = {"watermark": watermark, "scale": scaling.states}
    return SensorResult(
        run_requests=run_requests,
        skip_reason=None if run_requests else decision.summary,
        cursor=decision.state.model_copy(update=update).to_cursor(),
        dynamic_partitions_requests=partition_requests,
        asset_events=[
            *scaling.observations,
            *watch.phase_changes(decision.phases, registry, scaling.wanted),
            # After the phase: a still workload's page shows the broker's lag last.
            *watch.still.observations(decision.phases, registry, now, measure),
        ],
    )


class Watch:
    """What the sensor remembers between ticks in its process (not in the cursor: losing it only
    repeats an observation): each workload's last phase as observed on its asset, when it last
    observed a still workload's lag, and the code-location reloads it asked for."""

    def __init__(self) -> None:
        self.reloader = Reloader()
        self.still = StillWatch()
        self._phases: dict[str, tuple[str, int, int]] = {}

    def phase_changes(
        self, phases: Mapping[str, str], registry: Registry, wanted: Mapping[str, int]
    ) -> list[AssetObservation]:
        """An observation of each workload's asset whose phase (its replica 0's), count of
        running replicas or wanted count (``wanted``: autoscaling's, else the spec's) changed."""
        running: dict[str, int] = {}
        for unit, phase in phases.items():
            name = unit_workload(unit)[0]
            running[name] = running.get(name, 0) + (phase == "running")
        out = []
        for name in self._phases.keys() - registry.workloads.keys():
            del self._phases[name]  # removed: a workload added again is observed afresh
        for unit, phase in sorted(phases.items()):
            name, replica = unit_workload(unit)
            entry = registry.workloads.get(name)
            if replica != 0 or phase == "removed" or entry is None:
                continue
            seen = (phase, running[name], wanted.get(name, entry.spec.replicas.min))
            if self._phases.get(name) == seen:
                continue
            self._phases[name] = seen
            metadata: dict[str, str | int] = {
                "workload": name,
                "status": phase,
                "replicas_running": seen[1],
                "replicas_wanted": seen[2],
            }
            out.append(AssetObservation(asset_key=workload_key(name), metadata=metadata))
        return out


def collect_runs(
    instance: DagsterInstance, state: DiscoveryState
) -> tuple[list[RunInfo], float | None]:
    """The consumer job's runs :func:`decide` needs, and the new watermark.

    Every unfinished run; runs updated since the watermark (minus an overlap), which catches
    runs that started and ended between ticks; and the runs the state tracks as unfinished, in
    case their last update is older than the watermark.
    """
    records: dict[str, RunRecord] = {}

    def add(batch: list[RunRecord]) -> None:
        for record in batch:
            known = records.get(record.dagster_run.run_id)
            if known is None or record.update_timestamp >= known.update_timestamp:
                records[record.dagster_run.run_id] = record

    add(list(instance.get_run_records(RunsFilter(job_name=CONSUMER_JOB_NAME, statuses=UNFINISHED))))
    if state.watermark is None:
        recent = RunsFilter(job_name=CONSUMER_JOB_NAME)
        add(list(instance.get_run_records(recent, limit=HISTORY_LIMIT)))
    else:
        after = datetime.fromtimestamp(state.watermark - WATERMARK_OVERLAP, tz=UTC)
        recent = RunsFilter(job_name=CONSUMER_JOB_NAME, updated_after=after)
        add(list(instance.get_run_records(recent)))
    missing = tracked_run_ids(state) - records.keys()
    if missing:
        add(list(instance.get_run_records(RunsFilter(run_ids=sorted(missing)))))
    stamps = [record.update_timestamp.timestamp() for record in records.values()]
    if state.watermark is not None:
        stamps.append(state.watermark)
    runs = [info for record in records.values() if (info := run_info(record)) is not None]
    beats = read_heartbeats(instance, {run.unit for run in runs if run.active})
    runs = [
        replace(run, heartbeat=beat.beat) if (beat := beats.get(run.run_id)) else run
        for run in runs
    ]
    return runs, max(stamps, default=None)


def rewinding(instance: DagsterInstance) -> frozenset[str]:
    """Workloads with an unfinished rewind run: their consumer runs wait until it ends."""
    runs = instance.get_runs(RunsFilter(job_name=REWIND_JOB_NAME, statuses=UNFINISHED))
    return frozenset(run.tags.get(PARTITION_TAG, "") for run in runs) - {""}


def run_info(record: RunRecord) -> RunInfo | None:
    """What the sensor needs of one run; None for a run that names no workload."""
    run = record.dagster_run
    tags = run.tags
    workload = tags.get(WORKLOAD_TAG) or tags.get(PARTITION_TAG)
    if not workload:
        return None
    raw = tags.get(GENERATION_TAG, "")
    generation = int(raw) if raw.isdigit() else None
    # A re-execution carries a copy of its parent's tags: our tags describe the parent, not it
    # (it runs the current spec, and nobody stopped it yet). It counts as a person's launch.
    reexecuted = PARENT_RUN_TAG in tags
    return RunInfo(
        run_id=run.run_id,
        storage_id=record.storage_id,
        workload=workload,
        status=run.status,
        # A re-execution keeps the replica it copied: re-executing a stopped replica resumes it.
        replica=replica_of(tags),
        ended_at=record.end_time,
        by_sensor=generation is not None and not reexecuted,
        generation=None if reexecuted else generation,
        spec_hash=None if reexecuted else tags.get(SPEC_HASH_TAG),
        stop_reason=stop_reason_of(run.run_id, tags),
    )


def _abandon(instance: DagsterInstance, log: logging.Logger, abandon: Abandon) -> None:
    """Mark a run whose worker is gone as ended, with why, so the UI shows it ended."""
    message = (
        f"Lanehouse: no heartbeat from this run for {abandon.silent_for:.0f} s; its worker is "
        "gone (killed, out of memory or its machine lost). Its uncommitted records are consumed "
        "again by the next run."
    )
    try:
        run = instance.get_run_by_id(abandon.run_id)
        if run is None or run.is_finished:
            return
        if abandon.status == DagsterRunStatus.FAILURE:
            instance.report_run_failed(run, message)
        else:
            instance.report_run_canceled(run, message)
    except Exception as exc:  # retried next tick: the run is still unfinished in storage
        log.error(f"{abandon.workload}: could not mark run {abandon.run_id} ended: {exc!r}")


def stop_run(instance: DagsterInstance, log: logging.Logger, cancel: Cancel) -> None:
    """Tag the run with why, then stop it without waiting for it.

    A run that has not started is canceled through the run coordinator (the queue drops it). A
    started one is only marked CANCELING: its op reads its status every second and drains,
    commits and ends SUCCESS (:func:`orchestration.workloads.job.watch_run_status`). Asking
    the run launcher instead would block this tick: the Docker launcher's terminate waits for
    the container to exit (up to its stop timeout, 45 s in ``deploy/dagster.yaml``), and a few
    drains in one tick would exceed the sensor's time limit.
    """
    what = f"{cancel.workload}: run {cancel.run_id} ({cancel.reason})"
    try:
        instance.add_run_tags(cancel.run_id, stop_tags(cancel.run_id, cancel.reason))
        run = instance.get_run_by_id(cancel.run_id)
        if run is None or run.is_finished:
            return
        if run.status in (DagsterRunStatus.STARTING, DagsterRunStatus.STARTED):
            instance.report_run_canceling(run, message=f"Lanehouse: stopping ({cancel.reason})")
            return
        confirmed = instance.run_coordinator.cancel_run(cancel.run_id)
    except Exception as exc:  # one failed stop must not block the other workloads
        log.error(f"{what}: could not be stopped, retrying next tick: {type(exc).__name__}: {exc}")
        return
    if not confirmed:
        log.warning(
            f"{what}: Dagster did not confirm the termination; if the run stays CANCELING, "
            "terminate it from the UI (force termination marks it CANCELED)"
        )


#: The sensor for ``Definitions(sensors=[...])``.
workload_discovery_sensor = build_discovery_sensor()
