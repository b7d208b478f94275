"""The fleet bench's *runs* mode: R replicas of one workload as R Dagster consumer runs.

    RunsHome (one per bench invocation: a SQLite Dagster instance in a temp dir)
      └─ RunsFleet (one per measured run: a fresh workload = partition = consumer group)
           start ─► R processes ``python -m bench.replica_run WORKLOAD I`` (replica tag I)
           stop  ─► every STARTED run of the workload marked CANCELING ─► drain, commit, SUCCESS
           wait  ─► every process exited 0, R runs, each SUCCESS

Each run is a process of its own executing ``consume_workload`` in process, as a run worker
does; the bench starts them itself rather than through a daemon and a run launcher, whose
queue polling and container start would only add a fixed delay before the first record. What
is measured is the consumer run as it serves records: the op, its heartbeats, progress
observations and status polls on a shared SQLite instance, against ``lanehouse consume``.
Stopping is what the discovery sensor does to a surplus run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    PARTITION_TAG,
    REPLICA_TAG,
    WORKLOAD_PARTITIONS_NAME,
)

ROOT = Path(__file__).resolve().parent.parent
#: How often ``wait`` looks for runs to stop and processes that exited.
POLL_SECONDS = 0.2


class RunsHome:
    """One Dagster instance for the whole bench invocation, as a deployment has one; kept on
    disk when a run failed (its event log says why)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lanehouse-fleet-dagster-"))
        (self.dir / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.instance = DagsterInstance.from_config(str(self.dir))
        self.keep = False

    def __enter__(self) -> RunsHome:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.instance.dispose()
        if self.keep or kind is not None:
            print(f"Dagster instance kept: {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def fleet(
        self, workload: str, replicas: int, workloads: Path, env: Mapping[str, str], work: Path
    ) -> RunsFleet:
        """R runs of ``workload``, whose spec is the one file in ``workloads``; its partition is
        registered now, as the discovery sensor does long before it launches a run."""
        self.instance.add_dynamic_partitions(WORKLOAD_PARTITIONS_NAME, [workload])
        env = {
            **env,
            "DAGSTER_HOME": str(self.dir),
            "LANEHOUSE_HOME": str(self.dir / "state"),
            "LANEHOUSE_LAKE": str(self.dir / "lake"),
            "LANEHOUSE_WORKLOADS": str(workloads),
        }
        return RunsFleet(self, workload, replicas, env, work)


class RunsFleet:
    """R consumer runs of one workload, each a process of its own (see the module docstring)."""

    def __init__(
        self, home: RunsHome, workload: str, replicas: int, env: Mapping[str, str], work: Path
    ) -> None:
        self.home, self.workload, self.replicas = home, workload, replicas
        self.env, self.work = dict(env), work
        self.procs: list[subprocess.Popen[bytes]] = []
        self.canceled: set[str] = set()  # run ids marked CANCELING

    def start(self) -> None:
        command = [sys.executable, "-m", "bench.replica_run", self.workload]
        for i in range(self.replicas):
            with open(self.work / f"run-{i}.log", "w") as log:
                self.procs.append(
                    subprocess.Popen(
                        [*command, str(i)],
                        cwd=ROOT,
                        # Its own stats file: the handler names it after LANEHOUSE_REPLICA.
                        env={**self.env, "LANEHOUSE_REPLICA": str(i)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

    def processes(self) -> list[psutil.Process]:
        """The run processes (and any children) still running, for their CPU time."""
        out: list[psutil.Process] = []
        for proc in self.procs:
            try:
                parent = psutil.Process(proc.pid)
                out += [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return out

    def alive(self) -> bool:
        return any(proc.poll() is None for proc in self.procs)

    def stop(self) -> None:
        """Mark every STARTED run of the workload CANCELING, once each."""
        for run in self.runs():
            if run.status == DagsterRunStatus.STARTED and run.run_id not in self.canceled:
                self.home.instance.report_run_canceling(run)
                self.canceled.add(run.run_id)

    def wait(self, timeout: float) -> list[str]:
        """Wait for every process to exit (stopping runs that start late); what went wrong."""
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            self.stop()
        errors: list[str] = []
        for i, proc in enumerate(self.procs):
            if proc.poll() is None:
                proc.kill()
                errors.append(f"run process {i} still running after {timeout:g}s: killed")
            code = proc.wait()
            if code != 0:
                errors.append(f"run process {i} exited {code} (log: {self.work / f'run-{i}.log'})")
        runs = self.runs()
        statuses = {run.tags.get(REPLICA_TAG, "?"): run.status.value for run in runs}
        if len(runs) != self.replicas or any(s != "SUCCESS" for s in statuses.values()):
            errors.append(f"runs of {self.workload} by replica: {statuses}, not all SUCCESS")
        if errors:
            self.home.keep = True
        return errors

    def runs(self) -> list[DagsterRun]:
        tags = {PARTITION_TAG: self.workload}
        return list(self.home.instance.get_runs(RunsFilter(job_name=CONSUMER_JOB_NAME, tags=tags)))

    def describe(self) -> dict[str, Any]:
        """What the report keeps of this fleet: the runs' ids by replica."""
        return {"run_ids": {run.tags.get(REPLICA_TAG, "?"): run.run_id for run in self.runs()}}
