"""The workload discovery sensor: host runs for most workloads, runs of their own for the rest.

Every tick (10 s apart by default; ``LANEHOUSE_SENSOR_SECONDS``) it reads the workloads directory
(:mod:`orchestration.workloads.registry`), registers each valid workload as a ``workloads`` partition, and
starts, restarts and stops the consumer runs. The decisions are a pure function
(:func:`orchestration.workloads.decisions.decide`); this module gathers its inputs from the instance
and applies its outputs. Workloads that need no process of their own share ``consume_host`` runs,
``LANEHOUSE_HOST_WORKLOADS`` (50) to a run (:mod:`orchestration.workloads.hosts`); the others
get ``replicas`` runs of ``consume_workload`` (all of them when the variable is 0). A workload
stopped with ``stop_workload`` gets no run at all.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DefaultSensorStatus,
    DeleteDynamicPartitionsRequest,
    JobDefinition,
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
    DiscoveryState,
    RestartPolicy,
    RunInfo,
    WorkloadState,
    policy_from_env,
)
from orchestration.workloads.heartbeat import read_heartbeats
from orchestration.workloads.host_job import HOST_PARTITIONS, host_job
from orchestration.workloads.host_store import read_statuses, read_stopped, write_members
from orchestration.workloads.hosts import decide_hosts, plan_hosts
from orchestration.workloads.job import consumer_job
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    DISCOVERY_SENSOR_NAME,
    GENERATION_TAG,
    HOST_JOB_NAME,
    PARENT_RUN_TAG,
    PARTITION_TAG,
    REWIND_JOB_NAME,
    SPEC_HASH_TAG,
    STOP_JOB_NAME,
    WORKLOAD_PARTITIONS_NAME,
    WORKLOAD_TAG,
    replica_of,
    stop_reason_of,
    workloads_dir,
)
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from orchestration.workloads.placement import host_budget_from_env
from orchestration.workloads.registry import SpecCache, read_registry
from orchestration.workloads.run_control import UNFINISHED, abandon, stop_run
from orchestration.workloads.scaling import SCALING_TAG, Measure, plan_scaling
from orchestration.workloads.watch import Watch

__all__ = [
    "build_discovery_sensor",
    "collect_host_runs",
    "collect_runs",
    "rewinding",
    "run_info",
]

#: Run changes are re-read with this overlap, for writers whose clocks or commits lag.
WATERMARK_OVERLAP = 60.0
#: Without a watermark (first tick, cursor reset) this many recent runs stand for the history.
HISTORY_LIMIT = 1000

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def build_discovery_sensor(
    directory: str | os.PathLike[str] | None = None,
    *,
    clock: Callable[[], float] = time.time,
    policy: RestartPolicy | None = None,
    minimum_interval_seconds: int | None = None,
    measure: Measure = measure_lag,
    host_budget: int | None = None,
    jobs: Sequence[JobDefinition] | None = None,
) -> SensorDefinition:
    """The sensor, reading ``directory`` (default: :func:`workloads_dir` at each tick).

    ``clock`` (epoch seconds) times backoffs, crash windows and autoscaling's cool-downs, and
    ``measure`` reads a workload's lag from its broker; tests pass their own. ``host_budget``:
    workloads per host run, 0 for none (default ``LANEHOUSE_HOST_WORKLOADS``). ``jobs``: the
    consumer and host jobs it launches (tests pass stand-ins with their names).
    """
    cache = SpecCache()
    watch = Watch()
    policy = policy or policy_from_env()
    interval = minimum_interval_seconds or interval_from_env()
    budget = host_budget_from_env() if host_budget is None else host_budget

    @sensor(
        name=DISCOVERY_SENSOR_NAME,
        jobs=list(jobs) if jobs is not None else [consumer_job, host_job],
        minimum_interval_seconds=interval,
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            "Registers every workload spec as a 'workloads' partition and keeps enabled "
            f"workloads running: most share {HOST_JOB_NAME} runs, the rest (run: own, replicas, "
            f"executor: process) get {CONSUMER_JOB_NAME} runs of their own. Starts new ones, "
            "restarts crashed ones with backoff, stops removed, disabled and changed ones. A "
            "run you terminate stays stopped until you launch its partition again or change "
            "its spec; stop_workload stops one workload wherever it runs."
        ),
    )
    def workload_discovery(context: SensorEvaluationContext) -> SensorResult:
        where = Path(directory) if directory is not None else workloads_dir()
        return _evaluate(context, where, clock(), policy, cache, measure, watch, budget)

    return workload_discovery


#: Seconds between two ticks of the discovery sensor (default 10).
INTERVAL_ENV = "LANEHOUSE_SENSOR_SECONDS"


def interval_from_env() -> int:
    """``LANEHOUSE_SENSOR_SECONDS`` or 10; ``ValueError`` naming the variable when it is not a
    whole number of seconds of at least 1 (the code location then fails to load, saying so)."""
    raw = os.environ.get(INTERVAL_ENV, "10").strip()
    if not raw.isdecimal() or int(raw) < 1:
        raise ValueError(f"{INTERVAL_ENV}={raw!r}: expected a whole number of seconds, at least 1")
    return int(raw)


def _evaluate(
    context: SensorEvaluationContext,
    directory: Path,
    now: float,
    policy: RestartPolicy,
    cache: SpecCache,
    measure: Measure,
    watch: Watch,
    budget: int,
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
    rewinds = rewinding(instance)
    stopped = read_stopped(instance, registry.workloads)
    plan = plan_hosts(registry, state.placement, budget, rewinds | stopped)
    wanted = {**scaling.wanted, **dict.fromkeys(plan.without_own_run | stopped, 0)}
    decision = decide(registry, state, runs, partitions, now, policy, rewinds, wanted)
    # Members first: a host run launched below reads them as it starts.
    changed = watch.members_changed(plan.members)
    write_members(instance, changed)
    watch.members_written(changed)
    host_runs = collect_host_runs(instance, state.hosts, state.watermark)
    hosts = decide_hosts(plan.members, state.hosts, host_runs, now, policy)
    live = {run.run_id for run in host_runs if run.active}
    for abandoned in (*decision.abandons, *hosts.abandons):
        abandon(instance, context.log, abandoned)
    for cancel in (*decision.cancels, *hosts.cancels):
        stop_run(instance, context.log, cancel)
    for message in (*scaling.messages, *decision.messages, *hosts.messages):
        context.log.log(_LEVELS[message.level], message.text)
    summary = decision.summary
    if plan.placement:
        on = len(set(plan.placement.values()))
        summary += f"; {len(plan.placement)} hosted on {on} host run(s)"
    if stopped:
        summary += f"; stopped by a person with {STOP_JOB_NAME}: {', '.join(sorted(stopped))}"
    context.log.info(summary)

    partition_requests: list[AddDynamicPartitionsRequest | DeleteDynamicPartitionsRequest] = []
    if decision.add_partitions:
        partition_requests.append(
            WORKLOAD_PARTITIONS.build_add_request(list(decision.add_partitions))
        )
    # A removed workload's page goes (the catalog lists an asset with events), once its host
    # drained it, whose last report is an event. Its landed dataset stays: the lake keeps it.
    if held := _draining(instance, decision.delete_partitions, live):
        kept = ", ".join(sorted(held))
        context.log.info(f"removed, kept in the catalog until their host drained them: {kept}")
    if gone := [name for name in decision.delete_partitions if name not in held]:
        partition_requests.append(WORKLOAD_PARTITIONS.build_delete_request(gone))
        instance.wipe_assets([workload_key(name) for name in gone])
        context.log.info(f"removed from the catalog: {', '.join(gone)}")
    new_hosts = {launch.workload for launch in hosts.launches}
    new_hosts -= set(instance.get_dynamic_partitions(HOST_PARTITIONS.name or ""))
    if new_hosts:
        partition_requests.append(HOST_PARTITIONS.build_add_request(sorted(new_hosts)))
    run_requests = []
    for launch in decision.launches:
        tags = launch.tags()
        change = scaling.changes.get(launch.workload)
        if change is not None and change.replicas > change.previous:
            tags[SCALING_TAG] = change.reason
        run_requests.append(
            RunRequest(
                run_key=launch.run_key,
                job_name=CONSUMER_JOB_NAME,
                partition_key=launch.workload,
                tags=tags,
            )
        )
    for launch in hosts.launches:
        run_requests.append(
            RunRequest(
                run_key=launch.run_key,
                job_name=HOST_JOB_NAME,
                partition_key=launch.workload,
                tags=launch.tags(),
            )
        )
    # A hosted workload is in its host's phase: running while its host runs.
    hosted = {name: hosts.phases.get(host, "starting") for name, host in plan.placement.items()}
    # A person's stop of a hosted workload: "stopping" while its host run, still going, drains
    # it, so the page's still figures come after the host's last report of it (else they stood
    # behind it for a refresh interval, ~60 s).
    draining = _draining(instance, stopped, live)
    phases = {
        **decision.phases,
        **hosted,
        **dict.fromkeys(stopped - draining, "stopped by a person"),
        **dict.fromkeys(draining, "stopping"),
    }
    update = {
        "watermark": watermark,
        "scale": scaling.states,
        "hosts": hosts.states,
        "placement": plan.placement,
    }
    return SensorResult(
        run_requests=run_requests,
        skip_reason=None if run_requests else summary,
        cursor=decision.state.model_copy(update=update).to_cursor(),
        dynamic_partitions_requests=partition_requests,
        asset_events=[
            *scaling.observations,
            *watch.phase_changes(phases, registry, scaling.wanted),
            # After the phase: a still workload's page shows the broker's lag last.
            *watch.still.observations(phases, registry, now, measure),
        ],
    )


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
    return _with_heartbeats(instance, records.values()), max(stamps, default=None)


def collect_host_runs(
    instance: DagsterInstance, states: Mapping[str, WorkloadState], watermark: float | None
) -> list[RunInfo]:
    """Host runs as :func:`collect_runs` gathers consumer runs (unfinished ones, recently
    updated ones, tracked ones), with their heartbeats."""
    records: dict[str, RunRecord] = {}
    filters = [RunsFilter(job_name=HOST_JOB_NAME, statuses=UNFINISHED)]
    if watermark is not None:
        after = datetime.fromtimestamp(watermark - WATERMARK_OVERLAP, tz=UTC)
        filters.append(RunsFilter(job_name=HOST_JOB_NAME, updated_after=after))
    for runs_filter in filters:
        for record in instance.get_run_records(runs_filter):
            records[record.dagster_run.run_id] = record
    if watermark is None:
        recent = instance.get_run_records(RunsFilter(job_name=HOST_JOB_NAME), limit=HISTORY_LIMIT)
        records.update((r.dagster_run.run_id, r) for r in recent)
    missing = tracked_run_ids(DiscoveryState(workloads=dict(states))) - records.keys()
    if missing:
        for record in instance.get_run_records(RunsFilter(run_ids=sorted(missing))):
            records[record.dagster_run.run_id] = record
    return _with_heartbeats(instance, records.values())


def _with_heartbeats(instance: DagsterInstance, records: Iterable[RunRecord]) -> list[RunInfo]:
    runs = [info for record in records if (info := run_info(record)) is not None]
    beats = read_heartbeats(instance, {run.unit for run in runs if run.active})
    return [
        replace(run, heartbeat=beat.beat) if (beat := beats.get(run.run_id)) else run
        for run in runs
    ]


def _draining(instance: DagsterInstance, names: Iterable[str], live: set[str]) -> set[str]:
    """Those of ``names`` that a host run, still going, runs yet: it has their last report to
    write, and writes ``stopped`` once it drained one."""
    return {
        name
        for name, member in read_statuses(instance, names).items()
        if member.state == "running" and member.run_id in live
    }


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
    generation = int(raw) if raw.isdecimal() else None
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
