"""``lanehouse up`` for real, one platform from a clean state dir through three tests, in
order (a platform takes 22 s to start alone, ~40 s in the suite, so the tests share one):

1. Brokers, producers and ``dagster dev`` come up; the discovery sensor starts clickstream's run
   of its own (``run: own``) and a host run for orders (the default); ``lanehouse workloads``
   shows their progress and heartbeats; both lease from the one shared permit pool; each run
   serves ``/metrics``, found by Prometheus through file_sd targets (a host's labelled ``host``);
   nothing listens beyond loopback; a rewind drains the run, rewinds the group and the sensor
   starts it again; a ``kill -9`` of a run is followed by its replacement.
2. The Dagster UI in a real browser (Debian chromium driven by playwright): the workloads' runs
   and the running sensor show; the asset graph reads topics → landed → Spark assets, today's
   landed partition shows materialized, and an asset backfill launched from the materialize
   dialog finishes with clean rows and a passing reconciliation check; terminating the
   clickstream run from the UI ends it SUCCESS with no failed step, its offsets committed and
   "stopped by a person" in its log, the sensor does not restart it and its page shows its phase
   and the broker's lag, not its last rate; one click on "Re-execute all" resumes it from those
   offsets; a workload's page shows its rate and lag per partition; a workload added at runtime
   has its assets defined at once, its lag check red while its backlog is high and green once
   drained, and once removed its page leaves the catalog while its landed dataset stays, marked
   retired; autoscaling bounds (2 to 3 replicas) add a second clickstream run beside it, each run
   showing its replica and partitions. Screenshots: ``$LANEHOUSE_ARTIFACTS`` (default
   ``test-artifacts/ui``).
3. A terminal's Ctrl-C (SIGINT to the whole process group) takes everything down, consumer runs
   first (SUCCESS after their drain and a final commit that succeeded, the brokers still up,
   tagged as stopped by the platform); a second ``up`` on the same state dir starts them again.
   After a power loss (everything killed with SIGKILL) the runs left STARTED are declared dead by
   their silent heartbeats and their workloads start again.

Each test also passes alone (``-k``): the platform starts for the first one that asks.
(``test_replica_runs.py`` takes the sensor and run workers through a kill and a scale-down.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestration.workloads.discovery_model import RestartPolicy
from tests.helpers import wait_until
from tests.support.browser import chromium_page, nux_seen, park
from tests.support.platform_up import REPO, WORKLOADS, Up, listeners
from tests.support.ui_steps import (
    ARTIFACTS,
    committed,
    lake_in_the_ui,
    last_tick,
    replicas_in_the_ui,
    run_messages,
    run_status,
    step_statuses,
    still_figures_in_the_ui,
    workloads_in_the_ui,
)

# Whole-platform runs share the 2 cores with the other workers (make test): each of these
# tests takes minutes then, past the default 300 s timeout, which is for a hang, not a slow
# machine (the browser test alone took 3 min 20 s on a quiet 2-core machine).
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]


HEARTBEAT_TIMEOUT = 20
#: The restart policy's first backoff, and the sensor's interval under ``Up``.
BACKOFF = RestartPolicy().base_backoff
SENSOR_SECONDS = 3


@dataclass(frozen=True)
class Platform:
    up: Up
    proc: subprocess.Popen[bytes]
    #: A copy of the repository's ``workloads/``: the browser test scales and adds workloads.
    workloads: Path


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """``lanehouse up`` from a clean state, every workload running; stopped (if a test has not
    stopped it) by pulling the plug."""
    base = tmp_path_factory.mktemp("up")
    workloads = base / "workloads"
    shutil.copytree(REPO / "workloads", workloads)
    up = Up(base / "state", env={"LANEHOUSE_WORKLOADS": str(workloads)})
    nux_seen(up.state / "dagster")
    with up.running() as proc:
        up.wait_all_running()
        yield Platform(up, proc, workloads)


@pytest.fixture
def page() -> Iterator[object]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        yield page


def rewind_clickstream(up: Up, running: str) -> str:
    """``lanehouse workloads rewind`` under Dagster: the consumer run drains and ends SUCCESS
    with the reason, the rewind is a run of its own, the sensor starts a new consumer run.
    Returns the new run's id."""
    _, kafka, pulsar = up.ports
    command = [sys.executable, "-m", "orchestration.cli", "workloads", "rewind", "clickstream"]
    command += ["--to", "earliest", "--state-dir", str(up.state)]
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka}",
        "PULSAR_URL": f"pulsar://127.0.0.1:{pulsar}",
    }
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rewound kafka group lanehouse.clickstream to earliest" in done.stdout, done.stdout
    runs = {run["runId"]: run for run in up.runs()}
    assert runs[running]["status"] == "SUCCESS", runs[running]
    assert runs[running]["tags"]["lanehouse/stop_reason"] == "rewind"
    [rewind] = [
        r for r in runs.values() if r["tags"].get("lanehouse/rewind") and r["runId"] != running
    ]
    assert (rewind["status"], rewind["tags"]["dagster/partition"]) == ("SUCCESS", "clickstream")
    wait_until(
        lambda: up.started().get("clickstream") not in (None, running),
        timeout=120,
        interval=1,
        message=f"the sensor starts clickstream again after the rewind\n{up.log()}",
    )
    return up.started()["clickstream"]


