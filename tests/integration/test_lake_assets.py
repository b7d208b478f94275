"""The lake's Spark assets on real landed files, a real Dagster instance and one local Spark.

One SparkSession for the module; every test has its own lake directory and instance.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    EventLogEntry,
    SensorResult,
    TableColumnLineageMetadataValue,
    TableSchemaMetadataValue,
    build_sensor_context,
    instance_for_test,
)
from pyspark.sql import DataFrame, SparkSession
from typer.testing import CliRunner

from consumers.landing.quarantine import move_aside
from orchestration.cli import app
from orchestration.demo.events import DemoRecord, expected_per_day, generate
from orchestration.lake import tables as lake_tables
from orchestration.lake.runs import SPARK_RUN_TAG
from orchestration.shop import assets as shop_assets
from orchestration.shop.automation import landed_day_closed
from orchestration.shop.backfill import RANGE_END_TAG, RANGE_START_TAG, RangeRun, materialize_days
from orchestration.shop.tables import SPARK_ASSET_NAMES, TABLES
from tests.lake import Landed, day_files, land, snapshot

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAYS = [date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)]
CLICK_TABLES = ("clean_clicks", "click_quarantine", "click_duplicates")


@pytest.fixture(scope="module")
def records() -> list[DemoRecord]:
    return list(
        generate(DAYS, users=12, sessions_per_user_per_day=2, malformed_fraction=0.1, seed=7)
    )


@dataclass
class Lake:
    path: Path
    landed: Landed
    instance: DagsterInstance


@pytest.fixture
def lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, records: list[DemoRecord]
) -> Iterator[Lake]:
    path = tmp_path / "lake"
    monkeypatch.setenv("LANEHOUSE_LAKE", str(path))
    landed = land(path, records)
    (tmp_path / "dagster").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield Lake(path, landed, instance)


@dataclass
class RangeResult:
    lake: Lake
    run: RangeRun
    tables: dict[tuple[str, date], list[tuple[Any, ...]]]


@pytest.fixture(scope="module")
def range_run(
    spark: SparkSession, records: list[DemoRecord], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RangeResult]:
    """The three days in one run, after the consumers reported them landed."""
    base = tmp_path_factory.mktemp("range")
    with pytest.MonkeyPatch.context() as patch, instance_for_test(temp_dir=str(base)) as instance:
        path = base / "lake"
        patch.setenv("LANEHOUSE_LAKE", str(path))
        landed = land(path, records)
        for dataset in ("clickstream", "orders"):
            for day in DAYS:
                _report_landed(instance, dataset, day)
        run = materialize_days(DAYS[0], DAYS[-1], instance=instance)
        yield RangeResult(Lake(path, landed, instance), run, snapshot(path, DAYS))


def _report_landed(instance: DagsterInstance, dataset: str, day: date) -> None:
    instance.report_runless_asset_event(
        AssetMaterialization(asset_key=f"landed_{dataset}", partition=day.isoformat())
    )


def test_a_range_is_one_run_reconciled_with_what_was_produced(
    range_run: RangeResult, records: list[DemoRecord]
) -> None:
    run, instance = range_run.run, range_run.lake.instance
    assert run.success and run.checks_passed
    runs = instance.get_runs()
    assert [r.run_id for r in runs] == [run.run_id]
    assert runs[0].tags[RANGE_START_TAG] == "2026-03-01"
    assert runs[0].tags[RANGE_END_TAG] == "2026-03-03"
    assert runs[0].tags[SPARK_RUN_TAG] == "daily"
    for name in SPARK_ASSET_NAMES:
        assert instance.get_materialized_partitions(AssetKey(name)) == {d.isoformat() for d in DAYS}

    expected = expected_per_day(records)
    replayed = range_run.lake.landed.replayed
    for stream, dataset in (("clicks", "clickstream"), ("orders", "orders")):
        per_day = run.reconciliation[f"landed_{dataset}"]
        assert sorted(per_day) == DAYS
        for day, counts in per_day.items():
            extra = replayed[dataset, day]
            assert counts.landed == expected[day][f"{stream}_produced"] + extra
            assert counts.clean == expected[day][f"{stream}_valid"]
            assert counts.quarantined == expected[day][f"{stream}_malformed"]
            assert counts.duplicates == extra
            assert counts.unaccounted == 0
            # and what is in the tables on disk agrees
            assert (
                len(range_run.tables["clean_clicks" if stream == "clicks" else "clean_orders", day])
                == counts.clean
            )


def test_materialization_metadata_counts_the_rows_written(range_run: RangeResult) -> None:
    instance = range_run.lake.instance
    key = AssetKey("clean_clicks")
    event = instance.get_latest_materialization_event(key)
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    per_day = {d.isoformat(): len(range_run.tables["clean_clicks", d]) for d in DAYS}
    assert len(set(per_day.values())) > 1, "days of equal size cannot tell the counts apart"
    assert metadata["rows_per_day"].value == per_day
    assert metadata["range_row_count"].value == sum(per_day.values())
    assert metadata["table_row_count"].value == sum(per_day.values())  # the range is all of it
    # Each day's partition counts that day's rows, not the range's.
    records = instance.fetch_materializations(key, limit=len(DAYS)).records
    by_day = {
        r.partition_key: r.asset_materialization.metadata["dagster/row_count"].value  # type: ignore[union-attr]
        for r in records
    }
    assert by_day == per_day
    assert metadata["path"].value == str(range_run.lake.path / "tables" / "clean_clicks")
    schema, column_lineage = metadata["dagster/column_schema"], metadata["dagster/column_lineage"]
    assert isinstance(schema, TableSchemaMetadataValue)
    assert isinstance(column_lineage, TableColumnLineageMetadataValue)
    assert [c.name for c in schema.schema.columns][:2] == [
        "event_id",
        "user_id",
    ]
    lineage = column_lineage.column_lineage.deps_by_column
    assert [d.column_name for d in lineage["event_id"]] == ["value"]
    assert [(d.asset_key, d.column_name) for d in lineage["_offset"]] == [
        (AssetKey("landed_clickstream"), "_offset")
    ]


def test_a_day_and_the_rest_as_two_runs_equal_the_range(lake: Lake, range_run: RangeResult) -> None:
    """Where runs split a range changes no row: the first day alone, then the other two in one
    run, write what the three-day run wrote. (Two runs rather than one per day: each is a full
    pass of every Spark asset, ~15 s alone and a minute in the busy suite.)"""
    for first, last in ((DAYS[0], DAYS[0]), (DAYS[1], DAYS[-1])):
        run = materialize_days(first, last, instance=lake.instance)
        assert run.success and run.checks_passed
    split = snapshot(lake.path, DAYS)
    assert split == range_run.tables
    assert all(split[name, day] for name in ("clean_clicks", "sessions") for day in DAYS)


def test_rerunning_a_day_rewrites_it_identically_and_touches_no_other_day(lake: Lake) -> None:
    first = materialize_days(DAYS[0], DAYS[1], instance=lake.instance, assets=["clean_clicks"])
    assert first.success and first.checks_passed
    before = snapshot(lake.path, DAYS[:2], CLICK_TABLES)
    other_day = {name: day_files(lake.path, name, DAYS[1]) for name in CLICK_TABLES}
    rewritten = {name: day_files(lake.path, name, DAYS[0]) for name in CLICK_TABLES}

    again = materialize_days(DAYS[0], DAYS[0], instance=lake.instance, assets=["clean_clicks"])
    assert again.success and again.checks_passed
    assert snapshot(lake.path, DAYS[:2], CLICK_TABLES) == before
    assert {name: day_files(lake.path, name, DAYS[1]) for name in CLICK_TABLES} == other_day
    # the day itself was written anew (new file names), not skipped
    assert all(
        set(day_files(lake.path, name, DAYS[0])).isdisjoint(rewritten[name])
        for name in CLICK_TABLES
        if rewritten[name]
    )


def test_a_day_without_landed_files_is_emptied_and_removed_files_vanish(
    spark: SparkSession, lake: Lake
) -> None:
    first = materialize_days(DAYS[0], DAYS[1], instance=lake.instance, assets=["clean_clicks"])
    assert first.success
    clean = lake_tables.table_root(lake.path, "clean_clicks")
    assert all(lake_tables.row_counts(clean, DAYS[:2]).values())
    before = _lineage(spark, clean, DAYS[0])

    shutil.rmtree(lake_tables.day_dir(lake_tables.landed_root(lake.path, "clickstream"), DAYS[1]))
    removed = lake.landed.files["clickstream", DAYS[0]][-1]  # not the replayed first file
    columns = ["_partition", "_offset"]
    gone = {tuple(r.values()) for r in pq.read_table(removed, columns=columns).to_pylist()}
    removed.unlink()
    assert before & gone  # the file held clean rows

    second = materialize_days(DAYS[0], DAYS[1], instance=lake.instance, assets=["clean_clicks"])
    assert second.success and second.checks_passed
    emptied = second.reconciliation["landed_clickstream"][DAYS[1]]
    assert (emptied.landed, emptied.clean, emptied.unaccounted) == (0, 0, 0)
    for name in CLICK_TABLES:
        root = lake_tables.table_root(lake.path, name)
        assert lake_tables.row_counts(root, [DAYS[1]]) == {DAYS[1]: 0}, name
    assert _lineage(spark, clean, DAYS[0]) == before - gone


def test_a_damaged_or_quarantined_landed_file_is_skipped_and_reported(lake: Lake) -> None:
    """Before: Spark failed the whole run at a landed file it could not read."""
    files = lake.landed.files["clickstream", DAYS[0]]
    damaged, moved = files[-1], files[-2]  # not the replayed first file
    rows = {f: pq.read_metadata(f).num_rows for f in (damaged, moved)}
    damaged.write_bytes(damaged.read_bytes()[:64])
    aside = move_aside(lake_tables.landed_root(lake.path, "clickstream"), moved)

    run = materialize_days(DAYS[0], DAYS[0], instance=lake.instance, assets=["clean_clicks"])
    assert run.success and run.checks_passed
    event = lake.instance.get_latest_materialization_event(AssetKey("clean_clicks"))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    assert metadata["skipped_files"].value == 2
    skipped = metadata["skipped_paths"].value
    assert isinstance(skipped, dict)
    assert skipped[str(aside)] == "quarantined"
    reason = skipped[str(damaged)]
    assert isinstance(reason, str) and reason.startswith("unreadable: ")
    counts = run.reconciliation["landed_clickstream"][DAYS[0]]
    every = sum(pq.read_metadata(f).num_rows for f in files if f not in rows)
    every += lake.landed.replayed["clickstream", DAYS[0]]  # the first file's second copy
    assert counts.landed == every and counts.unaccounted == 0


def check_evaluation(entry: EventLogEntry | None) -> AssetCheckEvaluation:
    """The evaluation an asset check's execution record holds."""
    assert entry is not None and entry.dagster_event is not None
    evaluation = entry.dagster_event.event_specific_data
    assert isinstance(evaluation, AssetCheckEvaluation), evaluation
    return evaluation


