"""The steps of the browser test of ``lanehouse up`` (``tests/e2e/test_up.py``): each drives
a page of the Dagster UI in a real browser and checks what it shows against what the platform
did, read over GraphQL, from the instance or from the brokers. Screenshots go to
``$LANEHOUSE_ARTIFACTS`` (default ``test-artifacts/ui``)."""

from __future__ import annotations

import json
import os
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.sample import produce_sample
from orchestration.workloads.assets import LAG_CHECK, workload_key
from tests.helpers import wait_until
from tests.support.browser import park, show
from tests.support.platform_up import Up

ARTIFACTS = Path(os.environ.get("LANEHOUSE_ARTIFACTS", "test-artifacts")) / "ui"
GROUP, TOPIC = "lanehouse.clickstream", "clickstream.events"


def committed(up: Up) -> int:
    bootstrap = f"127.0.0.1:{up.ports[1]}"
    return sum(max(o, 0) for o in committed_offsets(bootstrap, GROUP, TOPIC, 4).values())


def last_tick(up: Up) -> float:
    data = up.graphql(
        '{ sensorOrError(sensorSelector: {repositoryLocationName: "lanehouse", '
        'repositoryName: "__repository__", sensorName: "workload_discovery"}) '
        "{ ... on Sensor { sensorState { status ticks(limit: 1) { timestamp } } } } }"
    )
    ticks = data["sensorOrError"]["sensorState"]["ticks"]
    return float(ticks[0]["timestamp"]) if ticks else 0.0


def still_figures_in_the_ui(page: object, up: Up, url: str) -> None:
    """The stopped workload's page shows its phase and the broker's lag, which grows while the
    shop keeps producing; never the stopped run's last rate."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)

    def newest() -> dict[str, Any]:
        with DagsterInstance.from_config(str(up.state / "dagster")) as instance:
            [record] = instance.fetch_observations(workload_key("clickstream"), limit=1).records
            assert record.asset_observation is not None
            return {k: v.value for k, v in record.asset_observation.metadata.items()}

    wait_until(
        lambda: newest().get("lag_from") == "broker",
        timeout=60,
        interval=1,
        message="the sensor observes the stopped workload's lag on the broker",
    )
    figures = newest()
    assert figures["status"] == "stopped by a person", figures
    assert (figures["throughput_per_s"], figures["in_flight"]) == (0.0, 0), figures
    behind = latest_end(up) - committed(up)
    assert 0 < figures["lag"] <= behind, (figures["lag"], behind)  # the shop goes on producing
    shot = ARTIFACTS / "6b-stopped-workload-page.png"
    show(page, f"{url}/assets/workloads/clickstream", "stopped by a person", shot, log=up.log)
    expect(page.get_by_text("lag_from").first).to_be_visible(timeout=30_000)


def latest_end(up: Up) -> int:
    bootstrap = f"127.0.0.1:{up.ports[1]}"
    return sum(log_end_offsets(bootstrap, TOPIC, 4).values())


#: A workload added while the platform runs: it lands the shop's clicks again into a dataset of
#: its own, from the earliest record, and its lag target is low enough for a burst to break.
ADDED = """name: added
source:
  cluster: kafka
  topics: [clickstream.events]
  config: {session.timeout.ms: 6000, heartbeat.interval.ms: 1500}
