"""A workload's checks, judged from its live runs' latest reports.

Each consumer run reports its own partitions (:mod:`orchestration.workloads.reporting`), so the
workload's figures are those of its live replicas together: lag adds up, the pin and the share
of the safety valve are the worst one. With no live run nothing is judged: the checks keep
their last result, and the workload's status says why it is not running.

Each consumer run judges its workload at every report (with its live siblings' latest reports
when the workload has replicas) and records a result when it changes, and at least every
:data:`REPEAT_SECONDS`, so the event log does not grow by three events per report. Running a
check from the UI judges it at once, from the same reports.
"""

# No ``from __future__ import annotations``: Dagster reads the check function's ``context``
# annotation at definition time and cannot resolve it from a string.
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
    multi_asset_check,
)

from consumers import SpecError, WorkloadSpec, load_spec
from orchestration.workloads.assets import (
    CHECKS,
    DEAD_LETTERS_CHECK,
    LAG_CHECK,
    PINNED_CHECK,
    workload_key,
)
from orchestration.workloads.names import CONSUMER_JOB_NAME, PARTITION_TAG, replica_of

log = logging.getLogger(__name__)

#: A result that did not change is recorded again after this long (the check page's history).
REPEAT_SECONDS: Final = 300.0
#: Observations looked through per live run for its newest one.
_SCANNED_PER_RUN: Final = 20

Report = Mapping[str, object]
Figure = str | int | float


@dataclass(frozen=True)
class Judgement:
    """One check's result for one workload."""

    check_name: str
    passed: bool
    description: str
    metadata: dict[str, Figure] = field(default_factory=dict)
    severity: AssetCheckSeverity = AssetCheckSeverity.ERROR

    def as_result(self, key: AssetKey) -> AssetCheckResult:
        """What a check function returns (a check executed from the UI)."""
        return AssetCheckResult(asset_key=key, **self._fields())

    def as_evaluation(self, key: AssetKey) -> AssetCheckEvaluation:
        """What a run records on its own (runless: no check step)."""
        return AssetCheckEvaluation(asset_key=key, **self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "check_name": self.check_name,
            "passed": self.passed,
            "description": self.description,
            "metadata": self.metadata,
            "severity": self.severity,
        }


def newest_reports(
    instance: DagsterInstance, name: str, run_ids: Sequence[str]
) -> dict[str, tuple[float, Report]]:
    """The newest observation of the workload's asset by each of ``run_ids``, with its time."""
    if not run_ids:
        return {}
    newest: dict[str, tuple[float, Report]] = {}
    scanned = _SCANNED_PER_RUN * len(run_ids)
    for record in instance.fetch_observations(workload_key(name), limit=scanned).records:
        observation = record.asset_observation
        if record.run_id in run_ids and record.run_id not in newest and observation is not None:
            report = {k: v.value for k, v in observation.metadata.items()}
            newest[record.run_id] = (record.timestamp, report)
    return newest


def live_reports(instance: DagsterInstance, name: str, run_ids: Sequence[str]) -> list[Report]:
    """The newest report of each of ``run_ids``, without its time."""
    return [report for _, report in newest_reports(instance, name, run_ids).values()]


def live_runs(instance: DagsterInstance, name: str) -> list[DagsterRun]:
    """The workload's STARTED consumer runs (its live replicas)."""
    return list(
        instance.get_runs(
            RunsFilter(
                job_name=CONSUMER_JOB_NAME,
                tags={PARTITION_TAG: name},
                statuses=[DagsterRunStatus.STARTED],
            )
        )
    )


def evaluate(instance: DagsterInstance, spec: WorkloadSpec) -> list[Judgement]:
    """Judge ``spec``'s workload now, from its STARTED runs' latest reports."""
    runs = live_runs(instance, spec.name)
    return judge(spec, live_reports(instance, spec.name, [run.run_id for run in runs]))


