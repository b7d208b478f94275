"""``lanehouse up``: the whole platform on one machine, and a clean way down.

    up:   embedded brokers → demo topics and steady producers → ``dagster dev`` (DAGSTER_HOME
          under the state dir) → UI answers → discovery sensor running → print the address
    down: stop the sensor (nothing new starts) → terminate every consumer run (each drains and
          commits; CANCELING until done) → wait for them to end → stop dagster dev →
          producers → brokers

``dagster dev`` alone leaves runs behind as orphans when it stops, which is why the shutdown
terminates them first. Every child (brokers, producers, ``dagster dev``) runs in a session of
its own: a terminal's Ctrl-C goes to its whole foreground process group, and a broker in it
would close its port before the runs' final commits. So only this process gets it, and takes
everything down in that order; SIGTERM and a hangup (the terminal closed) do the same.

The brokers and the UI listen on 127.0.0.1 only (the runs' endpoints too, unless
``LANEHOUSE_RUN_HTTP_HOST`` says otherwise). Kafka (embedded Tansu) keeps its topics in memory:
they start empty after a restart; Pulsar's persist in ``<state>/pulsar``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from consumers import KafkaSourceSpec, LanehouseError, PulsarSourceSpec, WorkloadSpec
from consumers.dev.embedded.child import BrokerProcess
from orchestration.graphql import graphql
from orchestration.local.instance import lake_dir, prepare_dagster_home, prepare_platform_config
from orchestration.shop.datasets import CLICKS_DATASET, ORDERS_DATASET
from orchestration.workloads.names import (
    CONSUMER_JOB_NAME,
    DISCOVERY_SENSOR_NAME,
    HOST_JOB_NAME,
    PLATFORM_STOP_REASON,
    stop_tags,
    workloads_dir,
)

log = logging.getLogger("lanehouse.up")

REPO: Final = Path(__file__).resolve().parents[2]
LOCATION: Final = "lanehouse"  # workspace.yaml's location_name
#: Runs to terminate; a CANCELING one is already draining (a second SIGINT would cut its drain
#: short), so it is only waited for.
RUNNING_STATUSES: Final = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED")
ACTIVE_STATUSES: Final = (*RUNNING_STATUSES, "CANCELING")
_SENSOR_SELECTOR: Final = {
    "repositoryLocationName": LOCATION,
    "repositoryName": "__repository__",
    "sensorName": DISCOVERY_SENSOR_NAME,
}


@dataclass
class UpSettings:
    state: Path
    ui_port: int = 3000
    kafka_port: int = 9092
    pulsar_port: int = 6650
    rate: float = 20.0  # clicks per second of the live shop; records/s per other topic
    workloads: Path = field(default_factory=workloads_dir)
    ui_timeout: float = 180.0
    drain_timeout: float = 90.0


class Platform:
    """The processes ``lanehouse up`` owns; :meth:`stop` takes them down in order."""

    def __init__(self, settings: UpSettings, say: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.say = say
        self.brokers: list[BrokerProcess] = []
        self.producers: list[subprocess.Popen[bytes]] = []
        self.dagster: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        self.home = prepare_dagster_home(settings.state)

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.ui_port}"

    # ------------------------------------------------------------ start

    def start(self) -> None:
        from consumers.dev.embedded.pulsar import start_pulsar_lite
        from consumers.dev.embedded.tansu import start_tansu

        s = self.settings
        # Its log with the platform's others, kept for a post-mortem (a broker's own temp dir
        # goes when it stops, and stays behind for good when everything is killed).
        kafka = start_tansu(s.kafka_port, log_dir=s.state / "logs")
        self.brokers.append(kafka)
        pulsar = start_pulsar_lite(s.pulsar_port, s.state / "pulsar")
        self.brokers.append(pulsar)
        self.say(
            f"Kafka bootstrap {kafka.bootstrap} (embedded Tansu, in memory: its topics start "
            f"empty after a restart), Pulsar {pulsar.url} (topics kept in {pulsar.data_dir})"
        )
        self.env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "KAFKA_BOOTSTRAP": kafka.bootstrap,
            "PULSAR_URL": pulsar.url,
            "LANEHOUSE_WORKLOADS": str(s.workloads.resolve()),
            # Consumer runs land, and Spark runs read, in this state dir's lake.
            "LANEHOUSE_LAKE": str(lake_dir(s.state)),
            # One permit pool across every consumer run (each is its own process).
            "LANEHOUSE_CONFIG": str(prepare_platform_config(s.state)),
            # Each consumer run writes a Prometheus file_sd target here while it runs.
            "LANEHOUSE_PROMETHEUS_TARGETS": str((s.state / "prometheus").resolve()),
            # The sensor reloads the code location when workload files come, go or change.
            "LANEHOUSE_DAGSTER_URL": self.ui_url,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        self._start_producers()
        workspace = str(REPO / "workspace.yaml")
        command = [sys.executable, "-m", "dagster", "dev", "-w", workspace]
        command += ["-h", "127.0.0.1", "-p", str(s.ui_port)]
        self.dagster = subprocess.Popen(
            command,
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log("dagster.log"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_signals,  # only resets two signal dispositions
        )
        self._wait_for_ui()
        self.ensure_sensor_running()
        self.say(f"Dagster UI: {self.ui_url}  (DAGSTER_HOME={self.home})")
        targets = self.env["LANEHOUSE_PROMETHEUS_TARGETS"]
        self.say(
            "Consumer runs serve /metrics, /healthz and /tap (address in each run's "
            "lanehouse/http tag, the tap's command in lanehouse/tap); Prometheus: "
            f"file_sd_configs: [{{files: ['{targets}/*.json']}}]"
        )

    def _log(self, name: str) -> Any:
        logs = self.settings.state / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return (logs / name).open("ab")

    def _start_producers(self) -> None:
        """Steady traffic into each enabled workload's first topic, so runs have work.

        Workloads landing the demo's datasets get the live shop (records the Spark assets
        clean); any other workload gets the keyed sample stream of ``lanehouse produce``.
        """
        from orchestration.workloads.registry import read_registry

        shop: dict[str, list[str]] = {}  # stream -> the shop options that feed it
        for spec in read_registry(self.settings.workloads, env=self.env).specs():
            if not spec.enabled:
                continue
            feed = self._shop_feed(spec)
            if feed is not None and feed[0] not in shop:
                shop[feed[0]] = feed[1]
            else:
                self.producers.append(self._sample_producer(spec))
        if shop:
            cmd = ["shop", *(a for args in shop.values() for a in args)]
            self.producers.append(
                self._spawn([*cmd, "--rate", str(self.settings.rate)], "shop.log")
            )

    def _shop_feed(self, spec: WorkloadSpec) -> tuple[str, list[str]] | None:
        """The stream and ``lanehouse shop`` options that feed ``spec``, if it lands a demo
        dataset from a source the shop writes to (clicks: Kafka; orders: Kafka or Pulsar)."""
        dataset = spec.landing.dataset if spec.landing else None
        source, topic = spec.source, spec.source.topics[0]
        if dataset == CLICKS_DATASET and isinstance(source, KafkaSourceSpec):
            return "clicks", ["--clicks-topic", topic]
        if dataset != ORDERS_DATASET:
            return None
        if isinstance(source, PulsarSourceSpec):
            return "orders", ["--orders-topic", topic, "--pulsar", self.env["PULSAR_URL"]]
        return "orders", ["--orders-topic", topic]

    def _sample_producer(self, spec: WorkloadSpec) -> subprocess.Popen[bytes]:
        source = spec.source
        cmd = ["produce", "--topic", source.topics[0], "--count", "1000000000", "--keys", "200"]
        cmd += ["--rate", str(self.settings.rate)]
        if isinstance(source, PulsarSourceSpec):
            cmd += ["--pulsar", self.env["PULSAR_URL"]]
        else:
            assert isinstance(source, KafkaSourceSpec)
            cmd += ["--partitions", "4"]
        return self._spawn(cmd, f"produce-{spec.name}.log")

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", *args],
            cwd=REPO,
            env={**self.env, "TERM": "dumb"},
            stdin=subprocess.DEVNULL,
            stdout=self._log(log_name),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _wait_for_ui(self) -> None:
        deadline = time.monotonic() + self.settings.ui_timeout
        while True:
            assert self.dagster is not None
            if self.dagster.poll() is not None:
                raise LanehouseError(
                    f"dagster dev exited with status {self.dagster.returncode}; "
                    f"see {self.settings.state / 'logs' / 'dagster.log'}"
                )
            try:
                with urllib.request.urlopen(f"{self.ui_url}/server_info", timeout=2) as reply:
                    if reply.status == 200 and self._location_loaded():
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise LanehouseError(
                    f"the Dagster UI did not answer on {self.ui_url} within "
                    f"{self.settings.ui_timeout:.0f}s"
                )
            time.sleep(0.5)

    def _location_loaded(self) -> bool:
        data = self.graphql(
            "query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename } }",
            {"s": _SENSOR_SELECTOR},
        )
        return bool(data.get("sensorOrError", {}).get("__typename") == "Sensor")

    # ------------------------------------------------------------ the Dagster API

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return graphql(self.ui_url, query, variables)

    def ensure_sensor_running(self) -> None:
        """Start the discovery sensor (``lanehouse up``'s shutdown stopped it, and Dagster
        remembers a stopped sensor across restarts)."""
        self.graphql(
            "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename } }",
            {"s": _SENSOR_SELECTOR},
        )

    def stop_sensor(self) -> None:
        data = self.graphql(
            "query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {"
            " ... on Sensor { id } } }",
            {"s": _SENSOR_SELECTOR},
        )
        sensor_id = data.get("sensorOrError", {}).get("id")
        if not sensor_id:
            # The code location is down: the sensor cannot tick either, and the runs stopped
            # next are tagged as stopped by the platform, so it starts them again next time.
            self.say("could not stop the discovery sensor (code location not loaded); going on")
            return
        result = self.graphql(
            "mutation($id: String!) { stopSensor(id: $id) { __typename } }", {"id": sensor_id}
        )
        kind = result.get("stopSensor", {}).get("__typename")
        if kind != "StopSensorMutationResult":
            self.say(f"could not stop the discovery sensor ({kind}); going on")

    def consumer_runs(self, statuses: tuple[str, ...] = ACTIVE_STATUSES) -> list[str]:
        """Runs that consume: each workload's own, and host runs of many workloads."""
        found = []
        for job_name in (CONSUMER_JOB_NAME, HOST_JOB_NAME):
            data = self.graphql(
                "query($f: RunsFilter!) { runsOrError(filter: $f) "
                "{ ... on Runs { results { runId } } } }",
                {"f": {"pipelineName": job_name, "statuses": list(statuses)}},
            )
            found += [run["runId"] for run in data["runsOrError"]["results"]]
        return found

    def terminate_runs(self, run_ids: list[str]) -> None:
        """Tag each run as stopped by the platform (the sensor restarts those on the next ``up``,
        unlike runs a person terminated), then ask Dagster to terminate it (one SIGINT)."""
        for run_id in run_ids:
            self._tag_run(run_id)
            self.graphql(
                "mutation($id: String!) { terminateRun(runId: $id) { __typename } }",
                {"id": run_id},
            )

    def _tag_run(self, run_id: str) -> None:
        from dagster import DagsterInstance

        with DagsterInstance.from_config(str(self.home)) as instance:
            instance.add_run_tags(run_id, stop_tags(run_id, PLATFORM_STOP_REASON))

    # ------------------------------------------------------------ stop

    def stop(self) -> None:
        """Take everything down in order; each step runs even if an earlier one failed."""
        if self.dagster is not None and self.dagster.poll() is None:
            with _logged("stopping the consumer runs"):
                self.stop_sensor()
                runs = self.consumer_runs(RUNNING_STATUSES)
                if runs:
                    self.say(f"terminating {len(runs)} consumer run(s); they drain and commit")
                    self.terminate_runs(runs)
                    deadline = time.monotonic() + self.settings.drain_timeout
                    while self.consumer_runs():
                        if time.monotonic() > deadline:
                            self.say("consumer runs still draining; stopping anyway")
                            break
                        time.sleep(0.5)
        if self.dagster is not None:
            _stop_process(self.dagster, signal.SIGINT, 30)
            self.say("dagster dev stopped")
        for producer in self.producers:
            _stop_process(producer, signal.SIGINT, 10)
        for broker in reversed(self.brokers):
            broker.stop()
        self.say("brokers stopped")