landing: {dataset: added, flush_interval: 2s}
owners: [team:shop]
tags: {domain: shop}
checks: {lag: 2000}
"""


def workloads_in_the_ui(page: object, up: Up, url: str, workloads: Path) -> None:
    """Each workload's page with its rate, lag per partition and checks; a workload added at
    runtime is defined at once, its landed asset too (the sensor reloads the code location),
    its lag check red while its backlog is high and green once drained; removed, its page leaves
    the catalog and its landed dataset stays, retired."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    shot = ARTIFACTS / "9-workload-page.png"
    show(page, f"{url}/assets/workloads/clickstream", "partition_lag", shot, log=up.log)
    expect(page.get_by_text("throughput_per_s").first).to_be_visible(timeout=30_000)
    park(page)

    # A backlog the new workload meets at once: 40,000 clicks more than the shop's.
    produce_sample(f"127.0.0.1:{up.ports[1]}", TOPIC, 40_000, 200, key_prefix="burst")
    (workloads / "added.yaml").write_text(ADDED)
    wait_until(
        lambda: defined(up, ["landed_added"]) and defined(up, ["workloads", "added"]),
        timeout=120,
        interval=1,
        message="the added workload's assets are defined",
    )
    wait_until(
        lambda: lag_check(up, "added") == "FAILED",
        timeout=120,
        interval=0.5,
        message="the added workload's lag check is red while its backlog is high",
    )
    checks = f"{url}/assets/workloads/added?view=checks"
    page.goto(checks)
    page.get_by_text(LAG_CHECK).first.click()
    expect(page.get_by_text("Failed").first).to_be_visible(timeout=30_000)
    page.screenshot(path=ARTIFACTS / "10-lag-check-red.png")
    park(page)
    wait_until(
        lambda: lag_check(up, "added") == "SUCCEEDED",
        timeout=180,
        interval=1,
        message="the lag check is green once the backlog drained",
    )
    page.goto(checks)
    page.get_by_text(LAG_CHECK).first.click()
    expect(page.get_by_text("Passed").first).to_be_visible(timeout=30_000)
    page.screenshot(path=ARTIFACTS / "11-lag-check-green.png")
    page.goto(f"{url}/assets/landed_added")
    expect(page.get_by_text("landed_added").first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("software definition")).to_have_count(0)
    page.screenshot(path=ARTIFACTS / "12-added-landed-asset.png")
    park(page)

    assert known(up, ["workloads", "added"])
    (workloads / "added.yaml").unlink()
    wait_until(
        lambda: not known(up, ["workloads", "added"]) and "added" not in up.started(),
        timeout=120,
        interval=1,
        message="the removed workload's run stopped and its page left the catalog",
    )
    # Its landed dataset stays while the lake holds its files: defined, and said to be retired.
    assert defined(up, ["landed_added"]) and retired(up, "landed_added")


def defined(up: Up, path: list[str]) -> bool:
    key = json.dumps(path)
    data = up.graphql(f"{{ assetNodes(assetKeys: [{{path: {key}}}]) {{ id }} }}")
    return bool(data["assetNodes"])


def known(up: Up, path: list[str]) -> bool:
    """Whether the catalog lists the asset at all: defined, or with events of its own."""
    data = up.graphql(
        f"{{ assetsOrError(prefix: {json.dumps(path[:-1])}) {{ ... on AssetConnection "
        "{ nodes { key { path } } } } }"
    )
    return path in [node["key"]["path"] for node in data["assetsOrError"]["nodes"]]


def retired(up: Up, key: str) -> bool:
    data = up.graphql(
        f'{{ assetNodes(assetKeys: [{{path: ["{key}"]}}]) {{ metadataEntries {{ label '
        "... on BoolMetadataEntry { boolValue } } } }"
    )
    entries = [e for node in data["assetNodes"] for e in node["metadataEntries"]]
    return any(e["label"] == "retired" and e.get("boolValue") for e in entries)


def lag_check(up: Up, workload: str) -> str | None:
    """The status of the workload's lag check's latest evaluation (SUCCEEDED, FAILED), if any."""
    data = up.graphql(
        f'{{ assetNodes(assetKeys: [{{path: ["workloads", "{workload}"]}}]) {{ '
        "assetChecksOrError { ... on AssetChecks { checks { name "
        "executionForLatestMaterialization { status } } } } } }"
    )
    for node in data["assetNodes"]:
        for check in node["assetChecksOrError"].get("checks", []):
            execution = check["executionForLatestMaterialization"]
            if check["name"] == LAG_CHECK and execution is not None:
                return str(execution["status"])
    return None


