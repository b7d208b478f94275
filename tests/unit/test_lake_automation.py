"""The closed-day sensor and the schedules on a real (temporary) Dagster instance, no Spark."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    RunRequest,
    SensorResult,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)

from orchestration.shop.automation import (
    Cursor,
    closed_day_requests,
    landed_day_closed,
    spark_current_day_hourly,
    spark_nightly,
)

PAST = date(2026, 3, 1)


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as instance:
        yield instance


def report(instance: DagsterInstance, asset: str, day: date) -> int:
    instance.report_runless_asset_event(
        AssetMaterialization(asset_key=asset, partition=day.isoformat())
    )
    records = instance.fetch_materializations(AssetKey(asset), limit=1).records
    return records[0].storage_id


def tick(instance: DagsterInstance, cursor: str | None = None) -> SensorResult:
    result = landed_day_closed(build_sensor_context(instance=instance, cursor=cursor))
    assert isinstance(result, SensorResult)
    return result


def requested(result: SensorResult) -> Sequence[RunRequest]:
    """The tick's run requests (``SensorResult`` types them as optional)."""
    assert result.run_requests is not None
    return result.run_requests


def test_a_closed_landed_day_is_requested_once_and_today_never(instance: DagsterInstance) -> None:
    landed_id = report(instance, "landed_clickstream", PAST)
    report(instance, "landed_orders", datetime.now(UTC).date())
    first = tick(instance)
    assert [(r.partition_key, r.run_key) for r in requested(first)] == [
        ("2026-03-01", f"2026-03-01@{landed_id}")
    ]
    assert tick(instance, first.cursor).run_requests == []  # already requested
    # The key is a function of the data, so a sensor that lost its cursor asks the same run,
    # which Dagster then skips.
    assert [r.run_key for r in requested(tick(instance))] == [f"2026-03-01@{landed_id}"]


def test_a_day_processed_after_its_last_landing_is_not_requested(
    instance: DagsterInstance,
) -> None:
    report(instance, "landed_clickstream", PAST)
    report(instance, "landed_orders", PAST)
    report(instance, "clean_clicks", PAST)
    assert [r.partition_key for r in requested(tick(instance))] == ["2026-03-01"]  # orders
    report(instance, "clean_orders", PAST)
    assert tick(instance).run_requests == []
    relanded = report(instance, "landed_orders", PAST)  # a replay after the Spark run
    assert [r.run_key for r in requested(tick(instance))] == [f"2026-03-01@{relanded}"]


def test_a_day_waits_for_its_grace_period(instance: DagsterInstance) -> None:
    report(instance, "landed_clickstream", PAST)
    midnight = datetime(2026, 3, 2, tzinfo=UTC)
    cursor = Cursor()
    grace = timedelta(minutes=10)
    assert closed_day_requests(instance, cursor, midnight + timedelta(minutes=9), grace) == []
    assert list(cursor.pending["clickstream"]) == ["2026-03-01"]  # kept for a later tick
    later = closed_day_requests(instance, cursor, midnight + timedelta(minutes=10), grace)
    assert [r.partition_key for r in later] == ["2026-03-01"]
    assert cursor.pending["clickstream"] == {}


def test_days_before_the_lake_start_are_dropped(instance: DagsterInstance) -> None:
    report(instance, "landed_clickstream", date(2020, 1, 1))
    result = tick(instance)
    assert result.run_requests == []
    assert Cursor.parse(result.cursor).pending["clickstream"] == {}


def test_schedules_target_today_and_yesterday() -> None:
    at = datetime(2026, 3, 5, 0, 30, tzinfo=UTC)
    nightly = spark_nightly(build_schedule_context(scheduled_execution_time=at))
    hourly = spark_current_day_hourly(build_schedule_context(scheduled_execution_time=at))
    assert nightly.partition_key == "2026-03-04"  # type: ignore[union-attr]
    assert hourly.partition_key == "2026-03-05"  # type: ignore[union-attr]
