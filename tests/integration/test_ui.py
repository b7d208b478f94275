"""The Dagster UI against ``lanehouse up`` from a clean state, in a real browser (Debian chromium
driven by playwright): the workloads' runs and the running sensor show; terminating the
clickstream run from the UI leaves a CANCELED run with its offsets committed, which the sensor
does not restart; launching the workload again from the launchpad resumes from those offsets.

Screenshots of the key pages go to ``$LANEHOUSE_ARTIFACTS`` (default ``test-artifacts/ui``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumers.backends.kafka import committed_offsets
from tests.helpers import wait_until
from tests.integration.platform_up import WORKLOADS, Up

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("LANEHOUSE_ARTIFACTS", "test-artifacts")) / "ui"
GROUP, TOPIC = "lanehouse.clickstream", "clickstream.events"


@pytest.fixture
def page() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs it (Debian package chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            # A fresh profile gets a "Join the Dagster community" dialog, whenever it likes.
            skip = page.get_by_role("button", name="Skip")
            page.add_locator_handler(skip, lambda: skip.click())
            yield page
        finally:
            browser.close()


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


def test_terminate_from_the_ui_then_relaunch_resumes(tmp_path: Path, page: object) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    up = Up(tmp_path / "state")
    url = f"http://127.0.0.1:{up.ui_port}"
    with up.running() as proc:
        up.wait_all_running()
        wait_until(lambda: committed(up) > 0, timeout=60, message="clickstream committed")

        page.goto(f"{url}/runs")
        for workload in WORKLOADS:
            expect(page.get_by_text(f"partition: {workload}")).to_be_visible(timeout=30_000)
        page.screenshot(path=ARTIFACTS / "1-runs-in-progress.png")

        page.goto(f"{url}/locations/lanehouse/sensors/workload_discovery")
        expect(page.get_by_text("workload_discovery").first).to_be_visible(timeout=30_000)
        assert (
            up.graphql(
                '{ sensorOrError(sensorSelector: {repositoryLocationName: "lanehouse", '
                'repositoryName: "__repository__", sensorName: "workload_discovery"}) '
                "{ ... on Sensor { sensorState { status } } } }"
            )["sensorOrError"]["sensorState"]["status"]
            == "RUNNING"
        )
        page.screenshot(path=ARTIFACTS / "2-sensor.png")

        run_id = up.started()["clickstream"]
        page.goto(f"{url}/runs/{run_id}")
        page.get_by_role("button", name="Terminate").first.click()
        page.get_by_role("button", name="Terminate 1 run").click()
        canceled_at = time.time()
        wait_until(
            lambda: _status(up, run_id) == "CANCELED",
            timeout=90,
            interval=0.5,
            message="the terminated run drained and ended CANCELED",
        )
        expect(page.get_by_text("Canceled").first).to_be_visible(timeout=30_000)
        page.screenshot(path=ARTIFACTS / "3-run-canceled.png")
        at_cancel = committed(up)
        assert at_cancel > 0

        # A person stopped it: sensor ticks after the cancel must not start it again.
        wait_until(lambda: last_tick(up) > canceled_at + 1, timeout=60, interval=1)
        assert "clickstream" not in up.started(), "the sensor restarted a run a person stopped"

        page.goto(f"{url}/locations/lanehouse/jobs/consume_workload/playground")
        partition = page.get_by_placeholder("Partition")
        partition.fill("clickstream")
        page.get_by_role("menuitem", name="clickstream").first.click()
        page.screenshot(path=ARTIFACTS / "4-launchpad.png")
        page.get_by_role("button", name="Launch Run").click()
        wait_until(
            lambda: "clickstream" in up.started(),
            timeout=60,
            interval=0.5,
            message="the run launched from the launchpad started",
        )
        relaunched = up.started()["clickstream"]
        assert relaunched != run_id

        # It resumes from the committed offsets. Its first progress report says how many records
        # it has handled; resumed, the group's position reaches at_cancel + that within a commit
        # or two. Started over from offset 0, the position would need at_cancel more records
        # (minutes of producing) to get there.
        def first_report() -> int | None:
            workload = up.workloads()["clickstream"]
            if workload["run"]["run_id"] != relaunched or not workload["progress"]:
                return None
            return int(sum(p["records_completed"] for p in workload["progress"]))

        wait_until(lambda: first_report() is not None, timeout=90, interval=2)
        handled = first_report() or 0
        assert handled > 0
        wait_until(
            lambda: committed(up) >= at_cancel + handled,
            timeout=20,
            interval=0.5,
            message=f"position {at_cancel} + {handled} handled by the relaunched run",
        )
        page.goto(f"{url}/runs/{relaunched}")
        expect(page.get_by_text("Started").first).to_be_visible(timeout=30_000)
        page.screenshot(path=ARTIFACTS / "5-relaunched.png")
        up.stop(proc)


def _status(up: Up, run_id: str) -> str:
    data = up.graphql(f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status }} }} }}')
    return str(data["runOrError"].get("status"))
