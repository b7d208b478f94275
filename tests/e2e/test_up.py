"""``lanehouse up`` for real: brokers, producers and ``dagster dev`` from a clean state dir; the
discovery sensor starts a consumer run per workload; nothing listens beyond loopback; a
terminal's Ctrl-C (SIGINT to the whole process group) takes everything down, consumer runs
first (SUCCESS after their drain and a final commit that succeeded, the brokers still up, tagged
as stopped by the platform); a second ``up`` on the same state dir starts them again. After a power loss (everything killed with SIGKILL) the runs left STARTED are
declared dead by their silent heartbeats and their workloads start again. (Replicas under the
real daemon: ``test_ui.py`` scales clickstream to two runs; ``test_replica_runs.py`` takes the
sensor and run workers through a kill and a scale-down.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from orchestration.workloads.discovery_model import RestartPolicy
from tests.helpers import wait_until
from tests.support.platform_up import REPO, WORKLOADS, Up, listeners

# Whole-platform runs share the 2 cores with the other workers (make test): about 4 to 5
# minutes then, past the default 300 s timeout, which is for a hang, not a slow machine.
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]


HEARTBEAT_TIMEOUT = 20
#: The restart policy's first backoff, and the sensor's interval under ``Up``.
BACKOFF = RestartPolicy().base_backoff
SENSOR_SECONDS = 3


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


def test_up_runs_every_workload_and_ctrl_c_stops_runs_first(tmp_path: Path) -> None:
    up = Up(tmp_path / "state", env={"LANEHOUSE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT)})
    with up.running() as proc:
        up.wait_all_running()
        first = up.started()
        # `lanehouse workloads` reads the instance: each workload's run, then the engine's
        # first progress report with records done (every 5 s here) and a fresh heartbeat.
        # Polled in this process, then the command's own answer checked.
        wait_until(
            lambda: all(
                sum(p["records_completed"] for p in w["progress"]) > 0
                for w in up.statuses().values()
            ),
            timeout=90,
            interval=2,
            message="every workload reports progress",
        )
        listed = up.workloads()
        assert {name: (w["phase"], w["run"]["run_id"]) for name, w in listed.items()} == {
            name: ("running", run_id) for name, run_id in first.items()
        }
        # Each consumer run is its own process; both lease from the one shared pool.
        leases = up.permit_leases()
        assert sorted(lease["workload"] for lease in leases) == sorted(WORKLOADS), leases
        assert len({lease["holder"] for lease in leases}) == len(WORKLOADS), leases
        for workload in listed.values():
            assert 0 <= workload["heartbeat_age"] < 60, workload
            assert [p["topic"] for p in workload["progress"]] == workload["topics"]
            assert sum(p["records_completed"] for p in workload["progress"]) > 0, workload
        # Every consumer run serves its metrics; Prometheus finds them through file_sd targets.
        assert "file_sd_configs" in up.log()
        targets = [json.loads(p.read_text()) for p in (up.state / "prometheus").glob("*.json")]
        by_workload = {t[0]["labels"]["workload"]: t[0]["targets"][0] for t in targets}
        assert set(by_workload) == set(WORKLOADS), targets
        for workload, address in by_workload.items():
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
                assert f'lanehouse_records_completed_total{{workload="{workload}"}}' in (
                    reply.read().decode()
                )
        # Nothing `up` started listens beyond loopback: brokers, UI, runs' endpoints.
        found = listeners(proc.pid)
        assert [str(listener) for listener in found if not listener.loopback] == [], found
        assert set(up.ports) <= {listener.port for listener in found}, found
        assert (up.state / "pulsar" / "db.rocksdb").is_dir()  # the state dir is relative
        first["clickstream"] = rewind_clickstream(up, first["clickstream"])
        # A crash: the code server marks the run FAILURE at once, and the sensor launches its
        # replacement at its first tick at least the backoff after the failure. (The Kafka
        # workload: pulsar-lite never again delivers to a subscription whose consumer was
        # killed with messages unacknowledged, until the broker restarts; two clean-clone runs
        # failed so on orders. Production Pulsar drops the consumer with its connection.)
        restart = up.kill_run(proc, first["clickstream"])
        print(f"\nkill -9: {restart}")
        assert restart.failed < 5, restart
        assert restart.launched < BACKOFF + 2 * SENSOR_SECONDS + 10, restart
        assert restart.consuming < 120, restart
        first["clickstream"] = restart.run_id
        stopped = up.stop(proc)  # Ctrl-C
    print(f"\nCtrl-C: {stopped}")
    # The brokers outlived the runs, so each run's final commit went through.
    assert stopped.brokers_up_then, stopped
    assert stopped.runs == {run_id: "SUCCESS" for run_id in first.values()}, stopped
    for name, run_id in first.items():
        commits = up.final_commits(run_id)  # {workload: (commits, failed)}
        assert set(commits) == {name} and commits[name][1] == 0 < commits[name][0], commits
    log = up.log()
    assert log.index("terminating 2 consumer run(s)") < log.index("dagster dev stopped")
    assert "could not stop the discovery sensor" not in log
    # With everything down the command still answers, from storage alone.
    for workload in up.workloads().values():
        assert (workload["phase"], workload["run"]["status"]) == ("stopped", "SUCCESS")

    with up.running() as proc:  # the same state: the runs stopped by the platform come back
        up.wait_all_running()
        runs = {run["runId"]: run for run in up.runs()}
        for name, run_id in first.items():
            assert runs[run_id]["status"] == "SUCCESS", runs[run_id]
            assert runs[run_id]["tags"]["lanehouse/stop_reason"] == "platform"
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
