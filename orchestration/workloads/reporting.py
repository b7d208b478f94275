"""What a consumer run reports to Dagster while it runs: an ``AssetObservation`` of its workload's
asset from the engine's snapshots (progress, lag per partition, the watermark pin), and one
``AssetMaterialization`` of ``landed_<dataset>`` per day of files the landing sink made durable.

Only on the op's thread (:mod:`orchestration.workloads.job` runs the reporting task there).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from dagster import (
    AssetMaterialization,
    AssetObservation,
    MetadataValue,
    OpExecutionContext,
    TableColumn,
    TableRecord,
    TableSchema,
)

from consumers import ConsumerApp, WorkloadSpec
from consumers.config.spec import spec_hash
from consumers.landing.sink import LandedFile
from consumers.landing.totals import DayTotals
from consumers.service.metrics import WorkloadSnapshot, key_label, workload_snapshot
from orchestration.lake.landed import LAKE_PARTITIONS, landed_key
from orchestration.workloads.assets import workload_key
from orchestration.workloads.endpoints import RunEndpoints
from orchestration.workloads.health import CheckJudge
from orchestration.workloads.names import ASSIGNED_TAG


def workload_metadata(
    snap: WorkloadSnapshot, throughput: float, status: str, replica: int = 0
) -> dict[str, Any]:
    """One replica's report on the workload's asset. Counters and in-flight calls are the
    replica's (the engine counts per workload and process); lag, the partition table and the pin
    are those of the partitions assigned to it."""
    parts = sorted(snap.partitions, key=lambda p: (p.topic, p.partition))
    lags = [p.lag for p in parts if p.lag is not None]
    unread = [f"{p.topic}[{p.partition}]" for p in parts if p.end is None]
    pins = [p for p in parts if p.pinned_seconds is not None]
    pin = max(pins, key=lambda p: p.pinned_seconds or 0.0) if pins else None
    stalls = [p for p in parts if p.stalled_seconds is not None]
    stall = max(stalls, key=lambda p: p.stalled_seconds or 0.0) if stalls else None
    counters = snap.counters
    return {
        "workload": snap.name,
        "replica": replica,
        "status": status,
        "records_completed": counters["completed"],
        "records_failed": counters["failed"],
        "dead_lettered": counters["dead_lettered"],
        "parked": counters["parked"],
        "valve_used": round(snap.valve_used, 4) if snap.valve_used is not None else None,
        "throughput_per_s": round(throughput, 3),
        "lag": sum(lags) if lags else None,
        # The page shows each key's newest value: these replace a still workload's broker
        # figures (orchestration.workloads.standstill) once a run reports again.
        "lag_from": "run",
        # A partition's end is known from its client's first fetch response: until then the
        # lag counts the others, a lower bound (the lag check is never green on it). One with
        # an end, no record delivered and nothing committed (a new group) has no position.
        "lag_unknown": f"not read yet: {', '.join(unread)}" if unread else None,
        "in_flight": snap.in_flight,
        "partitions": len(parts),
        "assigned": ",".join(str(p.partition) for p in parts),
        "partition_lag": MetadataValue.table(
            records=[
                TableRecord(
                    {
                        "lag": p.lag if p.lag is not None else -1,
                        "partition": p.partition,
                        "committed": p.committed if p.committed is not None else -1,
                        "end": p.end if p.end is not None else -1,
                        "topic": p.topic,
                    }
                )
                for p in parts
            ],
            schema=PARTITION_TABLE,
        ),
        "pinned_partition": pin.partition if pin else None,
        "pinned_offset": pin.pinned_offset if pin else None,
        "pinned_key": key_label(pin.pinned_key) if pin else None,
        "pinned_seconds": round(pin.pinned_seconds or 0.0, 3) if pin else None,
        "stalled_partition": stall.partition if stall else None,
        "stalled_seconds": round(stall.stalled_seconds or 0.0, 3) if stall else None,
    }


#: How often a run looks whether it can make its first report (its lag is known).
FIRST_REPORT_POLL: Final = 0.25
#: How often a run looks whether its partitions changed (a rebalance), between reports.
ASSIGNMENT_POLL: Final = 0.5

#: Columns of a report's per-partition table (-1: not known yet). Lag first and the topic
#: last: a long Pulsar topic name pushed the figures off a 1,400 px wide page.
PARTITION_TABLE: Final = TableSchema(
    columns=[
        TableColumn("lag", "int", description="end - committed"),
        TableColumn("partition", "int"),
        TableColumn("committed", "int", description="the group's position (next to handle)"),
        TableColumn("end", "int", description="the log end (at least the position)"),
        TableColumn("topic", "string"),
    ]
)


def assignment_text(parts: Iterable[tuple[str, int]]) -> str:
    """``topic[0,3] other[1]``: the partitions a replica holds, for its run tag."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in parts:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(
        f"{topic}[{','.join(map(str, sorted(parts)))}]" for topic, parts in sorted(by_topic.items())
    )


