"""When the Spark assets run: when a landed day closes (sensor), and by schedule.

Why not ``AutomationCondition.eager()``: a day is landed continuously until midnight, and eager
would re-run Spark after every landed file (NOTES.md). The sensor instead waits until day D
has ended plus a grace period (late files of D still arrive from consumer buffers), then
requests one ``spark_daily`` run for D, and again only if D is landed anew later (a replay, a
late record): its run key is (D, newest landed event), so a tick never launches twice.

Cheap per tick: one query per landed dataset for events after the cursor, and one per
pending closed day and dataset for the Spark asset's latest materialization of that day.
The cursor holds the last landed event seen and the days still waiting to close.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    schedule,
    sensor,
)

from orchestration.platform import LAKE_PARTITIONS, landed_key
from orchestration.shop.assets import SPARK_JOB_NAME
from orchestration.shop.tables import PROCESSED_DATASET

SENSOR_NAME: Final = "landed_day_closed"
DEFAULT_GRACE: Final = timedelta(minutes=10)
#: Landed dataset → the Spark asset whose materialization of a day says "D is processed".
PROCESSED_BY: Final[Mapping[str, AssetKey]] = {
    dataset: AssetKey(table) for table, dataset in PROCESSED_DATASET.items()
}
_PAGE: Final = 1000  # landed events read per dataset and tick


def grace_period() -> timedelta:
    """``LANEHOUSE_LAKE_GRACE_MINUTES`` (default 10): how long after midnight a day is closed."""
    raw = os.environ.get("LANEHOUSE_LAKE_GRACE_MINUTES", "").strip()
    if not raw:
        return DEFAULT_GRACE
    if not raw.isdecimal():
        raise ValueError(f"LANEHOUSE_LAKE_GRACE_MINUTES must be an int >= 0, got {raw!r}")
    return timedelta(minutes=int(raw))


@dataclass
class Cursor:
    """Per dataset: the last landed storage id read, and the newest one of each open day."""

    after: dict[str, int] = field(default_factory=dict)
    pending: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(
            after=dict(raw["after"]), pending={k: dict(v) for k, v in raw["pending"].items()}
        )

    def dump(self) -> str:
        return json.dumps({"after": self.after, "pending": self.pending}, sort_keys=True)


def closed_day_requests(
    instance: DagsterInstance, cursor: Cursor, now: datetime, grace: timedelta
) -> list[RunRequest]:
    """Run requests for closed days landed after their last Spark run; updates ``cursor``."""
    valid_days = set()
    newest: dict[str, int] = {}  # day → newest landed storage id over all datasets
    for dataset, processed_by in PROCESSED_BY.items():
        pending = cursor.pending.setdefault(dataset, {})
        records = instance.fetch_materializations(
            AssetRecordsFilter(
                asset_key=landed_key(dataset), after_storage_id=cursor.after.get(dataset)
            ),
            limit=_PAGE,
            ascending=True,
        ).records
        for record in records:
            cursor.after[dataset] = record.storage_id
            if record.partition_key is not None:
                pending[record.partition_key] = record.storage_id
        for key, landed_id in sorted(pending.items()):
            day = _day(key)
            if day is None or day < LAKE_PARTITIONS.start.date():
                del pending[key]  # not a lake day: the consumer reported a bad key
                continue
            if datetime.combine(day + timedelta(days=1), time(), UTC) + grace > now:
                continue  # still open (or in its grace period): wait
            del pending[key]
            processed = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=processed_by, asset_partitions=[key]), limit=1
            ).records
            if not processed or processed[0].storage_id < landed_id:
                valid_days.add(key)
                newest[key] = max(newest.get(key, 0), landed_id)
    return [
        RunRequest(run_key=f"{key}@{newest[key]}", partition_key=key) for key in sorted(valid_days)
    ]


def _day(key: str) -> date | None:
    try:
        return date.fromisoformat(key)
    except ValueError:
        return None


@sensor(
    name=SENSOR_NAME,
    job_name=SPARK_JOB_NAME,
    minimum_interval_seconds=60,
    # Running: clean tables should follow landed data without anyone switching this on; the
    # run-tag limit keeps it to one Spark run at a time, and nothing runs until a day closes.
    default_status=DefaultSensorStatus.RUNNING,
    description="Runs spark_daily for a UTC day once it has closed (midnight + grace) and was "
    "landed after its last Spark run.",
)
def landed_day_closed(context: SensorEvaluationContext) -> SensorResult:
    cursor = Cursor.parse(context.cursor)
    requests = closed_day_requests(context.instance, cursor, datetime.now(UTC), grace_period())
    return SensorResult(run_requests=requests, cursor=cursor.dump())


@schedule(
    name="spark_current_day_hourly",
    job_name=SPARK_JOB_NAME,
    cron_schedule="15 * * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
    description="Refreshes today's (still open) partition every hour; off by default.",
)
def spark_current_day_hourly(context: ScheduleEvaluationContext) -> RunRequest:
    day = context.scheduled_execution_time.astimezone(UTC).date()
    return RunRequest(partition_key=day.isoformat())


@schedule(
    name="spark_nightly",
    job_name=SPARK_JOB_NAME,
    cron_schedule="30 0 * * *",
    execution_timezone="UTC",
    # Off: the sensor already runs yesterday at 00:10 when it was landed; this is the
    # fallback for landing that reports no materializations, or a stopped sensor.
    default_status=DefaultScheduleStatus.STOPPED,
    description="Materializes yesterday's partition at 00:30 UTC; off by default.",
)
def spark_nightly(context: ScheduleEvaluationContext) -> RunRequest:
    day = context.scheduled_execution_time.astimezone(UTC).date() - timedelta(days=1)
    return RunRequest(run_key=day.isoformat(), partition_key=day.isoformat())


SENSORS: Final[tuple[SensorDefinition, ...]] = (landed_day_closed,)
SCHEDULES: Final[tuple[ScheduleDefinition, ...]] = (spark_current_day_hourly, spark_nightly)