def replicas_in_the_ui(page: object, up: Up, url: str, spec: Path, running: str) -> None:
    """clickstream autoscaled between 2 and 3 replicas: a second run joins (the first keeps
    running), the Runs page lists both, each run shows its replica and the partitions it holds,
    and the workload's asset gets the sensor's scaling figures."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    spec.write_text(spec.read_text() + "replicas: {min: 2, max: 3, target_lag: 1h}\n")

    def replicas() -> dict[str, dict[str, Any]]:
        return {
            run["tags"].get("lanehouse/replica", "0"): run
            for run in up.runs()
            if run["status"] == "STARTED" and run["tags"].get("dagster/partition") == "clickstream"
        }

    wait_until(
        lambda: (
            set(replicas()) == {"0", "1"}
            and all(
                r["tags"].get("lanehouse/assigned", "none") != "none" for r in replicas().values()
            )
        ),
        timeout=120,
        interval=1,
        message=f"two clickstream replicas, each holding partitions\n{up.log()}",
    )
    assert replicas()["0"]["runId"] == running
    page.goto(f"{url}/runs")
    expect(page.get_by_text("partition: clickstream").nth(1)).to_be_visible(timeout=30_000)
    expect(page.get_by_text("lanehouse/replica: 1").first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("lanehouse/assigned: clickstream.events[").first).to_be_visible()
    page.screenshot(path=ARTIFACTS / "13-replica-runs.png")
    page.goto(f"{url}/runs/{replicas()['1']['runId']}")
    expect(page.get_by_text("Started").first).to_be_visible(timeout=30_000)
    page.screenshot(path=ARTIFACTS / "14-replica-run.png")
    observed = up.graphql(
        '{ assetNodes(assetKeys: [{path: ["workloads", "clickstream"]}]) '
        "{ assetObservations(limit: 100) { metadataEntries { label } } } }"
    )["assetNodes"][0]["assetObservations"]
    labels = {e["label"] for o in observed for e in o["metadataEntries"]}
    assert {"replicas_wanted", "broker_lag_records", "scaling"} <= labels, labels
    page.goto(f"{url}/assets/workloads/clickstream?view=events")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=ARTIFACTS / "15-workload-scaling-figures.png")


LINEAGE = (
    ("clickstream_events", "landed_clickstream", "clean_clicks", "sessions"),
    ("orders", "landed_orders", "clean_orders", "daily_revenue"),
)


def lake_in_the_ui(page: object, up: Up, url: str) -> None:
    """Lineage, a landed partition, and a two-day backfill of the clickstream's cleaning."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    page.goto(f"{url}/assets/daily_revenue?view=lineage&lineageScope=upstream&lineageDepth=5")
    for node in (n for chain in LINEAGE for n in chain):
        expect(page.get_by_text(node, exact=True).first).to_be_visible(timeout=30_000)
    assert upstream(up, "daily_revenue") == {"clean_orders", "sessions"}
    assert upstream(up, "clean_clicks") == {"landed_clickstream"}
    assert upstream(up, "landed_clickstream") == {"topics/clickstream_events"}
    page.screenshot(path=ARTIFACTS / "3-asset-lineage.png")
    park(page)

    # The consumer run reports the clicks it lands (the live shop's) as today's partition.
    wait_until(
        lambda: materialized(up, "landed_clickstream"),
        timeout=120,
        interval=2,
        message="the clickstream run reported a landed partition",
    )
    landed = materialized(up, "landed_clickstream")  # two days if run across midnight
    day = landed[-1]
    page.goto(f"{url}/assets/landed_clickstream?view=partitions")
    expect(page.get_by_text(f"Materialized ({len(landed)})")).to_be_visible(timeout=30_000)
    page.screenshot(path=ARTIFACTS / "4-landed-partition.png")

    # A backfill of that day and the one before (nothing landed: an empty day) from the UI.
    before = str(date.fromisoformat(day) - timedelta(days=1))
    days = f"[{before}...{day}]"
    page.goto(f"{url}/assets/clean_clicks")
    page.get_by_role("button", name="Materialize…").first.click()
    page.get_by_role("button", name="Confirm").click()  # with its quarantine and duplicates
    page.get_by_placeholder("No matching partitions").fill(days)
    # The keyboard, not the locator: once the range matches partitions, the input's placeholder
    # (what the locator finds it by) may change before Enter is pressed; the focus stays.
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Launch backfill").click()
    wait_until(lambda: backfill(up) is not None, timeout=30, message="the backfill was created")
    park(page)
    # Two Spark runs: on a 2-core machine shared with two other whole-platform tests, the first
    # run's step began 111 s after its run and was still in Spark at 300 s (CI, 2026-11-27).
    wait_until(
        lambda: (backfill(up) or {}).get("status") not in ("REQUESTED", "CANCELING", "FAILING"),
        timeout=480,
        interval=2,
        message="the UI backfill finished",
    )
    done = backfill(up)
    assert done is not None and done["status"] == "COMPLETED_SUCCESS", done
    assert sorted(done["partitionNames"]) == [before, day]
    page.goto(f"{url}/assets/clean_clicks?view=partitions")
    expect(page.get_by_text("Materialized (2)")).to_be_visible(timeout=30_000)
    page.screenshot(path=ARTIFACTS / "5-backfilled.png")
    node = up.graphql(
        '{ assetNodes(assetKeys: [{path: ["clean_clicks"]}]) { assetMaterializations(limit: 1) '
        "{ metadataEntries { label ... on JsonMetadataEntry { jsonString } } } "
        "assetChecksOrError { ... on AssetChecks { checks { name "
        "executionForLatestMaterialization { status } } } } } }"
    )["assetNodes"][0]
    [rows] = [
        json.loads(e["jsonString"])
        for e in node["assetMaterializations"][0]["metadataEntries"]
        if e["label"] == "rows_per_day"
    ]
    assert rows[day] > 0, rows
    [check] = node["assetChecksOrError"]["checks"]
    assert (check["name"], check["executionForLatestMaterialization"]["status"]) == (
        "reconciles",
        "SUCCEEDED",
    )


