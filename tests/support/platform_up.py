"""Drive ``lanehouse up`` from tests: start it on free ports in a process group of its own (as
a terminal's foreground job), read its runs over GraphQL, list what it listens on, stop it as a
terminal's Ctrl-C does and check every process it started has exited."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil  # type: ignore[import-untyped]  # no stubs installed

from orchestration.graphql import graphql
from orchestration.workloads.names import CONSUMER_JOB_NAME, HOST_JOB_NAME
from tests.helpers import free_port, wait_until

if TYPE_CHECKING:
    from dagster import DagsterInstance

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = ("clickstream", "orders")
#: Workloads the tests add while the platform runs (``tests/support/ui_steps.py``).
EXTRA_WORKLOADS = ("added",)
BROKERS = ("tansu", "pulsar-lite")  # the embedded brokers' executables
#: A consumer run's last words (orchestration/workloads/job.py), one per source.
STOPPED_LINE = re.compile(
    r"workload (?P<name>\S+): stopped after [\d.]+s: \d+ records completed, "
    r"\d+ failed attempts, (?P<commits>\d+) commits \((?P<failed>\d+) failed\)"
)


@dataclass(frozen=True)
class Listener:
    """A listening socket: which process, on which address."""

    name: str
    pid: int
    ip: str
    port: int

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.ip.split("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return address.is_loopback

    def __str__(self) -> str:
        return f"{self.name}[{self.pid}] {self.ip}:{self.port}"


def listeners(pid: int, descendants: bool = True) -> list[Listener]:
    """The listening TCP sockets of ``pid`` (and of its descendants)."""
    root = psutil.Process(pid)
    family = [root, *(root.children(recursive=True) if descendants else [])]
    found = []
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            name = process.name()
            try:
                connections = process.net_connections(kind="inet")
            except psutil.AccessDenied:
                connections = [c for c in psutil.net_connections("inet") if c.pid == process.pid]
            found += [
                Listener(name, process.pid, c.laddr.ip, c.laddr.port)
                for c in connections
                if c.status == psutil.CONN_LISTEN
            ]
    return found


@dataclass(frozen=True)
class Stopped:
    """How a clean stop of ``lanehouse up`` went."""

    runs: dict[str, str]  # run id -> final status, for each consumer run active at the signal
    runs_ended: float  # s from the signal until all of them had ended
    brokers_up_then: bool  # both brokers still running once the runs had ended
    exited: float  # s from the signal until lanehouse up exited


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie waiting to be reaped."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


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
            "{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } "
            "} } }"
        )
        return [
            {**run, "tags": {t["key"]: t["value"] for t in run["tags"]}}
            for run in data["runsOrError"]["results"]
        ]

    def started(self) -> dict[str, str]:
        """The STARTED run each workload runs in, by workload: its own run, or the host run
        that says the workload is running in it (none while the UI is not answering yet)."""
        from dagster import DagsterInstance

        from orchestration.workloads.host_store import read_statuses

        try:
            runs = [run for run in self.runs() if run["status"] == "STARTED"]
        except OSError:  # URLError included
            return {}
        found = {
            # a run launched from the launchpad has only the partition tag
            run["tags"].get("lanehouse/workload", run["tags"].get("dagster/partition")): run[
                "runId"
            ]
            for run in runs
            if run["jobName"] == CONSUMER_JOB_NAME
        }
        hosts = {run["runId"] for run in runs if run["jobName"] == HOST_JOB_NAME}
        if hosts:
            with DagsterInstance.from_config(str(self.state / "dagster")) as instance:
                statuses = read_statuses(instance, [*WORKLOADS, *EXTRA_WORKLOADS])
            found |= {
                name: status.run_id
                for name, status in statuses.items()
                if status.state == "running" and status.run_id in hosts
            }
        return found

    def wait_settled(self) -> None:
        """Until every example workload runs and no run is on its way in or out (a run the
        sensor is stopping, for a scale-down or a new spec, ends without the platform's stop
        tag, so the next ``up`` starts it as the sensor's, not as one the platform stopped)."""

        def settled() -> bool:
            try:
                runs = self.runs()
            except OSError:
                return False
            moving = {"QUEUED", "NOT_STARTED", "STARTING", "CANCELING"}
            return set(self.started()) == set(WORKLOADS) and not any(
                run["status"] in moving for run in runs
            )

        wait_until(settled, timeout=240, interval=1, message=f"a settled platform\n{self.log()}")

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
        """``lanehouse up`` with a relative state dir (as ``make up``'s ``.lanehouse``), output
        appended to ``up.log`` next to it."""
        ui, kafka, pulsar = self.ports
        command = [sys.executable, "-m", "orchestration.cli", "up", "--state-dir", self.state.name]
        command += ["--ui-port", str(ui), "--kafka-port", str(kafka), "--pulsar-port", str(pulsar)]
        log = (self.state.parent / "up.log").open("ab")
        proc = subprocess.Popen(
            command,
            cwd=self.state.parent,
            env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=0,  # a foreground job of its own: its Ctrl-C does not reach pytest
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

    def statuses(self) -> dict[str, dict[str, Any]]:
        """What :meth:`workloads` returns, read in this process under the same environment: for
        polls. Each ``lanehouse`` command is a Python start that imports Dagster, ~3.5 CPU-s on
        the busy suite's machine; the platform tests polled it a dozen times each."""
        from unittest import mock

        from orchestration.cli.workloads import collect

        with mock.patch.dict(os.environ, self.env):
            found, _ = collect(self.state, None, None)
        return {status.name: status.model_dump(mode="json") for status in found}

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

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGINT) -> Stopped:
        """Stop ``lanehouse up`` cleanly: SIGINT (or SIGHUP) to its whole process group, as a
        terminal's Ctrl-C (or hangup) does; any other signal to it alone, as ``kill``. Watches
        its consumer and host runs and brokers until it exits with status 0, then waits for every
        process it started."""
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

        from orchestration.local.up import ACTIVE_STATUSES

        descendants = psutil.Process(proc.pid).children(recursive=True)
        brokers = [p for p in descendants if _program(p) in BROKERS]
        assert sorted(map(_program, brokers)) == sorted(BROKERS), descendants
        with DagsterInstance.from_config(str(self.state / "dagster")) as instance:
            statuses = [DagsterRunStatus(status) for status in ACTIVE_STATUSES]
            run_ids = [
                run.run_id
                for job_name in (CONSUMER_JOB_NAME, HOST_JOB_NAME)
                for run in instance.get_runs(RunsFilter(job_name=job_name, statuses=statuses))
            ]
            if sig in (signal.SIGINT, signal.SIGHUP):
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            start = time.monotonic()
            runs_ended: float | None = None
            brokers_up = False

            def exited() -> bool:
                nonlocal runs_ended, brokers_up
                if runs_ended is None and all(_finished(instance, r) for r in run_ids):
                    runs_ended = time.monotonic() - start
                    brokers_up = all(map(alive, brokers))  # looked at after the runs ended
                return proc.poll() is not None

            wait_until(exited, timeout=180, interval=0.1, message=f"up exited\n{self.log()}")
            took = time.monotonic() - start
            assert proc.returncode == 0, self.log()
            final = {r: _status(instance, r) for r in run_ids}
        wait_until(
            lambda: not any(map(alive, descendants)),
            timeout=30,
            message="every process lanehouse up started has exited",
        )
        assert runs_ended is not None, f"runs still active after lanehouse up exited: {final}"
        return Stopped(final, runs_ended, brokers_up, took)

    def final_commits(self, run_id: str) -> dict[str, tuple[int, int]]:
        """Commits and failed commits of each source, from a consumer run's last log lines
        (read from the instance: the UI may be gone)."""
        from dagster import DagsterInstance

        with DagsterInstance.from_config(str(self.state / "dagster")) as instance:
            messages = [entry.user_message for entry in instance.all_logs(run_id)]
        return {
            match["name"]: (int(match["commits"]), int(match["failed"]))
            for match in map(STOPPED_LINE.search, messages)
            if match
        }

    def kill_run(self, proc: subprocess.Popen[bytes], run_id: str) -> Restart:
        """``kill -9`` the worker of consumer run ``run_id`` (the process serving its
        ``lanehouse/http`` address) and time its workload's way back: the run marked FAILURE,
        its replacement launched, and the replacement's first progress report with records."""
        from orchestration.workloads.discovery_model import RESTARTS_TAG
        from orchestration.workloads.endpoints import HTTP_TAG

        def tags() -> dict[str, str]:
            [run] = [r for r in self.runs() if r["runId"] == run_id]
            return dict(run["tags"])

        # A run tags its address once its endpoint serves, a moment after it is STARTED (a
        # clean-clone run killed a run fresh from a rewind before the tag was there).
        wait_until(
            lambda: HTTP_TAG in tags(),
            timeout=60,
            interval=0.5,
            message=f"run {run_id} tagged with the address it serves",
        )
        tagged = tags()
        workload, port = tagged["dagster/partition"], int(tagged[HTTP_TAG].rsplit(":", 1)[1])
        [worker] = {listener.pid for listener in listeners(proc.pid) if listener.port == port}
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        marks: dict[str, float] = {}

        def back() -> bool:
            runs = {r["runId"]: r for r in self.runs()}
            if "failed" not in marks and runs[run_id]["status"] == "FAILURE":
                marks["failed"] = time.monotonic() - killed
            new = [
                r
                for r in runs.values()
                if r["runId"] != run_id
                and r["tags"].get("dagster/partition") == workload
                and r["tags"].get(RESTARTS_TAG)
            ]
            if new and "launched" not in marks:
                marks["launched"] = time.monotonic() - killed
            if not new or new[0]["status"] != "STARTED":
                return False
            status = self.statuses()[workload]
            done = sum(p["records_completed"] or 0 for p in status["progress"])
            return bool(status["run"]["run_id"] == new[0]["runId"] and done > 0)

        wait_until(back, timeout=180, interval=0.5, message=f"{workload} back after kill -9")
        new_run = self.started()[workload]
        return Restart(
            workload, new_run, marks["failed"], marks["launched"], time.monotonic() - killed
        )

    def log(self) -> str:
        return (self.state.parent / "up.log").read_text(errors="replace")[-4000:]


@dataclass(frozen=True)
class Restart:
    """Seconds from a consumer run's ``kill -9`` to each step of its workload's way back."""

    workload: str
    run_id: str
    failed: float
    launched: float
    consuming: float

    def __str__(self) -> str:
        return (
            f"{self.workload}: FAILURE after {self.failed:.1f}s, replacement launched after "
            f"{self.launched:.1f}s, consuming (first report with records) after "
            f"{self.consuming:.1f}s"
        )


def _program(process: psutil.Process) -> str:
    try:
        return Path(process.cmdline()[0]).name
    except (psutil.NoSuchProcess, IndexError):
        return ""


def _finished(instance: DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is not None and run.is_finished


def _status(instance: DagsterInstance, run_id: str) -> str:
    run = instance.get_run_by_id(run_id)
    return run.status.value if run is not None else "missing"