#: Data version tag of a materialization (``dagster.DATA_VERSION_TAG`` is not exported).
DATA_VERSION_TAG: Final = "dagster/data_version"


def landed_materializations(
    files: list[LandedFile], workload: str, digest: str, totals: DayTotals
) -> tuple[list[AssetMaterialization], list[LandedFile]]:
    """One materialization of ``landed_<dataset>`` per (dataset, day) among ``files``; and the
    files of days the lake's partitions do not have (a record timestamped before
    ``LANEHOUSE_LAKE_START`` or in the future), which cannot be reported with a partition.

    ``dagster/row_count`` and ``files`` are the day's totals as the lake holds them now (every
    run's files); ``new_rows`` and ``new_files`` are what this report adds. The data version is
    a digest of the new files' names and row counts, so downstream Spark assets of that day
    show as stale after each new file.
    """
    groups: dict[tuple[str, str], list[LandedFile]] = {}
    outside: list[LandedFile] = []
    for file in files:
        day = file.day.isoformat()
        if LAKE_PARTITIONS.has_partition_key(day):
            groups.setdefault((file.dataset, day), []).append(file)
        else:
            outside.append(file)
    events = []
    for (dataset, day), group in sorted(groups.items()):
        ranges: dict[str, list[str]] = {}
        for file in group:
            label = f"{file.topic}[{file.partition}]"
            ranges.setdefault(label, []).append(f"{file.first_offset}-{file.last_offset}")
        version = hashlib.sha256(
            "\n".join(f"{f.path.name}:{f.rows}" for f in group).encode()
        ).hexdigest()[:16]
        day_rows, day_files = totals.of(group[0].path.parent)
        events.append(
            AssetMaterialization(
                asset_key=landed_key(dataset),
                partition=day,
                description=f"{len(group)} landed files from workload {workload}",
                metadata={
                    "dagster/row_count": MetadataValue.int(day_rows),
                    "files": day_files,
                    "new_rows": sum(f.rows for f in group),
                    "new_files": len(group),
                    "offset_ranges": ranges,
                    "paths": [str(f.path) for f in group],
                    "workload": workload,
                    "spec_hash": digest,
                },
                tags={DATA_VERSION_TAG: version},
            )
        )
    return events, outside