def _default_signals() -> None:
    """In the child before exec: a parent started from a non-interactive shell may pass SIGINT
    ignored, and dagster dev then ignores SIGTERM too (shared NOTES)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stop_process(process: subprocess.Popen[bytes], sig: int, timeout: float) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def _stop_signals() -> list[signal.Signals]:
    """SIGINT, SIGTERM and SIGHUP: the children have sessions of their own, so a closed
    terminal's hangup reaches only this process, which must then stop them as on Ctrl-C. Not
    SIGHUP under ``nohup`` (ignored on purpose)."""
    hangup = [] if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else [signal.SIGHUP]
    return [signal.SIGINT, signal.SIGTERM, *hangup]


def _unless_gone(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say``, ignoring a terminal that is gone (a hangup), so the stop still runs to the end."""

    def said(text: str) -> None:
        with contextlib.suppress(OSError):
            say(text)

    return said


@contextlib.contextmanager
def _logged(step: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        log.exception("%s failed", step)


def run_up(settings: UpSettings, say: Callable[[str], None] = print) -> None:
    """Start the platform and block until SIGINT, SIGTERM or SIGHUP, then stop it in order."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _stop_signals()}
    platform = Platform(settings, _unless_gone(say))
    try:
        platform.start()
        say("Ctrl-C stops the consumer runs (drain, commit), Dagster and the brokers.")
        while not stop.wait(1.0):
            if platform.dagster is not None and platform.dagster.poll() is not None:
                raise LanehouseError(
                    f"dagster dev exited with status {platform.dagster.returncode}"
                )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        platform.stop()