def test_up_runs_every_workload_on_loopback_through_a_rewind_and_a_kill(
    platform: Platform,
) -> None:
    up = platform.up
    first = up.started()
    # `lanehouse workloads` reads the instance: each workload's run, then the engine's
    # first progress report with records done (every 5 s here) and a fresh heartbeat.
    # Polled in this process, then the command's own answer checked.
    wait_until(
        lambda: all(
            sum(p["records_completed"] for p in w["progress"]) > 0 for w in up.statuses().values()
        ),
        timeout=90,
        interval=2,
        message="every workload reports progress",
    )
    listed = up.workloads()
    assert {name: (w["phase"], w["run"]["run_id"]) for name, w in listed.items()} == {
        name: ("running", run_id) for name, run_id in first.items()
    }
    # clickstream's run and orders' host run are two processes; both lease from the one pool.
    leases = up.permit_leases()
    assert sorted(lease["workload"] for lease in leases) == sorted(WORKLOADS), leases
    assert len({lease["holder"] for lease in leases}) == len(WORKLOADS), leases
    for workload in listed.values():
        assert 0 <= workload["heartbeat_age"] < 60, workload
        assert [p["topic"] for p in workload["progress"]] == workload["topics"]
        assert sum(p["records_completed"] for p in workload["progress"]) > 0, workload
    # Every run serves its metrics; Prometheus finds them through file_sd targets. A host's
    # target is labelled with the host, so its series keep their own workload label.
    assert "file_sd_configs" in up.log()
    targets = [json.loads(p.read_text()) for p in (up.state / "prometheus").glob("*.json")]
    served: dict[str, dict[str, str]] = {}
    for [target] in targets:
        with urllib.request.urlopen(f"http://{target['targets'][0]}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        for name in WORKLOADS:
            if f'lanehouse_records_completed_total{{workload="{name}"}}' in text:
                served[name] = {k: v for k, v in target["labels"].items() if k != "dagster_run_id"}
    assert served == {
        "clickstream": {"workload": "clickstream", "replica": "0"},
        "orders": {"host": "host.0"},
    }, targets
    # Nothing `up` started listens beyond loopback: brokers, UI, runs' endpoints.
    found = listeners(platform.proc.pid)
    assert [str(listener) for listener in found if not listener.loopback] == [], found
    assert set(up.ports) <= {listener.port for listener in found}, found
    assert (up.state / "pulsar" / "db.rocksdb").is_dir()  # the state dir is relative
    first["clickstream"] = rewind_clickstream(up, first["clickstream"])
    # A crash: the code server marks the run FAILURE at once, and the sensor launches its
    # replacement at its first tick at least the backoff after the failure. (The Kafka
    # workload: pulsar-lite never again delivers to a subscription whose consumer was
    # killed with messages unacknowledged, until the broker restarts; two clean-clone runs
    # failed so on orders. Production Pulsar drops the consumer with its connection.)
    restart = up.kill_run(platform.proc, first["clickstream"])
    print(f"\nkill -9: {restart}")
    assert restart.failed < 5, restart
    assert restart.launched < BACKOFF + 2 * SENSOR_SECONDS + 10, restart
    assert restart.consuming < 120, restart


def test_the_ui_shows_the_platform_and_a_terminated_run_resumes_in_one_click(
    platform: Platform, page: object
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    up, workloads = platform.up, platform.workloads
    url = f"http://127.0.0.1:{up.ui_port}"
    wait_until(lambda: committed(up) > 0, timeout=60, message="clickstream committed")

    page.goto(f"{url}/runs")
    for partition in ("clickstream", "host.0"):  # orders runs in the host run
        expect(page.get_by_text(f"partition: {partition}").first).to_be_visible(timeout=30_000)
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

    lake_in_the_ui(page, up, url)

    run_id = up.started()["clickstream"]
    page.goto(f"{url}/runs/{run_id}")
    page.get_by_role("button", name="Terminate").first.click()
    page.get_by_role("button", name="Terminate 1 run").click()
    canceled_at = time.time()
    wait_until(
        lambda: run_status(up, run_id) == "SUCCESS",
        timeout=90,
        interval=0.5,
        message="the terminated run drained and ended SUCCESS",
    )
    # A stop that looks like a stop: no failed step, no error.
    assert step_statuses(up, run_id) == {"consume": "SUCCESS"}
    assert any("stopped by a person" in m for m in run_messages(up, run_id))
    expect(page.get_by_text("Success").first).to_be_visible(timeout=30_000)
    page.screenshot(path=ARTIFACTS / "6-run-stopped.png")
    park(page)
    at_cancel = committed(up)
    assert at_cancel > 0

    # A person stopped it: sensor ticks after the stop must not start it again.
    wait_until(lambda: last_tick(up) > canceled_at + 1, timeout=60, interval=1)
    assert "clickstream" not in up.started(), "the sensor restarted a run a person stopped"
    still_figures_in_the_ui(page, up, url)
    page.goto(f"{url}/runs/{run_id}")

    # Resume in one click on the stopped run's page; the sensor adopts the re-execution.
    page.get_by_role("button", name="Re-execute all (*)").click()
    wait_until(
        lambda: "clickstream" in up.started(),
        timeout=60,
        interval=0.5,
        message="the re-executed run started",
    )
    page.screenshot(path=ARTIFACTS / "7-re-executed.png")
    park(page)
    relaunched = up.started()["clickstream"]
    assert relaunched != run_id

    # It resumes from the committed offsets. Its first progress report says how many records
    # it has handled; resumed, the group's position reaches at_cancel + that within a commit
    # or two. Started over from offset 0, the position would need at_cancel more records
    # (minutes of producing) to get there.
    def first_report() -> int | None:
        workload = up.statuses()["clickstream"]
        if workload["run"]["run_id"] != relaunched or not workload["progress"]:
            return None
        return int(sum(p["records_completed"] for p in workload["progress"]))

    wait_until(lambda: (first_report() or 0) > 0, timeout=90, interval=2)
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
    page.screenshot(path=ARTIFACTS / "8-relaunched.png")

    workloads_in_the_ui(page, up, url, workloads)
    replicas_in_the_ui(page, up, url, workloads / "clickstream.yaml", relaunched)


def test_ctrl_c_stops_runs_first_and_the_next_up_starts_them_again_even_after_a_power_loss(
    platform: Platform,
) -> None:
    up = platform.up
    up.wait_settled()  # the browser test's scaling may still be stopping or starting runs
    first = up.started()  # by workload (a replica's run stands for its workload)
    stopped = up.stop(platform.proc)  # a terminal's Ctrl-C: SIGINT to the whole process group
    print(f"\nCtrl-C: {stopped}")
    # The brokers outlived the runs, so every run drained, made its final commit and says so.
    assert stopped.brokers_up_then, stopped
    assert set(stopped.runs.values()) == {"SUCCESS"}, stopped
    assert set(first.values()) <= set(stopped.runs), (first, stopped)
    commits: Counter[str] = Counter()
    for run_id in stopped.runs:  # the host run also says so of the workload the UI test removed
        for name, (made, failed) in up.final_commits(run_id).items():
            assert failed == 0, (run_id, name, made, failed)
            commits[name] += made
    assert set(WORKLOADS) <= set(commits) and min(commits.values()) > 0, commits
    log = up.log()
    terminating = f"terminating {len(stopped.runs)} consumer run(s)"
    assert log.index(terminating) < log.index("dagster dev stopped")
    assert "could not stop the discovery sensor" not in log
    # With everything down the command still answers, from storage alone.
    for workload in up.workloads().values():
        phase = (workload["phase"], workload["run"]["status"])
        assert phase == ("stopped", "SUCCESS"), (workload["name"], workload["note"], workload)

    # The next `up`: the workloads as the repository has them (the browser test scaled
    # clickstream), and heartbeats that say a run is lost after 20 s.
    shutil.copy(REPO / "workloads" / "clickstream.yaml", platform.workloads / "clickstream.yaml")
    up.env["LANEHOUSE_HEARTBEAT_TIMEOUT"] = str(HEARTBEAT_TIMEOUT)
    with up.running() as proc:  # the same state: the runs stopped by the platform come back
        up.wait_all_running()
        runs = {run["runId"]: run for run in up.runs()}
        for run_id in stopped.runs:
            assert runs[run_id]["status"] == "SUCCESS", runs[run_id]
            assert runs[run_id]["tags"]["lanehouse/stop_reason"] == "platform"
        for name, run_id in first.items():
            assert up.started()[name] != run_id
        # A power loss: nothing drains, the runs stay STARTED in run storage, and no process is
        # left that Dagster could ask about them. Their heartbeats tell the sensor they are gone.
        lost = up.started()
        up.pull_the_plug(proc)
    with up.running() as proc:
        wait_until(
            lambda: (
                set(up.started()) == set(WORKLOADS)
                and not set(up.started().values()) & set(lost.values())
            ),
            timeout=HEARTBEAT_TIMEOUT + 180,
            interval=1,
            message=f"new runs for the runs lost in the power loss\n{up.log()}",
        )
        runs = {run["runId"]: run for run in up.runs()}
        for run_id in lost.values():
            assert runs[run_id]["status"] == "FAILURE", runs[run_id]
        up.stop(proc, signal.SIGTERM)  # `kill`, also from a non-interactive shell