class Reporter:
    """Observes the workload's asset from engine snapshots, and reports landed files as
    materializations (on the op's thread only)."""

    def __init__(
        self,
        context: OpExecutionContext,
        app: ConsumerApp,
        spec: WorkloadSpec,
        replica: int = 0,
        path: Path | None = None,
        tag_assignment: bool = True,
    ) -> None:
        """``path``: the spec's file (the checks' thresholds are read again when it changes);
        ``tag_assignment``: keep the run's assigned-partitions tag (False in a host run, whose
        workloads would overwrite each other's)."""
        self._context = context
        self._tags = tag_assignment
        self._app = app
        self._name = self.workload = spec.name
        self.replica = replica
        #: The partitions last written to the run's ``ASSIGNED_TAG`` (rewritten on a change).
        self._assigned: str | None = None
        self._tag_failing = False
        self._key = workload_key(spec.name)
        self._judge = CheckJudge(context.instance, spec, context.run_id, replica, path)
        self._since = app.clock.now()
        self._completed = 0
        self._digest = spec_hash(spec)
        self._links: dict[str, MetadataValue] = {}
        self._totals = DayTotals()

    def link(self, endpoints: RunEndpoints | None) -> None:
        """The run's HTTP endpoints in every observation: a link to its metrics and how to read
        its tap (a command naming the token's variable, never its value); None: it serves none."""
        self._links = {}
        if endpoints is not None:
            self._links = {
                "metrics": MetadataValue.url(f"{endpoints.url}/metrics"),
                "tap": MetadataValue.text(endpoints.tap_of(self._name)),
            }

    async def every(self, seconds: float) -> None:
        """Report every ``seconds``; the first time as soon as the workload's lag is known (its
        partitions assigned and read from), so its page and checks show a run from its start."""
        clock, waited = self._app.clock, 0.0
        while waited < seconds and not self._lag_known():
            await clock.sleep(FIRST_REPORT_POLL)
            waited += FIRST_REPORT_POLL
        while True:
            try:
                # Footers of the day's files and the checks' reads off the loop: handlers,
                # commits and rebalances go on meanwhile.
                await asyncio.to_thread(self._totals.warm, self._landed_days())
                report = self.observe("running")
                if report is not None:
                    await asyncio.to_thread(self._judge.judge, report, clock.now())
            except Exception as exc:  # a storage hiccup must not end reporting for the run
                self._context.log.warning(f"progress report failed, trying again: {exc!r}")
            await self._follow_assignment(seconds)

    async def _follow_assignment(self, seconds: float) -> None:
        """Until the next report, rewrite the assigned tag within :data:`ASSIGNMENT_POLL` of a
        rebalance: with the report's interval (30 s) two replicas' tags claimed the same
        partitions for 25 s after a scale-up."""
        clock, waited = self._app.clock, 0.0
        while waited < seconds:
            step = min(ASSIGNMENT_POLL, seconds - waited)
            await clock.sleep(step)
            waited += step
            runner = self._app.runners.get(self._name)
            if runner is None:
                continue
            try:
                self._tag_assignment(list(runner.parts))
            except Exception as exc:  # as a report: try again on the next look, say it once
                if not self._tag_failing:
                    self._context.log.warning(f"assigned tag not written, retrying: {exc!r}")
                self._tag_failing = True
            else:
                self._tag_failing = False

    def _landed_days(self) -> set[Path]:
        landing = self._app.runners[self._name].landing if self._name in self._app.runners else None
        return {file.path.parent for file in landing.recent} if landing is not None else set()

    def _lag_known(self) -> bool:
        runner = self._app.runners.get(self._name)
        return runner is not None and any(
            p.high_watermark is not None and p.tracker.position is not None
            for p in runner.partitions()
        )

    def observe(self, status: str) -> dict[str, Any] | None:
        """Report now; the report (None: the engine never started)."""
        if self._name not in self._app.runners:
            return None
        now = self._app.clock.now()
        snap = workload_snapshot(self._app, self._name, now)
        completed = snap.counters["completed"]
        elapsed = now - self._since
        throughput = (completed - self._completed) / elapsed if elapsed > 0 else 0.0
        self._since, self._completed = now, completed
        metadata = workload_metadata(snap, throughput, status, self.replica)
        self._context.log_event(
            AssetObservation(asset_key=self._key, metadata={**metadata, **self._links})
        )
        self._tag_assignment((p.topic, p.partition) for p in snap.partitions)
        landing = self._app.runners[self._name].landing
        if landing is not None:
            files = landing.take_landed()
            try:
                self._report_landed(files)
            except Exception:
                landing.put_back(files)  # reported again next time
                raise
        # log_event has already written the events to the instance; the context also keeps
        # them (~4 KB each) until the op returns, which for a consumer is weeks: drop them.
        for _ in self._context.consume_events():
            pass
        return metadata

    def _tag_assignment(self, parts: Iterable[tuple[str, int]]) -> None:
        """The run's partitions as a tag, so the Runs page shows how replicas split them.

        Written only when the assignment changes: each tag write rewrites the run's record.
        """
        assigned = assignment_text(parts)
        if self._tags and assigned != self._assigned:
            run_id = self._context.run_id
            self._context.instance.add_run_tags(run_id, {ASSIGNED_TAG: assigned or "none"})
            self._assigned = assigned

    def _report_landed(self, files: list[LandedFile]) -> None:
        events, outside = landed_materializations(files, self._name, self._digest, self._totals)
        for event in events:
            self._context.log_event(event)
        if outside:
            days = sorted({f.day.isoformat() for f in outside})
            self._context.log.warning(
                f"workload {self._name}: {sum(f.rows for f in outside)} rows landed for days "
                f"outside the lake's partitions ({', '.join(days[:5])}); they are in the lake "
                "but not reported to Dagster (see LANEHOUSE_LAKE_START)"
            )