def _lineage(spark: SparkSession, root: Path, day: date) -> set[tuple[Any, ...]]:
    rows = lake_tables.read_days(spark, root, TABLES[root.name].schema, [day])
    return {(r["_partition"], r["_offset"]) for r in rows.select("_partition", "_offset").collect()}


def test_the_reconciliation_check_fails_when_a_write_loses_rows(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage bug that drops one clean row: the check, which counts what is on disk, sees it."""
    write_days = lake_tables.write_days

    def lossy(frame: DataFrame, root: Path, days: Any, stage: str) -> None:
        if root.name == "clean_clicks":
            frame = frame.exceptAll(frame.orderBy("_offset").limit(1))
        write_days(frame, root, days, stage)

    monkeypatch.setattr(shop_assets, "write_days", lossy)
    run = materialize_days(DAYS[0], DAYS[0], instance=lake.instance, assets=["clean_clicks"])
    assert run.success and not run.checks_passed
    assert run.reconciliation["landed_clickstream"][DAYS[0]].unaccounted == 1
    record = lake.instance.get_latest_asset_check_evaluation_record(
        AssetCheckKey(AssetKey("clean_clicks"), "reconciles")
    )
    assert record is not None
    evaluation = check_evaluation(record.event)
    assert evaluation.passed is False
    assert evaluation.severity == AssetCheckSeverity.ERROR


def test_the_sensor_requests_nothing_for_processed_days_then_a_relanded_one(
    range_run: RangeResult,
) -> None:
    instance = range_run.lake.instance
    first = landed_day_closed(build_sensor_context(instance=instance))
    assert isinstance(first, SensorResult)
    assert first.run_requests == []
    _report_landed(instance, "orders", DAYS[1])
    second = landed_day_closed(build_sensor_context(instance=instance, cursor=first.cursor))
    assert isinstance(second, SensorResult) and second.run_requests is not None
    assert [r.partition_key for r in second.run_requests] == ["2026-03-02"]


def test_backfill_cli_in_process_materializes_a_two_day_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, records: list[DemoRecord]
) -> None:
    monkeypatch.delenv("LANEHOUSE_LAKE", raising=False)  # restored afterwards: the CLI sets it
    monkeypatch.delenv("LANEHOUSE_HOME", raising=False)
    state = tmp_path / "state"
    land(state / "lake", records)
    result = CliRunner().invoke(
        app,
        [
            *("backfill", "click_quarantine", "--from", "2026-03-01", "--to", "2026-03-02"),
            *("--in-process", "--state-dir", str(state)),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "landed_clickstream 2026-03-01: landed " in result.stdout
    assert "landed_clickstream 2026-03-02: landed " in result.stdout
    for name in CLICK_TABLES:
        counts = lake_tables.row_counts(state / "lake" / "tables" / name, DAYS)
        assert counts[DAYS[0]] and counts[DAYS[1]] and not counts[DAYS[2]], (name, counts)
    instance = DagsterInstance.from_config(str(state / "dagster"))
    runs = instance.get_runs()
    assert len(runs) == 1 and runs[0].tags[RANGE_END_TAG] == "2026-03-02"
