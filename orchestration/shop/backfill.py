"""Rebuild Spark assets over a day range (``lanehouse backfill ASSET... --from DAY --to DAY``,
whose command is :mod:`orchestration.cli.backfill`).

Two ways, one result (one run over the whole range, the single-run backfill policy):

- a Dagster webserver answers at ``--url``: an asset backfill through GraphQL
  ``launchPartitionBackfill`` (what the UI's "Materialize" dialog does); the daemon runs it
  under the instance's Spark run limit, and the UI shows it. There is no ``dagster asset
  backfill`` CLI to call instead.
- otherwise, or with ``--in-process``: ``spark_daily`` runs here, on the local instance under
  the state dir, with a progress display. :func:`materialize_days` is that path as a function
  (the end-to-end demo calls it) and returns the per-day reconciliation.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from dagster import AssetKey, DagsterEventType, DagsterInstance, TableMetadataValue

from consumers import LanehouseError
from orchestration.graphql import graphql
from orchestration.platform import LAKE_PARTITIONS, SPARK_RUN_TAG, landed_key
from orchestration.shop.assets import SPARK_JOB_NAME
from orchestration.shop.tables import PROCESSED_DATASET, SIBLINGS, SPARK_ASSET_NAMES

if TYPE_CHECKING:
    from dagster import Definitions

#: Dagster's run tags for a single-run backfill of a partition range.
RANGE_START_TAG: Final = "dagster/asset_partition_range_start"
RANGE_END_TAG: Final = "dagster/asset_partition_range_end"
BACKFILL_MUTATION: Final = """
mutation LanehouseBackfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
  }
}
"""
_POLL: Final = 0.5  # seconds between progress polls of the run's events


@dataclass(frozen=True)
class DayCounts:
    """One day of one landed dataset: every landed row is clean, quarantined or a duplicate."""

    landed: int
    clean: int
    quarantined: int
    duplicates: int
    unaccounted: int


@dataclass(frozen=True)
class RangeRun:
    run_id: str
    success: bool
    days: tuple[date, ...]
    #: ``landed_<dataset>`` name → day → counts, from the reconciliation checks of the run.
    reconciliation: Mapping[str, Mapping[date, DayCounts]]
    checks_passed: bool


# --------------------------------------------------------------------------- validation


def selected_assets(names: Sequence[str]) -> list[str]:
    """The Spark assets to run, siblings of a multi-asset included (they run together).

    Raises ``ValueError`` naming the valid assets when one is unknown.
    """
    unknown = [n for n in names if n not in SPARK_ASSET_NAMES]
    if unknown or not names:
        raise ValueError(
            f"unknown Spark asset(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"valid: {', '.join(SPARK_ASSET_NAMES)}"
        )
    wanted = {sibling for n in names for sibling in SIBLINGS.get(n, (n,))}
    return [n for n in SPARK_ASSET_NAMES if n in wanted]


def day_range(first: str, last: str, today: date | None = None) -> list[date]:
    """Every day from ``first`` to ``last`` (ISO dates), inside the lake's partitions.

    Raises ``ValueError`` with what is wrong.
    """
    days = []
    for flag, text in (("--from", first), ("--to", last)):
        try:
            days.append(date.fromisoformat(text))
        except ValueError:
            raise ValueError(f"{flag}: {text!r} is not a date like 2026-03-01") from None
    start, end = days
    if start > end:
        raise ValueError(f"--from {start} is after --to {end}")
    earliest = LAKE_PARTITIONS.start.date()
    latest = today or datetime.now(UTC).date()
    if start < earliest or end > latest:
        raise ValueError(
            f"days must be within the lake's partitions, {earliest} to {latest} (today, UTC); "
            "LANEHOUSE_LAKE_START moves the first"
        )
    return [start + timedelta(days=n) for n in range((end - start).days + 1)]


# --------------------------------------------------------------------------- webserver


def webserver_answers(url: str, timeout: float = 2.0) -> bool:
    """Whether a Dagster webserver serves ``url`` (its ``/server_info``)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/server_info", timeout=timeout) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def backfill_variables(assets: Sequence[str], days: Sequence[date]) -> dict[str, Any]:
    """``launchPartitionBackfill`` params: the assets over the days, tagged as a Spark run."""
    return {
        "params": {
            "assetSelection": [{"path": [name]} for name in assets],
            "partitionNames": [day.isoformat() for day in days],
            "tags": [{"key": SPARK_RUN_TAG, "value": "backfill"}],
            "title": f"lanehouse backfill {days[0]}..{days[-1]}",
        }
    }


