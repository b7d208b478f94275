"""``lanehouse up`` for real: brokers, producers and ``dagster dev`` from a clean state dir; the
discovery sensor starts a consumer run per workload; SIGTERM takes everything down, consumer
runs first (CANCELED, tagged as stopped by the platform); a second ``up`` on the same state dir
starts them again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import free_port, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = ("clickstream", "orders")


class Up:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.ui_port = free_port()
        self.ports = [self.ui_port, free_port(), free_port()]

    def graphql(self, query: str) -> dict[str, Any]:
        body = json.dumps({"query": query}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.ui_port}/graphql", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            data: dict[str, Any] = json.loads(reply.read())["data"]
        return data

    def runs(self) -> list[dict[str, Any]]:
        data = self.graphql(
            "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"
        )
        return [
            {**run, "tags": {t["key"]: t["value"] for t in run["tags"]}}
            for run in data["runsOrError"]["results"]
        ]

    def started(self) -> dict[str, str]:
        """Running consumer runs by workload (none while the UI is not answering yet)."""
        try:
            runs = self.runs()
        except OSError:  # URLError included
            return {}
        return {
            run["tags"]["lanehouse/workload"]: run["runId"]
            for run in runs
            if run["status"] == "STARTED"
        }

    @contextmanager
    def running(self) -> Iterator[subprocess.Popen[bytes]]:
        ui, kafka, pulsar = self.ports
        command = [sys.executable, "-m", "orchestration.cli", "up", "--state-dir", str(self.state)]
        command += ["--ui-port", str(ui), "--kafka-port", str(kafka), "--pulsar-port", str(pulsar)]
        log = (self.state.parent / "up.log").open("ab")
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        descendants = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(180) == 0, self.log()
        wait_until(
            lambda: not any(p.is_running() and p.status() != "zombie" for p in descendants),
            timeout=30,
            message="every process lanehouse up started has exited",
        )

    def log(self) -> str:
        return (self.state.parent / "up.log").read_text(errors="replace")[-4000:]


def test_up_runs_every_workload_and_sigterm_stops_runs_first(tmp_path: Path) -> None:
    up = Up(tmp_path / "state")
    with up.running() as proc:
        wait_until(
            lambda: set(up.started()) == set(WORKLOADS),
            timeout=240,
            interval=1,
            message=f"both workloads have a running consumer run\n{up.log()}",
        )
        first = up.started()
        up.stop(proc)
    log = up.log()
    assert log.index("terminating 2 consumer run(s)") < log.index("dagster dev stopped")

    with up.running() as proc:  # the same state: the runs stopped by the platform come back
        wait_until(
            lambda: set(up.started()) == set(WORKLOADS),
            timeout=240,
            interval=1,
            message=f"both workloads are running again\n{up.log()}",
        )
        runs = {run["runId"]: run for run in up.runs()}
        for workload, run_id in first.items():
            assert runs[run_id]["status"] == "CANCELED", runs[run_id]
            assert runs[run_id]["tags"]["lanehouse/stop_reason"] == "platform"
            assert up.started()[workload] != run_id
        up.stop(proc)
