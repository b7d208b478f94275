"""Drive ``lanehouse up`` from tests: start it on free ports, read its runs over GraphQL, stop it
and check every process it started has exited."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from orchestration.local.graphql import graphql
from tests.helpers import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = ("clickstream", "orders")


class Up:
    def __init__(self, state: Path, env: dict[str, str] | None = None) -> None:
        self.state = state
        # Progress every 5 s instead of 30: the tests wait for a run's first report; and the
        # sensor every 3 s instead of 10: they wait for its launches and stops.
        self.env = {
            "LANEHOUSE_OBSERVE_SECONDS": "5",
            "LANEHOUSE_SENSOR_SECONDS": "3",
            **(env or {}),
        }
        self.ui_port = free_port()
        self.ports = [self.ui_port, free_port(), free_port()]

    def graphql(self, query: str) -> dict[str, Any]:
        return graphql(f"http://127.0.0.1:{self.ui_port}", query)

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
            # a run launched from the launchpad has only the partition tag
            run["tags"].get("lanehouse/workload", run["tags"].get("dagster/partition")): run[
                "runId"
            ]
            for run in runs
            if run["status"] == "STARTED"
        }

    def wait_all_running(self) -> None:
        """Until every example workload has a consumer run in progress."""
        wait_until(
            lambda: set(self.started()) == set(WORKLOADS),
            timeout=240,
            interval=1,
            message=f"every workload has a running consumer run\n{self.log()}",
        )

    @contextmanager
    def running(self) -> Iterator[subprocess.Popen[bytes]]:
        ui, kafka, pulsar = self.ports
        command = [sys.executable, "-m", "orchestration.cli", "up", "--state-dir", str(self.state)]
        command += ["--ui-port", str(ui), "--kafka-port", str(kafka), "--pulsar-port", str(pulsar)]
        log = (self.state.parent / "up.log").open("ab")
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:  # a failed test: leave no broker or Dagster behind
                self.pull_the_plug(proc)

    def workloads(self) -> dict[str, dict[str, Any]]:
        """``lanehouse workloads list --json`` on this platform's state dir, by workload."""
        command = [sys.executable, "-m", "orchestration.cli", "workloads", "list", "--json"]
        command += ["--state-dir", str(self.state)]
        env = {**os.environ, **self.env}  # the workloads directory `up` was given, if any
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
        )
        return {w["name"]: w for w in json.loads(done.stdout)["workloads"]}

    def permit_leases(self) -> list[dict[str, Any]]:
        """Live leases of the shared ``default`` pool (``lanehouse permits status --json``)."""
        command = [sys.executable, "-m", "orchestration.cli", "permits", "status", "--json"]
        command += ["--config", str(self.state / "lanehouse.yaml")]
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=60, check=True
        )
        [pool] = [p for p in json.loads(done.stdout) if p["pool"] == "default"]
        return [lease for lease in pool["leases"] if lease["expires_in"] > 0]

    def pull_the_plug(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 ``lanehouse up`` and everything it started, as a power loss would."""
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        for process in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(family, timeout=30)

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