def launch_backfill(url: str, assets: Sequence[str], days: Sequence[date]) -> str:
    """Launch the asset backfill on the webserver; its id. ``LanehouseError`` when refused."""
    data = graphql(url.rstrip("/"), BACKFILL_MUTATION, backfill_variables(assets, days))
    result = data["launchPartitionBackfill"]
    if result["__typename"] != "LaunchBackfillSuccess":
        raise LanehouseError(f"backfill refused ({result['__typename']}): {result.get('message')}")
    return str(result["backfillId"])


# --------------------------------------------------------------------------- in process


def materialize_days(
    first: date,
    last: date,
    *,
    instance: DagsterInstance,
    assets: Sequence[str] | None = None,
    definitions: Definitions | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    log_level: str = "INFO",
) -> RangeRun:
    """Materialize ``assets`` (default: all Spark assets) for ``first``..``last`` in ONE run in
    this process, and return the per-day reconciliation of what it landed and cleaned.

    ``on_progress(done, total)`` is called with the number of assets materialized so far;
    ``log_level`` is the console level of the run's Dagster logs.
    A failing step does not raise: ``success`` says it, and the run's events tell why.
    """
    if definitions is None:
        from orchestration.shop.pipeline import shop_definitions

        definitions = shop_definitions()
    names = selected_assets(assets) if assets is not None else list(SPARK_ASSET_NAMES)
    days = tuple(first + timedelta(days=n) for n in range((last - first).days + 1))
    if not days:
        raise ValueError(f"first {first} is after last {last}")
    job = definitions.resolve_job_def(SPARK_JOB_NAME)
    run_id = str(uuid.uuid4())
    tags = {RANGE_START_TAG: first.isoformat(), RANGE_END_TAG: last.isoformat()}
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(instance, run_id, len(names), on_progress, stop), daemon=True
    )
    if on_progress is not None:
        watcher.start()
    try:
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[AssetKey(n) for n in names],
            tags=tags,
            run_id=run_id,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
    if on_progress is not None:
        on_progress(_materialized(instance, run_id), len(names))
    evaluations = result.get_asset_check_evaluations()
    return RangeRun(
        run_id=run_id,
        success=result.success,
        days=days,
        reconciliation=_reconciliation(evaluations),
        checks_passed=all(e.passed for e in evaluations),
    )


def _materialized(instance: DagsterInstance, run_id: str) -> int:
    events = instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    return len({e.dagster_event.asset_key for e in events if e.dagster_event is not None})


def _watch(
    instance: DagsterInstance,
    run_id: str,
    total: int,
    on_progress: Callable[[int, int], None],
    stop: threading.Event,
) -> None:
    while not stop.wait(_POLL):
        on_progress(_materialized(instance, run_id), total)


def _reconciliation(evaluations: Sequence[Any]) -> dict[str, dict[date, DayCounts]]:
    counts: dict[str, dict[date, DayCounts]] = {}
    for evaluation in evaluations:
        dataset = PROCESSED_DATASET.get(evaluation.asset_key.to_user_string())
        table = evaluation.metadata.get("per_day")
        if dataset is None or not isinstance(table, TableMetadataValue):
            continue
        per_day = counts.setdefault(landed_key(dataset).to_user_string(), {})
        for record in table.records:
            row = {k: str(v) for k, v in record.data.items()}
            per_day[date.fromisoformat(row["event_date"])] = DayCounts(
                landed=int(row["landed"]),
                clean=int(row["clean"]),
                quarantined=int(row["quarantined"]),
                duplicates=int(row["duplicates"]),
                unaccounted=int(row["unaccounted"]),
            )
    return counts
