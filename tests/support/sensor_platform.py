"""The discovery sensor's test platform: a real Dagster instance, a workloads directory, the real
sensor on stand-in jobs and a manual clock.

Ticks are evaluated the way the code server does (``evaluate_tick``: partition keys checked
against the stand-in jobs, sensor tags added) and applied the way the sensor daemon does: asset
events and partition requests first, then one run per run request unless a run with that run key
exists. Runs start at once (the stand-ins never execute); tests move them through SUCCESS,
FAILURE or CANCELED with the instance's own report calls.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Definitions,
    RunsFilter,
    SensorEvaluationContext,
    build_sensor_context,
)
from dagster._core.definitions.sensor_definition import SensorExecutionData
from dagster._core.events import DagsterEvent

from consumers.scaling.lag import Lag, measure_lag
from orchestration.workloads.assets import workload_key
from orchestration.workloads.discovery import build_discovery_sensor
from orchestration.workloads.discovery_model import RestartPolicy
from orchestration.workloads.names import CONSUMER_JOB_NAME, HOST_JOB_NAME, PARTITION_TAG
from tests.support.discovery_defs import STAND_INS, host_stand_in, stand_in

RUN_KEY_TAG = "dagster/run_key"
SENSOR_NAME_TAG = "dagster/sensor_name"
S = DagsterRunStatus
POLICY = RestartPolicy(base_backoff=5, max_backoff=40, crash_loop_threshold=3)

SPEC = """\
name: {name}
source:
  kind: kafka
  bootstrap_servers: 127.0.0.1:9092
  topics: [{name}-in]
handler: consumers.dev.examples:enrich
concurrency: {concurrency}
enabled: {enabled}
replicas: {replicas}
"""


def daemon_context(
    instance: DagsterInstance, cursor: str | None, defs: Definitions
) -> SensorEvaluationContext:
    """A tick's context as the code server builds it: with an instance ref, so partition keys
    are checked against storage."""
    return build_sensor_context(
        instance=instance, instance_ref=instance.get_ref(), cursor=cursor, definitions=defs
    )


def apply_partition_requests(instance: DagsterInstance, data: SensorExecutionData) -> None:
    """A tick's dynamic-partition requests, applied as the sensor daemon does."""
    for request in data.dynamic_partitions_requests or []:
        if isinstance(request, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Platform:
    """An instance, a workloads directory, the sensor and a manual clock."""

    instance: DagsterInstance
    directory: Path
    now: float = 1_000_000.0
    cursor: str | None = None
    logs: list[logging.LogRecord] = field(default_factory=list)
    #: How long the last ``evaluate_tick`` took (the sensor's work, not the daemon's).
    evaluated_in: float = 0.0
    #: What the broker answers for an autoscaled workload's lag (set by the test)...
    lag: Lag = field(default_factory=lambda: Lag(0, 0.0, 6, ()))
    #: ... unless the sensor asks the real broker.
    real_lag: bool = False
    #: Workloads per host run (0: none).
    host_budget: int = 0

    def __post_init__(self) -> None:
        measure = measure_lag if self.real_lag else (lambda spec: self.lag)
        self.sensor = build_discovery_sensor(
            self.directory,
            clock=lambda: self.now,
            policy=POLICY,
            measure=measure,
            host_budget=self.host_budget,
            jobs=STAND_INS,
        )
        self.defs = Definitions(jobs=STAND_INS, sensors=[self.sensor])

    def write(
        self,
        name: str,
        concurrency: int = 10,
        enabled: bool = True,
        replicas: object = 1,
        extra: str = "",
    ) -> None:
        """A spec for ``name``; ``extra``: more YAML lines (e.g. ``run: own``)."""
        text = SPEC.format(
            name=name, concurrency=concurrency, enabled=str(enabled).lower(), replicas=replicas
        )
        (self.directory / f"{name}.yaml").write_text(text + extra)

    def tick(self) -> SensorExecutionData:
        context = daemon_context(self.instance, self.cursor, self.defs)
        handler = ListHandler()
        context.log.addHandler(handler)
        started = time.thread_time()  # CPU seconds: the tick's work, whatever else runs
        data = self.sensor.evaluate_tick(context)
        self.evaluated_in = time.thread_time() - started
        self.logs = handler.records
        self.cursor = data.cursor
        for event in data.asset_events:  # as the daemon does
            self.instance.report_runless_asset_event(event)
        apply_partition_requests(self.instance, data)
        for run_request in data.run_requests or []:
            used = RunsFilter(tags={RUN_KEY_TAG: str(run_request.run_key)})
            if self.instance.get_runs(used):
                continue
            self.instance.create_run_for_job(
                host_stand_in if run_request.job_name == HOST_JOB_NAME else stand_in,
                run_config=run_request.run_config,
                tags={**run_request.tags, RUN_KEY_TAG: str(run_request.run_key)},
                status=S.STARTED,
            )
        return data

    def log_text(self, level: int = logging.INFO) -> str:
        return "\n".join(r.getMessage() for r in self.logs if r.levelno >= level)

    def runs(self, name: str) -> list[DagsterRun]:
        """The workload's runs, newest first."""
        filters = RunsFilter(job_name=CONSUMER_JOB_NAME, tags={PARTITION_TAG: name})
        return list(self.instance.get_runs(filters))

    def partitions(self) -> set[str]:
        return set(self.instance.get_dynamic_partitions("workloads"))

    def launch_from_ui(self, name: str) -> DagsterRun:
        """What the launchpad does for one partition: the job's partition tags, nothing of ours."""
        tags = stand_in.get_tags_for_partition_key(name, selected_asset_keys=None)
        return self.instance.create_run_for_job(stand_in, tags=tags, status=S.STARTED)

    def terminate_from_ui(self, run: DagsterRun, force: bool = False) -> None:
        """Terminate: the run drains and ends SUCCESS; a force termination ends it CANCELED."""
        self.instance.report_run_canceling(run)
        if force:
            self.instance.report_run_canceled(run)
        else:
            self.finish(run)

    def observed(self, name: str, field: str) -> dict[str, object]:
        """The newest observation of the workload's asset that has ``field``, as plain values."""
        for record in self.instance.fetch_observations(workload_key(name), limit=50).records:
            observation = record.asset_observation
            assert observation is not None
            if field in observation.metadata:
                return {k: v.value for k, v in observation.metadata.items()}
        raise AssertionError(f"no observation of {name} with {field}")

    def observations(self, name: str) -> list[dict[str, object]]:
        """Every observation of the workload's asset, newest first, as plain values."""
        return [
            {k: v.value for k, v in r.asset_observation.metadata.items()}  # type: ignore[union-attr]
            for r in self.instance.fetch_observations(workload_key(name), limit=50).records
        ]

    def status(self, name: str) -> object:
        """The workload's status as the sensor last observed it on the workload's asset."""
        return self.observed(name, "status")["status"]

    def finish(self, run: DagsterRun) -> None:
        """The op drained, committed and returned after its terminate: the run ends SUCCESS."""
        success = DagsterEvent(
            event_type_value=DagsterEventType.PIPELINE_SUCCESS.value, job_name=run.job_name
        )
        self.instance.report_dagster_event(success, run_id=run.run_id)