def judge(spec: WorkloadSpec, reports: Sequence[Report]) -> list[Judgement]:
    """The checks against ``spec.checks`` from the replicas' reports (none: nothing judged)."""
    running = [r for r in reports if r.get("status") == "running"]
    if not running:
        return []
    checks = spec.checks
    out: list[Judgement] = []
    lags = [lag for r in running if isinstance(lag := r.get("lag"), int)]
    lag = sum(lags)
    # Partitions not read yet make the lag a lower bound: enough for red, never for green.
    partial = any(r.get("lag_unknown") for r in running)
    if lags and (not partial or lag > checks.lag):
        out.append(
            Judgement(
                LAG_CHECK,
                lag <= checks.lag,
                f"{'at least ' if partial else ''}{lag:,} records behind the committed positions"
                f" (target {checks.lag:,})",
                {"lag_records": lag, "target_records": checks.lag, "replicas": len(running)},
            )
        )
    pins = [r for r in running if isinstance(r.get("pinned_seconds"), int | float)]
    worst = max(pins, key=lambda r: _seconds(r, "pinned_seconds"), default=None)
    pinned = _seconds(worst, "pinned_seconds")
    where = (
        f" (partition {worst.get('pinned_partition')}, offset {worst.get('pinned_offset')}, "
        f"key {worst.get('pinned_key')})"
        if worst is not None
        else ""
    )
    stalls = [r for r in running if isinstance(r.get("stalled_seconds"), int | float)]
    stalled_by = max(stalls, key=lambda r: _seconds(r, "stalled_seconds"), default=None)
    stalled = _seconds(stalled_by, "stalled_seconds")
    if stalled > pinned:  # records wait behind a partition that delivers nothing
        description = (
            f"partition {stalled_by.get('stalled_partition') if stalled_by else '?'} has had "
            f"records behind it and delivered none for {stalled:.0f} s (threshold "
            f"{checks.pinned:g} s; the engine resumes such a partition every stall_after)"
        )
    else:
        description = (
            f"the oldest record holding a commit position has for {pinned:.0f} s{where} "
            f"(threshold {checks.pinned:g} s)"
        )
    out.append(
        Judgement(
            PINNED_CHECK,
            max(pinned, stalled) <= checks.pinned,
            description,
            {
                "pinned_seconds": round(pinned, 3),
                "stalled_seconds": round(stalled, 3),
                "threshold_seconds": checks.pinned,
            },
        )
    )
    valves = [v for r in running if isinstance(v := r.get("valve_used"), int | float)]
    if valves:
        used = max(valves)
        out.append(
            Judgement(
                DEAD_LETTERS_CHECK,
                used < checks.dead_letters,
                f"dead letters use {used:.0%} of the safety valve (threshold "
                f"{checks.dead_letters:.0%}; at 100% the workload stops)",
                {"valve_used": round(used, 4), "threshold": checks.dead_letters},
                AssetCheckSeverity.WARN,  # a warning before the valve stops the workload
            )
        )
    elif spec.dead_letter is None:
        out.append(
            Judgement(DEAD_LETTERS_CHECK, True, "no dead-letter topic: failures are retried")
        )
    return out


def _seconds(report: Report | None, field: str) -> float:
    value = report.get(field) if report is not None else None
    return float(value) if isinstance(value, int | float) else 0.0


class Recorder:
    """Which results a run recorded last, so it records changes and repeats only."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[bool, float]] = {}

    def due(self, name: str, judgements: Sequence[Judgement], now: float) -> list[Judgement]:
        out = []
        for judgement in judgements:
            key = (name, judgement.check_name)
            last = self._last.get(key)
            if last is None or last[0] != judgement.passed or now - last[1] >= REPEAT_SECONDS:
                self._last[key] = (judgement.passed, now)
                out.append(judgement)
        return out


class CheckJudge:
    """A consumer run's side: judge the workload at each report, from the run's own report and
    its live siblings' latest ones. Only the lowest live replica records results, so the
    checks' history has one writer whatever the replica count. Runs off the op's thread (the
    instance is thread-safe); the thresholds are read again when the spec's file changes, as
    they are not part of the spec's hash and restart no run."""

    def __init__(
        self,
        instance: DagsterInstance,
        spec: WorkloadSpec,
        run_id: str,
        replica: int,
        path: Path | None = None,
    ) -> None:
        self._instance, self._run_id, self._replica = instance, run_id, replica
        self._spec = self._judged_by = spec
        self._path = path
        self._changed = path.stat().st_mtime_ns if path is not None else None
        self._recorder = Recorder()

    def judge(self, own: Report, now: float) -> list[Judgement]:
        """Judge and record what is due; the judgements recorded."""
        instance, name = self._instance, self._spec.name
        others = [run for run in live_runs(instance, name) if run.run_id != self._run_id]
        if any(replica_of(run.tags) < self._replica for run in others):
            return []  # a lower replica records the workload's checks
        reports = [own, *live_reports(instance, name, [run.run_id for run in others])]
        due = self._recorder.due(name, judge(self._thresholds(), reports), now)
        key = workload_key(name)
        for judgement in due:
            instance.report_runless_asset_event(judgement.as_evaluation(key))
        return due

    def _thresholds(self) -> WorkloadSpec:
        if self._path is None:
            return self._judged_by
        try:
            changed = self._path.stat().st_mtime_ns
        except OSError:
            return self._judged_by
        if changed != self._changed:
            self._changed = changed
            try:
                spec = load_spec(self._path, import_handler=False)
            except SpecError as exc:  # the sensor reports the file; judge by the last valid one
                log.warning(
                    "workload %s: checks judged by the last valid spec: %s", self._spec.name, exc
                )
            else:
                if spec.name == self._spec.name:
                    self._judged_by = spec
        return self._judged_by


def workload_checks(specs: Sequence[WorkloadSpec]) -> list[AssetChecksDefinition]:
    """The three checks of every workload. Its consumer runs judge them at each report
    (:class:`CheckJudge`); executing one from the UI judges it now, from the same reports."""
    if not specs:
        return []
    check_specs = [
        AssetCheckSpec(check, asset=workload_key(spec.name), description=description)
        for spec in sorted(specs, key=lambda s: s.name)
        for check, description in CHECKS.items()
    ]
    by_key = {workload_key(spec.name): spec for spec in specs}

    @multi_asset_check(
        specs=check_specs,
        name="workload_checks",
        can_subset=True,
        description="Lag, a pinned commit position and dead letters against each workload's "
        "checks thresholds, from its live runs' latest reports.",
    )
    def _checks(context: AssetCheckExecutionContext) -> Iterator[AssetCheckResult]:
        wanted = context.selected_asset_check_keys
        for key, spec in by_key.items():
            results = evaluate(context.instance, spec)
            for result in results:
                if any(k.asset_key == key and k.name == result.check_name for k in wanted):
                    yield result.as_result(key)

    return [_checks]
