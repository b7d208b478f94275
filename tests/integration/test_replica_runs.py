"""Replicas as Dagster runs, end to end without the daemon's timing: the real discovery sensor
ticks every half second (as the sensor daemon would run it, here on a thread), each run request
becomes a run that a run worker process executes (``tests/support/replica_run.py``, as
``dagster api execute_run`` does), on one SQLite instance and a real Tansu broker.

A 6-partition topic, one replica run holding all of it. Records flow, and a spec edit to
``replicas: 3`` while they do adds two runs: the three split it 2/2/2, the first run untouched.
One replica's process is killed with ``kill -9`` while records still flow: the sensor declares
its run dead (no heartbeat), the other two serve its partitions meanwhile, and it is restarted
alone after its backoff. 15,000 more records come, and a spec edit to ``replicas: 1`` stops the
two surplus runs (one at a time); the first run is never touched. Nothing is lost: every record handled, key
order kept within each process, no partition held by two processes at once, committed = log
end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Definitions,
    RunsFilter,
)

from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from orchestration.workloads import decisions
from orchestration.workloads.discovery import build_discovery_sensor
from orchestration.workloads.discovery_model import RESTARTS_TAG, RestartPolicy
from orchestration.workloads.job import consumer_job
from orchestration.workloads.names import ASSIGNED_TAG, CONSUMER_JOB_NAME, REPLICA_TAG
from tests.backends import assert_all_committed
from tests.helpers import wait_until
from tests.support.fleet_recording import (
    assert_key_order,
    assert_no_two_owners_at_once,
    read_fleet,
)
from tests.support.processes import REPO, write_spec
from tests.support.sensor_platform import apply_partition_requests, daemon_context

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 6
KEYS = 300
#: Produced after the kill, before scaling down (the first part flows until then).
SECOND_PART = 15_000
#: Beats every half second, so a killed worker is declared dead after 3 s, restarted 4 s later.
POLICY = RestartPolicy(base_backoff=4, max_backoff=8, heartbeat_timeout=3)
S = DagsterRunStatus


@dataclass
class Daemon:
    """The sensor daemon's part, on a thread: tick, add partitions, create and start runs."""

    instance: DagsterInstance
    workloads: Path
    topic: str
    env: dict[str, str]
    logs: Path
    cursor: str | None = None
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        # Runs of consume_workload only, also at replicas: 1 (hosts have their own tests).
        self.sensor = build_discovery_sensor(self.workloads, policy=POLICY, host_budget=0)
        self.defs = Definitions(jobs=[consumer_job], sensors=[self.sensor])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sensor-daemon", daemon=True)

    def __enter__(self) -> Daemon:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for run in self.runs().values():
            if not run.is_finished:
                self.instance.report_run_canceling(run)
        for worker in self.workers.values():
            worker.wait(60)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(0.5):
                self.tick()
        except BaseException as exc:
            self.error = exc

    def tick(self) -> None:
        data = self.sensor.evaluate_tick(daemon_context(self.instance, self.cursor, self.defs))
        self.cursor = data.cursor
        apply_partition_requests(self.instance, data)
        for run_request in data.run_requests or []:
            run = self.instance.create_run_for_job(consumer_job, tags=run_request.tags)
            replica = run.tags[REPLICA_TAG]
            self.workers[run.run_id] = subprocess.Popen(
                [sys.executable, "-m", "tests.support.replica_run", run.run_id],
                cwd=REPO,
                env={**self.env, "LANEHOUSE_REPLICA": replica},
                stdout=subprocess.DEVNULL,
                stderr=(self.logs / f"replica-{replica}-{run.run_id[:8]}.log").open("w"),
            )

    def runs(self) -> dict[str, DagsterRun]:
        return {r.run_id: r for r in self.instance.get_runs(RunsFilter(job_name=CONSUMER_JOB_NAME))}

    def ended_at(self, run_id: str) -> float:
        record = self.instance.get_run_record_by_id(run_id)
        assert record is not None and record.end_time is not None, run_id
        return record.end_time

    def live(self) -> dict[str, DagsterRun]:
        """STARTED runs by replica tag."""
        return {r.tags[REPLICA_TAG]: r for r in self.runs().values() if r.status == S.STARTED}


