"""One workload of a host run stopped and started again from the Dagster UI, in a real browser,
under ``dagster dev`` (daemon, code server, webserver) with ``LANEHOUSE_HOST_WORKLOADS=2``.

Two workloads share one host run. Launching ``stop_workload`` for one of them from the
Launchpad drains it inside the host: its neighbour goes on consuming in the same run, started
once; the stopped one's page says "stopped by a person" and its records wait. Launching
``start_workload`` for it starts it again in the same host run, and it reads what waited.
Screenshots go to ``$LANEHOUSE_ARTIFACTS`` (default ``test-artifacts/ui-hosts``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DagsterRun, RunsFilter

from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from orchestration.local.instance import prepare_dagster_home
from orchestration.workloads.assets import workload_key
from orchestration.workloads.host_store import MemberStatus, read_statuses
from orchestration.workloads.names import HOST_JOB_NAME, START_JOB_NAME, STOP_JOB_NAME
from tests.conftest import TopicFactory
from tests.helpers import free_port, wait_until
from tests.support.browser import chromium_page, nux_seen, park, show
from tests.support.platform_up import REPO
from tests.support.processes import stop_group

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(600)]

ARTIFACTS = Path(os.environ.get("LANEHOUSE_ARTIFACTS", "test-artifacts")) / "ui-hosts"
PARTITIONS = 2
SPEC = """name: {name}
source:
  kind: kafka
  bootstrap_servers: "{bootstrap}"
  topics: [{topic}]
  group: hosts.{name}
  config: {{session.timeout.ms: 6000, heartbeat.interval.ms: 1500}}