def upstream(up: Up, asset: str) -> set[str]:
    data = up.graphql(
        f'{{ assetNodes(assetKeys: [{{path: ["{asset}"]}}]) {{ dependencyKeys {{ path }} }} }}'
    )
    return {"/".join(k["path"]) for k in data["assetNodes"][0]["dependencyKeys"]}


def materialized(up: Up, asset: str) -> list[str]:
    data = up.graphql(
        f'{{ assetNodes(assetKeys: [{{path: ["{asset}"]}}]) '
        "{ assetMaterializations(limit: 100) { partition } } }"
    )
    return sorted({m["partition"] for m in data["assetNodes"][0]["assetMaterializations"]})


def backfill(up: Up) -> dict[str, Any] | None:
    data = up.graphql(
        "{ partitionBackfillsOrError { ... on PartitionBackfills "
        "{ results { id status partitionNames } } } }"
    )
    results = data["partitionBackfillsOrError"]["results"]
    assert len(results) <= 1, results
    return results[0] if results else None


def run_status(up: Up, run_id: str) -> str:
    data = up.graphql(f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status }} }} }}')
    return str(data["runOrError"].get("status"))


def run_messages(up: Up, run_id: str) -> list[str]:
    query = (
        f'{{ logsForRun(runId: "{run_id}", limit: 1000) {{ ... on EventConnection '
        "{ events { ... on MessageEvent { message } } } } }"
    )
    return [e.get("message", "") for e in up.graphql(query)["logsForRun"]["events"]]


def step_statuses(up: Up, run_id: str) -> dict[str, str]:
    query = (
        f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ stepStats {{ stepKey status }} }} }} }}'
    )
    steps = up.graphql(query)["runOrError"]["stepStats"]
    return {step["stepKey"]: step["status"] for step in steps}