def assigned(run: DagsterRun) -> set[int]:
    """The partitions of its ``lanehouse/assigned`` tag, e.g. ``topic[0,3]``."""
    text = run.tags.get(ASSIGNED_TAG, "none")
    return {int(p) for p in text.partition("[")[2].rstrip("]").split(",") if p}


def split_between(daemon: Daemon, *replicas: str) -> Callable[[], bool]:
    """Whether exactly these replicas run, holding every partition, evenly and once."""

    def check() -> bool:
        live = daemon.live()
        parts = [assigned(live[r]) for r in replicas if r in live]
        return (
            set(live) == set(replicas)
            and all(len(p) == PARTITIONS // len(replicas) for p in parts)
            and set().union(*parts) == set(range(PARTITIONS))
        )

    return check


class TagWatch(threading.Thread):
    """Samples the live runs' ``lanehouse/assigned`` tags every 0.1 s while a rebalance runs:
    the longest time any partition was claimed by two runs at once."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(name="tag-watch", daemon=True)
        self.daemon_ = daemon
        self.longest = 0.0
        self._done = threading.Event()

    def run(self) -> None:
        since: float | None = None
        while not self._done.wait(0.1):
            claims = Counter(p for run in self.daemon_.live().values() for p in assigned(run))
            now = time.monotonic()
            if any(n > 1 for n in claims.values()):
                since = now if since is None else since
                self.longest = max(self.longest, now - since)
            else:
                since = None

    def __enter__(self) -> TagWatch:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self.join(10)


@pytest.fixture
def platform(tmp_path: Path, kafka_broker: TansuBroker, topic_factory) -> Iterator[Daemon]:
    home, workloads, records = tmp_path / "dagster", tmp_path / "workloads", tmp_path / "records"
    for directory in (home, workloads, records):
        directory.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    topic = topic_factory(PARTITIONS)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DAGSTER_HOME": str(home),
        "LANEHOUSE_WORKLOADS": str(workloads),
        "LANEHOUSE_LAKE": str(tmp_path / "lake"),
        # Reports as in production: the assigned tags must follow rebalances between them.
        "LANEHOUSE_OBSERVE_SECONDS": "30",
        "LH_HEARTBEAT_SECONDS": "0.5",
        "LH_RECORD_DIR": str(records),
        "LH_DELAY": "0.02",
    }
    with DagsterInstance.from_config(str(home)) as instance:
        yield Daemon(instance, workloads, topic, env, tmp_path)


class Flow(threading.Thread):
    """Records flowing until finished: chunks of 3,000 (ten per key, keys new in each chunk) at
    750 records/s, so a scale-up and a kill meet records in flight however long they take."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="flow", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.produced = 0
        self.error: BaseException | None = None
        self._finish = threading.Event()

    def run(self) -> None:
        try:
            while not self._finish.is_set():
                chunk = self.produced // 3000
                produce_sample(self.bootstrap, self.topic, 3000, KEYS, 750, key_prefix=f"f{chunk}-")
                self.produced += 3000
        except BaseException as exc:
            self.error = exc

    def finish(self) -> int:
        """Stops after the chunk under way; the number of records produced."""
        self._finish.set()
        self.join(60)
        assert not self.is_alive(), "the flow did not stop"
        assert self.error is None, f"the flow failed: {self.error!r}"
        return self.produced


def set_replicas(daemon: Daemon, broker: TansuBroker, replicas: int, enabled: bool = True) -> None:
    spec = write_spec(daemon.workloads / "fleet.yaml", broker, daemon.topic, "fleet-group", 30)
    text = spec.read_text().replace("name: recorder", "name: fleet")
    text = text.replace("tests.support.recording:", "tests.support.fleet_recording:")
    spec.write_text(text + f"replicas: {replicas}\nenabled: {str(enabled).lower()}\n")


def test_replica_runs_scale_up_split_survive_a_kill_and_scale_down_losing_nothing(
    platform: Daemon, kafka_broker: TansuBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decisions, "SCALE_DOWN_SETTLE", 3.0)  # Tansu rebalances in ~1 s here
    daemon, topic = platform, platform.topic
    records = Path(daemon.env["LH_RECORD_DIR"])
    set_replicas(daemon, kafka_broker, 1)
    with daemon:
        wait_until(split_between(daemon, "0"), 90, message="one run holding every partition")
        first = daemon.live()["0"].run_id
        flow = Flow(kafka_broker.bootstrap, topic)
        flow.start()
        wait_until(lambda: _handled(records) >= 1000, 60, message="records flow")

        with TagWatch(daemon) as tags:
            set_replicas(daemon, kafka_broker, 3)  # scale up while records flow
            wait_until(
                split_between(daemon, "0", "1", "2"), 90, message="three runs, 2 partitions each"
            )
        # Tags follow a rebalance within a look (0.5 s), not a report (30 s here): before, two
        # replicas' tags claimed the same partitions until the next report.
        assert tags.longest < 2.0, f"a partition claimed twice for {tags.longest:.1f}s"
        assert daemon.live()["0"].run_id == first  # never touched
        assert not any(r.tags.get("lanehouse/stop_reason") for r in daemon.runs().values())
        wait_until(
            lambda: {r.replica for r in read_fleet(records)} == {0, 1, 2},
            60,
            message="the new replicas take their share",
        )

        flowing = flow.produced
        wait_until(lambda: flow.produced > flowing, 30, message="records still flow")
        killed = daemon.live()["1"]
        daemon.workers[killed.run_id].send_signal(signal.SIGKILL)
        # The other two hold every partition until replica 1 is back.
        wait_until(split_between(daemon, "0", "2"), 60, message="0 and 2 serve all partitions")
        wait_until(
            lambda: "1" in daemon.live() and daemon.live()["1"].run_id != killed.run_id,
            60,
            message="replica 1 restarted",
        )
        assert daemon.runs()[killed.run_id].status == S.FAILURE
        assert daemon.live()["1"].tags[RESTARTS_TAG] == "1"
        wait_until(split_between(daemon, "0", "1", "2"), 60, message="2/2/2 again")
        first_part = flow.finish()
        produce_sample(kafka_broker.bootstrap, topic, SECOND_PART, KEYS, key_prefix="b")
        total = first_part + SECOND_PART
        wait_until(lambda: _handled(records) >= first_part + 1000, 60, message="more flows")

        with TagWatch(daemon) as tags:
            set_replicas(daemon, kafka_broker, 1)  # scale down while records flow
            wait_until(split_between(daemon, "0"), 90, message="replica 0 takes every partition")
        assert tags.longest < 2.0, f"a partition claimed twice for {tags.longest:.1f}s"
        assert daemon.live()["0"].run_id == first  # never touched
        stopped = [r for r in daemon.runs().values() if r.tags.get("lanehouse/stop_reason")]
        assert sorted(r.tags[REPLICA_TAG] for r in stopped) == ["1", "2"]
        assert all(r.status == S.SUCCESS for r in stopped)
        ends = {r.tags[REPLICA_TAG]: daemon.ended_at(r.run_id) for r in stopped}
        assert ends["2"] < ends["1"]  # highest first, one at a time

        wait_until(lambda: _handled(records) == total, 90, message="every record handled")
        wait_until(lambda: _committed(kafka_broker, topic), 30, message="committed = log end")
        set_replicas(daemon, kafka_broker, 1, enabled=False)
        wait_until(lambda: not daemon.live(), 60, message="the last run stops when disabled")
    assert daemon.error is None, daemon.error
    for run_id, worker in daemon.workers.items():
        expected = -signal.SIGKILL if run_id == killed.run_id else 0
        assert worker.returncode == expected, (run_id, worker.returncode)

    rows = read_fleet(records)
    handled = {(row.key, row.seq) for row in rows}
    per_key = Counter(key for key, _ in handled)  # each key's records are numbered 0, 1, ...
    assert all((key, seq) in handled for key, n in per_key.items() for seq in range(n))
    assert len(handled) == total, f"records lost: {total - len(handled)} never handled"
    assert len({row.pid for row in rows}) == 4  # three replicas, one of them restarted
    assert_key_order(rows)
    assert_no_two_owners_at_once(rows)


def _handled(records: Path) -> int:
    return len({(r.partition, r.offset) for r in read_fleet(records)})


def _committed(broker: TansuBroker, topic: str) -> bool:
    try:
        assert_all_committed(broker.bootstrap, "fleet-group", topic, PARTITIONS)
    except AssertionError:
        return False
    return True