handler: consumers.dev.examples:enrich
commit_interval: 500ms
"""


@pytest.fixture
def page() -> Iterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        yield page


class Platform:
    """``dagster dev`` on a fresh instance, two workloads in one host run."""

    def __init__(self, root: Path, bootstrap: str, topics: dict[str, str]) -> None:
        self.home = prepare_dagster_home(root)
        self.bootstrap, self.topics = bootstrap, topics
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        specs = root / "workloads"
        specs.mkdir()
        for name, topic in topics.items():
            text = SPEC.format(name=name, bootstrap=bootstrap, topic=topic)
            (specs / f"{name}.yaml").write_text(text)
        self.env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "LANEHOUSE_WORKLOADS": str(specs),
            "LANEHOUSE_LAKE": str(root / "lake"),
            "LANEHOUSE_HOST_WORKLOADS": "2",
            "LANEHOUSE_SENSOR_SECONDS": "2",
            "LANEHOUSE_DAGSTER_URL": self.url,
        }
        self.log = root / "dagster.log"

    def log_tail(self) -> str:
        """The last lines ``dagster dev`` (webserver, daemon, runs) wrote."""
        return self.log.read_text(errors="replace")[-4000:]

    def committed(self, name: str) -> int:
        offsets = committed_offsets(self.bootstrap, f"hosts.{name}", self.topics[name], PARTITIONS)
        return sum(max(o, 0) for o in offsets.values())

    def produce(self, name: str, count: int) -> None:
        produce_sample(self.bootstrap, self.topics[name], count, keys=20, seed=None)

    def statuses(self) -> dict[str, MemberStatus]:
        with DagsterInstance.from_config(str(self.home)) as instance:
            return read_statuses(instance, self.topics)

    def runs(self, job: str) -> list[DagsterRun]:
        with DagsterInstance.from_config(str(self.home)) as instance:
            return list(instance.get_runs(RunsFilter(job_name=job)))

    def newest_status(self, name: str) -> object:
        """The ``status`` of the newest observation of the workload's asset."""
        with DagsterInstance.from_config(str(self.home)) as instance:
            records = instance.fetch_observations(workload_key(name), limit=1).records
        observation = records[0].asset_observation if records else None
        return observation.metadata["status"].value if observation is not None else None

    def messages(self, run_id: str) -> list[str]:
        with DagsterInstance.from_config(str(self.home)) as instance:
            return [entry.user_message for entry in instance.all_logs(run_id)]

    def launch(self, page: Any, job: str, workload: str, shot: str) -> str:
        """Jobs → ``job`` → Launchpad → the workload's partition → Launch; the run's status once
        it ended."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        from playwright.sync_api import expect

        before = {run.run_id for run in self.runs(job)}
        page.goto(f"{self.url}/locations/lanehouse/jobs/{job}/playground")
        partition = page.get_by_placeholder("Partition")
        choice = page.get_by_role("menuitem", name=workload, exact=True)
        # The suggestions come from the job's partitions, loaded after the page, and filter on
        # typing: text typed before they came left the menu empty for good (2 clean-clone runs
        # waited 60 s for it). So type again until the workload's suggestion shows, then click.
        for attempt in range(8):
            partition.click()
            partition.fill("")
            partition.press_sequentially(workload)
            try:
                choice.wait_for(timeout=10_000)
                break
            except PlaywrightTimeout:
                page.screenshot(path=ARTIFACTS / f"{Path(shot).stem}-no-suggestion-{attempt}.png")
        choice.click(timeout=10_000)
        expect(partition).to_have_value(workload, timeout=30_000)
        launch = page.get_by_role("button", name="Launch Run")
        expect(launch).to_be_enabled(timeout=30_000)
        page.screenshot(path=ARTIFACTS / shot)
        launch.click()

        def new() -> list[DagsterRun]:
            return [run for run in self.runs(job) if run.run_id not in before]

        wait_until(
            lambda: any(run.is_finished for run in new()),
            timeout=120,
            interval=0.5,
            message=f"{job} for {workload} ran",
        )
        park(page)  # the new run's page, with its live logs, is not looked at
        [run] = new()
        assert run.tags["dagster/partition"] == workload
        return run.status.value


@pytest.fixture
def platform(tmp_path: Path, kafka_broker: TansuBroker, topic_factory: TopicFactory) -> Platform:
    topics = {name: topic_factory(partitions=PARTITIONS) for name in ("alpha", "beta")}
    return Platform(tmp_path, kafka_broker.bootstrap, topics)


def test_stop_and_start_one_workload_of_a_host_from_the_ui(platform: Platform, page: Any) -> None:
    from playwright.sync_api import expect

    nux_seen(platform.home)
    for name in platform.topics:
        platform.produce(name, 100)
    command = [sys.executable, "-m", "dagster", "dev", "-w", str(REPO / "workspace.yaml")]
    dev = subprocess.Popen(
        [*command, "-h", "127.0.0.1", "-p", str(platform.port)],
        cwd=REPO,
        env=platform.env,
        stdout=platform.log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: all(platform.committed(name) == 100 for name in platform.topics),
            timeout=240,
            interval=1,
            message="both workloads consumed their first records",
        )
        [host] = platform.runs(HOST_JOB_NAME)
        assert host.tags["dagster/partition"] == "host.0" and host.status.value == "STARTED"
        assert not platform.runs("consume_workload"), "hosted workloads have no runs of their own"
        beta = platform.statuses()["beta"]
        assert (beta.state, beta.run_id) == ("running", host.run_id)

        assert platform.launch(page, STOP_JOB_NAME, "alpha", "1-stop-launchpad.png") == "SUCCESS"
        wait_until(
            lambda: platform.statuses()["alpha"].state == "stopped",
            timeout=60,
            interval=0.5,
            message="the host drained alpha",
        )
        # Alpha's records wait; beta, in the same run, goes on with what comes.
        platform.produce("alpha", 50)
        platform.produce("beta", 50)
        wait_until(lambda: platform.committed("beta") == 150, timeout=60, interval=0.5)
        assert platform.committed("alpha") == 100
        # The host's last report of alpha says "stopping"; once the host dropped it, the
        # sensor's look at a still workload (its lag, from the broker) says why it stands.
        wait_until(
            lambda: platform.newest_status("alpha") == "stopped by a person",
            timeout=120,
            interval=1,
            message="alpha's page says it was stopped by a person",
        )
        alpha = f"{platform.url}/assets/workloads/alpha"
        shot = ARTIFACTS / "2-alpha-stopped.png"
        show(page, alpha, "stopped by a person", shot, log=platform.log_tail)

        assert platform.launch(page, START_JOB_NAME, "alpha", "3-start-launchpad.png") == "SUCCESS"
        wait_until(
            lambda: platform.committed("alpha") == 150,
            timeout=90,
            interval=0.5,
            message="alpha started again and read what waited",
        )
        page.goto(f"{platform.url}/runs/{host.run_id}")
        expect(page.get_by_text("Started").first).to_be_visible(timeout=30_000)
        page.screenshot(path=ARTIFACTS / "4-host-run.png")
        said = platform.messages(host.run_id)
        assert sum("workload alpha started" in m for m in said) == 2, said
        assert sum("workload beta started" in m for m in said) == 1, said

        # The neighbour was never touched: the same host run, beta started in it once.
        [same] = platform.runs(HOST_JOB_NAME)
        assert (same.run_id, same.status.value) == (host.run_id, "STARTED")
        statuses = platform.statuses()
        assert statuses["alpha"].state == "running"
        assert statuses["beta"] == beta, "beta was started again"
        assert not platform.runs("consume_workload")
    finally:
        stop_group(dev, timeout=120)
