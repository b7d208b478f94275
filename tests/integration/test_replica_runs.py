"""Replicas as Dagster runs on a real Tansu broker and a real Dagster instance (SQLite, shared by
four processes): three consumer runs of one workload, each a process of its own tagged replica
0, 1, 2 (``tests/integration/replica_run.py``, as three run workers would execute them), split
a 6-partition topic 2/2/2. Scaled down to one while records flow, the two surplus runs drain and
end CANCELED one after the other, as the sensor stops them, the third keeps running untouched and takes every partition, and nothing is lost:
every record handled, key order kept within each run, no partition handled by two runs at once,
committed = log end.

What the discovery sensor decides about replicas is tested against a real instance in
``test_discovery_sensor.py``; ``test_up.py`` scales a workload under ``lanehouse up``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from orchestration.workloads.names import (
    ASSIGNED_TAG,
    CONSUMER_JOB_NAME,
    REPLICA_TAG,
    STOP_REASON_TAG,
)
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from tests.backends import assert_all_committed
from tests.helpers import wait_until
from tests.integration.fleet_recording import read_fleet
from tests.integration.processes import REPO, write_spec
from tests.integration.test_fleet import assert_key_order, assert_no_two_owners_at_once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTITIONS = 6
RECORDS = 30_000
KEYS = 300


def replica_runs(instance: DagsterInstance) -> dict[str, DagsterRun]:
    runs = instance.get_runs(RunsFilter(job_name=CONSUMER_JOB_NAME))
    return {run.tags[REPLICA_TAG]: run for run in runs}


def assigned(run: DagsterRun) -> set[int]:
    """The partitions of its ``lanehouse/assigned`` tag, e.g. ``topic[0,3]``."""
    text = run.tags.get(ASSIGNED_TAG, "none")
    return {int(p) for p in text.partition("[")[2].rstrip("]").split(",") if p}


def split_between(instance: DagsterInstance, *replicas: str) -> Callable[[], bool]:
    """Whether these replicas' runs hold every partition, evenly and once."""

    def check() -> bool:
        runs = replica_runs(instance)
        parts = [assigned(runs[r]) for r in replicas if r in runs]
        return (
            len(parts) == len(replicas)
            and all(len(p) == PARTITIONS // len(replicas) for p in parts)
            and set().union(*parts) == set(range(PARTITIONS))
        )

    return check


def stop_replica(instance: DagsterInstance, workers: list[subprocess.Popen[bytes]], i: int) -> None:
    """As the sensor stops a surplus replica: the reason, then CANCELING; it drains and exits."""
    run = replica_runs(instance)[str(i)]
    instance.add_run_tags(run.run_id, {STOP_REASON_TAG: "scaled_down"})
    instance.report_run_canceling(run)
    assert workers[i].wait(60) == 0


def test_three_replica_runs_split_six_partitions_and_scaling_down_loses_nothing(
    kafka_broker: TansuBroker, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    home, workloads, records = tmp_path / "dagster", tmp_path / "workloads", tmp_path / "records"
    for directory in (home, workloads, records):
        directory.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    topic = topic_factory(PARTITIONS)
    spec = write_spec(workloads / "fleet.yaml", kafka_broker, topic, "fleet-group", concurrency=30)
    text = spec.read_text().replace("name: recorder", "name: fleet")
    text = text.replace("tests.integration.recording:", "tests.integration.fleet_recording:")
    spec.write_text(text + "replicas: 3\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DAGSTER_HOME": str(home),
        "LANEHOUSE_WORKLOADS": str(workloads),
        "LANEHOUSE_LAKE": str(tmp_path / "lake"),
        "LH_RECORD_DIR": str(records),
        "LH_DELAY": "0.02",
    }
    with DagsterInstance.from_config(str(home)) as instance:
        assert WORKLOAD_PARTITIONS.name is not None
        instance.add_dynamic_partitions(WORKLOAD_PARTITIONS.name, ["fleet"])
        command = [sys.executable, "-m", "tests.integration.replica_run", "fleet"]
        workers = [
            subprocess.Popen(
                [*command, str(i)],
                cwd=REPO,
                env={**env, "LANEHOUSE_REPLICA": str(i)},
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / f"replica-{i}.log").open("w"),
            )
            for i in range(3)
        ]
        try:
            wait_until(
                split_between(instance, "0", "1", "2"), 90, message="three runs, 2 partitions each"
            )
            before = {r: run.run_id for r, run in replica_runs(instance).items()}
            produce_sample(kafka_broker.bootstrap, topic, RECORDS, KEYS)
            wait_until(
                lambda: len(read_fleet(records)) >= RECORDS // 3, 60, message="a third handled"
            )
            # What the sensor does: highest first, one at a time, the next once the group has
            # settled (it waits SCALE_DOWN_SETTLE after a run ended; here: until the two left
            # hold 3 partitions each).
            stop_replica(instance, workers, 2)
            wait_until(split_between(instance, "0", "1"), 60, message="3/3 after one left")
            stop_replica(instance, workers, 1)
            wait_until(
                lambda: assigned(replica_runs(instance)["0"]) == set(range(PARTITIONS)),
                60,
                message="replica 0 takes every partition",
            )
            wait_until(
                lambda: len({(r.partition, r.offset) for r in read_fleet(records)}) == RECORDS,
                90,
                message="every record handled",
            )
            assert replica_runs(instance)["0"].run_id == before["0"]
            assert replica_runs(instance)["0"].status == DagsterRunStatus.STARTED
            wait_until(
                lambda: _committed(kafka_broker, topic),
                30,
                message="committed = log end",
            )
        finally:
            for run in replica_runs(instance).values():
                if run.status == DagsterRunStatus.STARTED:
                    instance.report_run_canceling(run)
            for worker in workers:
                worker.wait(60)
        runs = replica_runs(instance)
        assert {r: run.status for r, run in runs.items()} == dict.fromkeys(
            "012", DagsterRunStatus.CANCELED
        )

    rows = read_fleet(records)
    handled = {(row.key, row.seq) for row in rows}
    per_key = Counter(key for key, _ in handled)  # each key's records are numbered 0, 1, ...
    assert all((key, seq) in handled for key, n in per_key.items() for seq in range(n))
    assert len(handled) == RECORDS, f"records lost: {RECORDS - len(handled)} never handled"
    assert set(Counter(row.replica for row in rows)) == {0, 1, 2}
    assert_key_order(rows)
    assert_no_two_owners_at_once(rows)


def _committed(broker: TansuBroker, topic: str) -> bool:
    try:
        assert_all_committed(broker.bootstrap, "fleet-group", topic, PARTITIONS)
    except AssertionError:
        return False
    return True
