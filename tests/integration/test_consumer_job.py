"""The consumer job on a real Tansu broker and a real Dagster instance, executed in process.

Termination is driven the way Dagster does it: mark the run CANCELING, then one SIGINT to the
process (from a helper thread, while the op runs on the main thread). Handlers record into
``tests.support.job_handlers``, which the op imports in this same interpreter.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    EventLogEntry,
    EventLogRecord,
    ExecuteInProcessResult,
    Failure,
    RunsFilter,
    instance_for_test,
)

from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TansuBroker, create_topic
from consumers.dev.sample import produce_sample
from orchestration.workloads import job as consumer_job_module
from orchestration.workloads.assets import (
    DEAD_LETTERS_CHECK,
    LAG_CHECK,
    PINNED_CHECK,
    workload_key,
)
from orchestration.workloads.heartbeat import read_heartbeats
from orchestration.workloads.job import consumer_job
from orchestration.workloads.names import CONSUMER_JOB_NAME
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from tests.helpers import wait_until
from tests.landing import landed, landing_count_safe, produce_days
from tests.support import job_handlers
from tests.support.processes import source_yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4
RECORDS = 8000
OBSERVATION_KEYS = {
    "workload",
    "replica",
    "assigned",
    "status",
    "records_completed",
    "records_failed",
    "dead_lettered",
    "parked",
    "valve_used",
    "partition_lag",
    "throughput_per_s",
    "lag",
    "lag_from",
    "lag_unknown",
    "in_flight",
    "partitions",
    "pinned_partition",
    "pinned_offset",
    "pinned_key",
    "pinned_seconds",
    "stalled_partition",
    "stalled_seconds",
}


# ---------------------------------------------------------------------------------- helpers


def write_spec(
    directory: Path,
    name: str,
    broker: TansuBroker,
    topic: str,
    handler: str = "slow",
    extra: str = "",
) -> Path:
    """A kafka spec for ``name`` whose handler is ``tests.support.job_handlers:<handler>``;
    ``extra`` lines are added, and replace a top-level field of the same name."""
    fields = {
        "handler": f"tests.support.job_handlers:{handler}",
        "ordering": "key",
        "concurrency": "20",
        "commit_interval": "100ms",
        "drain_timeout": "10s",
    }
    for line in filter(None, extra.splitlines()):
        field, _, value = line.partition(":")
        fields[field.strip()] = value.strip()
    path = directory / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n{source_yaml(broker, topic, f'{name}-group')}"
        + "".join(f"{field}: {value}\n" for field, value in fields.items())
    )
    return path


def register(instance: DagsterInstance, workload: str) -> None:
    """Add the workload's partition, as the discovery sensor would."""
    assert WORKLOAD_PARTITIONS.name is not None
    instance.add_dynamic_partitions(WORKLOAD_PARTITIONS.name, [workload])


def active_run(instance: DagsterInstance) -> DagsterRun | None:
    runs = instance.get_runs(
        filters=RunsFilter(
            job_name=CONSUMER_JOB_NAME,
            statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING],
        )
    )
    assert len(runs) <= 1, f"expected at most one active consumer run, got {runs}"
    return runs[0] if runs else None


def logged(instance: DagsterInstance, text: str) -> Callable[[], bool]:
    """Whether the newest consumer run logged a message containing ``text``."""

    def check() -> bool:
        runs = instance.get_runs(filters=RunsFilter(job_name=CONSUMER_JOB_NAME), limit=1)
        return bool(runs) and any(
            text in entry.user_message for entry in instance.all_logs(runs[0].run_id)
        )

    return check


Action = Literal["terminate", "sigint", "canceling", "force", "fail", "none"]


class Operator(threading.Thread):
    """Does to the running consumer run what Dagster and its users do, each step once its
    condition holds: ``terminate`` (Dagster's terminate: CANCELING, then one SIGINT), ``sigint``,
    ``canceling`` (the status alone), ``force`` (the UI's force termination: CANCELED).

    When a condition fails the run is still terminated (a SIGINT only if ``may_signal``: off the
    main thread the op gets none), so a broken test ends instead of hanging.
    """

    def __init__(
        self,
        instance: DagsterInstance,
        *steps: tuple[Callable[[], object], Action],
        may_signal: bool = True,
    ) -> None:
        super().__init__(name="operator", daemon=True)
        self.instance = instance
        self.steps = steps
        self.may_signal = may_signal
        self.error: BaseException | None = None
        self.done_at: list[float] = []

    def run(self) -> None:
        try:
            for i, (condition, action) in enumerate(self.steps):
                wait_until(condition, 20, message=f"condition of step {i} ({action})")
                self.act(action)
                self.done_at.append(time.monotonic())
        except BaseException as exc:
            self.error = exc
            if active_run(self.instance) is not None:
                self.act("terminate" if self.may_signal else "canceling")

    def act(self, action: Action) -> None:
        if action == "none":  # the condition did what the step is about
            return
        run = active_run(self.instance)
        assert run is not None, f"no active consumer run to {action}"
        if action in ("terminate", "canceling") and run.status == DagsterRunStatus.STARTED:
            self.instance.report_run_canceling(run)
        if action == "force":
            self.instance.report_run_canceled(run)
        if action == "fail":  # what the sensor does to a run whose heartbeat stopped
            self.instance.report_run_failed(run)
        if action in ("terminate", "sigint"):
            os.kill(os.getpid(), signal.SIGINT)


@dataclass
class Run:
    instance: DagsterInstance
    result: ExecuteInProcessResult
    status: DagsterRunStatus
    topic: str
    group: str
    #: What the handler saw: (partition, offset) lists, copied when the run ended.
    started: list[tuple[int, int]]
    finished: list[tuple[int, int]]
    cancelled: list[tuple[int, int]]
    #: What the run's HTTP endpoints and its Prometheus target file said while it ran, and the
    #: target files left after it ended.
    scraped: dict[str, Any]
    targets_after: list[str]


def execute(instance: DagsterInstance, name: str, **config: Any) -> ExecuteInProcessResult:
    return consumer_job.execute_in_process(
        partition_key=name,
        instance=instance,
        run_config={"ops": {"consume": {"config": {"observe_every_seconds": 0.2, **config}}}},
        raise_on_error=False,
    )


def handled_below_commit(
    bootstrap: str, group: str, topic: str, finished: list[tuple[int, int]]
) -> dict[int, int]:
    """Committed positions, after checking every offset below one was handled."""
    committed = committed_offsets(bootstrap, group, topic, PARTITIONS)
    handled = set(finished)
    for partition, position in committed.items():
        lost = [o for o in range(max(position, 0)) if (partition, o) not in handled]
        assert lost == [], f"partition {partition}: committed {position} past unhandled {lost[:5]}"
    return committed


def _metadata(record: EventLogRecord) -> dict[str, Any]:
    observation = record.asset_observation
    assert observation is not None
    return {k: v.value for k, v in observation.metadata.items()}


def check_evaluation(entry: EventLogEntry | None) -> AssetCheckEvaluation:
    """The evaluation an asset check's execution record holds."""
    assert entry is not None and entry.dagster_event is not None
    evaluation = entry.dagster_event.event_specific_data
    assert isinstance(evaluation, AssetCheckEvaluation), evaluation
    return evaluation


def first_unhandled(partition: int, finished: list[tuple[int, int]]) -> int:
    handled = {o for p, o in finished if p == partition}
    offset = 0
    while offset in handled:
        offset += 1
    return offset


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def workloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "workloads"
    directory.mkdir()
    monkeypatch.setenv("LANEHOUSE_WORKLOADS", str(directory))
    return directory


@pytest.fixture(scope="module")
def graceful_run(
    kafka_broker: TansuBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    """One consumer run terminated mid-stream, as Dagster does it (shared by two tests)."""
    directory = tmp_path_factory.mktemp("workloads")
    topic = f"consumer-job-graceful-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, topic, PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, RECORDS, keys=8)
    write_spec(directory, "orders", kafka_broker, topic)
    job_handlers.reset(per_record_delay=0.005)
    with instance_for_test() as inst:
        # Patched for this run only: a module fixture's patch would outlive it into later tests.
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LANEHOUSE_WORKLOADS", str(directory))
            # Only the signal may stop this run, not the status poll.
            mp.setattr(consumer_job_module, "STATUS_POLL_SECONDS", 3600.0)
            register(inst, "orders")
            key = workload_key("orders")

            def lag_observed() -> bool:
                """A report knows every partition's lag (a partial one judges no lag check)."""
                records = inst.fetch_observations(key, limit=1).records
                newest = _metadata(records[0]) if records else {}
                return newest.get("lag") is not None and newest.get("lag_unknown") is None

            targets = tmp_path_factory.mktemp("prometheus")
            mp.setenv("LANEHOUSE_PROMETHEUS_TARGETS", str(targets))
            scraped: dict[str, Any] = {}

            def scrape() -> bool:
                """GET the running run's endpoints at the address in its tags, once."""
                run = active_run(inst)
                url = run.tags.get("lanehouse/http") if run is not None else None
                if url is None:
                    return False
                if not scraped:
                    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:
                        scraped["metrics"] = reply.read().decode()
                    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as reply:
                        scraped["healthz"] = (reply.status, json.loads(reply.read()))
                    files = sorted(targets.glob("*.json"))
                    scraped["targets"] = [json.loads(f.read_text()) for f in files]
                    scraped["url"] = url
                return True

            operator = Operator(
                inst,
                (
                    lambda: len(job_handlers.finished) >= 200 and lag_observed() and scrape(),
                    "terminate",
                ),
            )
            operator.start()
            result = execute(inst, "orders")
            operator.join(5)
            assert operator.error is None, operator.error
        run = inst.get_run_by_id(result.run_id)
        assert run is not None
        yield Run(
            inst,
            result,
            run.status,
            topic,
            "orders-group",
            list(job_handlers.started),
            list(job_handlers.finished),
            list(job_handlers.cancelled),
            scraped,
            sorted(p.name for p in targets.glob("*.json")),
        )


# ---------------------------------------------------------------------------------- tests


def test_terminate_drains_commits_and_ends_the_run_successful_without_an_error(
    graceful_run: Run, kafka_broker: TansuBroker
) -> None:
    """A person's Terminate is a clean stop: SUCCESS, no error event, and it says who and how
    to resume (before, the interrupt surfaced as a red STEP_FAILURE with a stack trace)."""
    assert graceful_run.status == DagsterRunStatus.SUCCESS
    instance, run_id = graceful_run.instance, graceful_run.result.run_id
    assert logged(instance, "stop requested (SIGINT)")()
    assert logged(
        instance, "stopped by a person, drained and committed. It stays stopped: Re-execute"
    )()
    events = instance.all_logs(run_id)
    failures = [e for e in events if e.is_dagster_event and e.get_dagster_event().is_failure]
    errors = [e for e in events if int(e.level) >= logging.ERROR]  # stored as ints
    assert failures == [] and errors == [], [e.user_message for e in failures + errors]
    finished = graceful_run.finished
    assert graceful_run.cancelled == [], "a graceful stop must not cancel handler calls"
    assert sorted(graceful_run.started) == sorted(finished), "the drain left work running"
    assert 200 <= len(finished) < RECORDS, "the stop did not land mid-stream"
    committed = handled_below_commit(
        kafka_broker.bootstrap, graceful_run.group, graceful_run.topic, finished
    )
    # The final commit covers exactly the handled prefix of every partition.
    assert committed == {p: first_unhandled(p, finished) for p in range(PARTITIONS)}


def test_the_run_serves_metrics_and_health_at_the_address_in_its_tags(graceful_run: Run) -> None:
    run = graceful_run.instance.get_run_by_id(graceful_run.result.run_id)
    assert run is not None
    scraped = graceful_run.scraped
    url = run.tags["lanehouse/http"]
    assert scraped["url"] == url and url.startswith("http://127.0.0.1:")
    assert 'lanehouse_records_completed_total{workload="orders"}' in scraped["metrics"]
    status, health = scraped["healthz"]
    assert status == 200 and health["workloads"]["orders"]["ready"] is True, health
    # Prometheus found the run through its file_sd target while it ran; the file went with it.
    address = url.removeprefix("http://")
    assert scraped["targets"] == [
        [
            {
                "targets": [address],
                "labels": {"workload": "orders", "replica": "0", "dagster_run_id": run.run_id},
            }
        ]
    ]
    assert graceful_run.targets_after == []
    # And the topic's observations link to it, and say how to read the tap (open on loopback).
    key = workload_key("orders")
    [record] = graceful_run.instance.fetch_observations(key, limit=1).records
    assert _metadata(record)["metrics"] == f"{url}/metrics"
    assert _metadata(record)["tap"] == run.tags["lanehouse/tap"] == f"curl -sN {url}/tap/orders"


def test_observations_report_progress_on_the_workloads_asset(graceful_run: Run) -> None:
    key = workload_key("orders")
    records = graceful_run.instance.fetch_observations(key, limit=1000).records
    assert len(records) >= 2, "expected periodic observations and a final one"
    assert {r.run_id for r in records} == {graceful_run.result.run_id}
    metadata = [_metadata(r) for r in records]
    for entry in metadata:
        # The run's endpoint: a link to its metrics and how to read its tap.
        assert set(entry) == OBSERVATION_KEYS | {"metrics", "tap"}
        assert entry["workload"] == "orders"
    final, *earlier = metadata  # newest first
    assert final["status"] == "stopped"
    assert {e["status"] for e in earlier} == {"running"}
    assert final["records_completed"] == len(graceful_run.finished)
    assert final["in_flight"] == 0
    assert final["partitions"] == PARTITIONS
    # Each observation says which replica made it, and which partitions it held.
    assert {e["replica"] for e in metadata} == {0}
    every = ",".join(map(str, range(PARTITIONS)))
    assert every in {e["assigned"] for e in earlier} <= {"", every}  # "": before it joined
    # Lag counts from the commit position: records completed above a gap still count.
    positions = [first_unhandled(p, graceful_run.finished) for p in range(PARTITIONS)]
    assert final["lag"] == RECORDS - sum(positions)
    completed = [e["records_completed"] for e in reversed(metadata)]
    assert completed == sorted(completed), "records_completed must never go back"
    assert any(e["throughput_per_s"] > 0 for e in earlier), "no throughput while running"
    pinned = [e for e in earlier if e["pinned_offset"] is not None]
    assert pinned and all(e["pinned_seconds"] >= 0 and e["pinned_key"] for e in pinned)
    # The partition table: committed, end and lag of each partition the run held.
    rows = [row.data for row in final["partition_lag"].records]
    assert [r["partition"] for r in rows] == list(range(PARTITIONS))
    assert [r["committed"] for r in rows] == positions
    assert sum(r["end"] for r in rows) == RECORDS
    assert all(r["lag"] == r["end"] - r["committed"] for r in rows)
    assert final["valve_used"] is None and final["dead_lettered"] == 0  # no dead-letter topic


def test_the_run_judges_the_workloads_checks(graceful_run: Run) -> None:
    """Recorded once each while they held (not at every report): lag under the default 10,000
    records, no commit position held for 5 minutes, no dead-letter topic."""
    storage = graceful_run.instance.event_log_storage
    for check in (LAG_CHECK, PINNED_CHECK, DEAD_LETTERS_CHECK):
        history = storage.get_asset_check_execution_history(
            AssetCheckKey(workload_key("orders"), check), limit=10
        )
        assert len(history) == 1, (check, len(history))
        evaluation = check_evaluation(history[0].event)
        assert evaluation.passed, (check, evaluation.description)


def test_the_lag_check_turns_red_with_a_backlog_and_green_once_it_drained(
    kafka_broker: TansuBroker,
    topic_factory: Callable[..., str],
    instance: DagsterInstance,
    workloads: Path,
) -> None:
    """2,000 records waiting for a workload whose lag target is 700: the run's first report (as
    soon as its lag is known) is red, and once the backlog drained a report is green. Then the
    file's target goes up to 100,000 and 2,000 more records come: the running run judges by the
    edited file (thresholds restart nothing), so the check stays green."""
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, 2000, keys=50)
    spec = write_spec(workloads, "backlog", kafka_broker, topic, extra="checks: {lag: 700}")
    register(instance, "backlog")
    job_handlers.reset(per_record_delay=0.04)  # 20 at a time: 4 s for 2,000 records
    check = AssetCheckKey(workload_key("backlog"), LAG_CHECK)

    def results() -> list[tuple[bool, int]]:
        history = instance.event_log_storage.get_asset_check_execution_history(check, limit=50)
        out = []
        for record in reversed(history):  # oldest first
            evaluation = check_evaluation(record.event)
            lag = evaluation.metadata["lag_records"].value
            assert isinstance(lag, int), lag
            out.append((evaluation.passed, lag))
        return out

    def green_again() -> bool:
        return any(passed for passed, _ in results()[1:])

    def raise_the_target_and_produce_more() -> bool:
        spec.write_text(spec.read_text().replace("lag: 700", "lag: 100000"))
        produce_sample(kafka_broker.bootstrap, topic, 2000, keys=50, key_prefix="more")
        return True

    operator = Operator(
        instance,
        (green_again, "none"),
        (raise_the_target_and_produce_more, "none"),
        (lambda: len(job_handlers.finished) >= 4000, "canceling"),
    )
    operator.start()
    result = execute(instance, "backlog")
    operator.join(5)
    judged = results()
    assert operator.error is None, (operator.error, judged)
    assert result.success
    assert judged[0][0] is False and judged[0][1] > 700, judged  # red with the backlog
    assert judged[1][0] is True and judged[1][1] <= 700, judged  # green once drained
    assert all(passed for passed, _ in judged[1:]), judged  # the new target holds


@pytest.mark.parametrize(
    ("first", "second", "poll"),
    [("terminate", "sigint", 3600.0), ("canceling", "force", 0.1)],
    ids=["second-sigint", "force-termination"],
)
def test_a_second_request_cancels_running_calls_and_commits_only_completed(
    kafka_broker: TansuBroker,
    topic_factory: Callable[..., str],
    instance: DagsterInstance,
    workloads: Path,
    monkeypatch: pytest.MonkeyPatch,
    first: Action,
    second: Action,
    poll: float,
) -> None:
    monkeypatch.setattr(consumer_job_module, "STATUS_POLL_SECONDS", poll)
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, 400, keys=8)
    # The drain would wait a minute for the stuck records: only the second request ends it.
    write_spec(workloads, "stuck", kafka_broker, topic, "stuck", "timeout: 5m\ndrain_timeout: 60s")
    register(instance, "stuck")
    job_handlers.reset(stuck_at=3)
    stop_requested = logged(instance, "stop requested")

    def only_stuck_running() -> bool:
        running = set(job_handlers.started) - set(job_handlers.finished)
        return all(offset == 3 for _, offset in running)

    operator = Operator(
        instance,
        (lambda: any(offset == 3 for _, offset in job_handlers.started), first),
        # Once draining, and only the stuck records still run (others finish in milliseconds).
        (lambda: stop_requested() and only_stuck_running(), second),
    )
    operator.start()
    result = execute(instance, "stuck")
    ended = time.monotonic()
    operator.join(5)
    assert operator.error is None, operator.error
    assert ended - operator.done_at[1] < 10, "the second request did not end the drain"
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status == DagsterRunStatus.CANCELED
    assert logged(instance, "immediate stop")()
    stuck = {(p, o) for p, o in job_handlers.started if o == 3}
    assert stuck and set(job_handlers.cancelled) == stuck
    committed = handled_below_commit(
        kafka_broker.bootstrap, "stuck-group", topic, job_handlers.finished
    )
    for partition, offset in stuck:
        assert 0 <= committed[partition] <= offset


def test_off_the_main_thread_the_run_stops_once_it_is_canceling_and_pool_size_applies(
    kafka_broker: TansuBroker,
    topic_factory: Callable[..., str],
    instance: DagsterInstance,
    workloads: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_job_module, "STATUS_POLL_SECONDS", 0.1)
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, RECORDS, keys=8)
    write_spec(workloads, "threaded", kafka_broker, topic)
    register(instance, "threaded")
    job_handlers.reset(per_record_delay=0.005)
    results: list[ExecuteInProcessResult] = []
    worker = threading.Thread(
        target=lambda: results.append(execute(instance, "threaded", pool_size=3))
    )
    operator = Operator(
        instance, (lambda: len(job_handlers.finished) >= 200, "canceling"), may_signal=False
    )
    worker.start()
    operator.start()
    operator.join(30)
    worker.join(30)
    assert operator.error is None, operator.error
    assert not worker.is_alive(), "the run did not stop after it was marked CANCELING"
    (result,) = results
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status == DagsterRunStatus.SUCCESS
    assert logged(instance, "off the main thread")()
    assert logged(instance, "pool 'default' of 3")()
    assert job_handlers.peak == 3, "the run config's pool_size did not bound the handler calls"
    assert job_handlers.cancelled == []
    assert len(job_handlers.finished) < RECORDS
    finished = job_handlers.finished
    committed = handled_below_commit(kafka_broker.bootstrap, "threaded-group", topic, finished)
    assert committed == {p: first_unhandled(p, finished) for p in range(PARTITIONS)}


def test_the_run_beats_and_stops_itself_once_declared_dead(
    kafka_broker: TansuBroker,
    topic_factory: Callable[..., str],
    instance: DagsterInstance,
    workloads: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A heartbeat that could not be written (a storage hiccup) makes the sensor mark a live run
    FAILURE and start another: the live one must then stop, gracefully."""
    monkeypatch.setattr(consumer_job_module, "STATUS_POLL_SECONDS", 0.1)
    monkeypatch.setattr(consumer_job_module, "HEARTBEAT_SECONDS", 0.1)
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, RECORDS, keys=8)
    write_spec(workloads, "beating", kafka_broker, topic)
    register(instance, "beating")
    job_handlers.reset(per_record_delay=0.005)
    beats: list[str] = []

    def beating() -> bool:
        run = active_run(instance)
        beat = read_heartbeats(instance, ["beating"]).get(run.run_id) if run else None
        if beat is not None and beat.beat not in beats:
            beats.append(beat.beat)
        return len(beats) >= 3 and len(job_handlers.finished) >= 200

    operator = Operator(instance, (beating, "fail"), may_signal=False)
    operator.start()
    result = execute(instance, "beating")
    operator.join(5)
    assert operator.error is None, operator.error
    assert logged(instance, "the run was marked FAILURE while still running")()
    assert job_handlers.cancelled == []
    finished = job_handlers.finished
    assert len(finished) < RECORDS, "the run did not stop when it was declared dead"
    committed = handled_below_commit(kafka_broker.bootstrap, "beating-group", topic, finished)
    assert committed == {p: first_unhandled(p, finished) for p in range(PARTITIONS)}
    assert instance.get_run_by_id(result.run_id).status == DagsterRunStatus.FAILURE  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "spec", "message"),
    [
        ("ghost", None, r"no workload named 'ghost' in .*workloads"),
        ("paused", "enabled: false", r"paused\.yaml: enabled: workload 'paused' is disabled"),
        ("broken", "concurrency: 0", r"broken\.yaml: concurrency: "),
        ("nohandler", "handler: tests.nowhere:nothing", r"nohandler\.yaml: handler: "),
    ],
)
def test_a_missing_disabled_or_invalid_workload_fails_naming_it(
    kafka_broker: TansuBroker,
    instance: DagsterInstance,
    workloads: Path,
    name: str,
    spec: str | None,
    message: str,
) -> None:
    write_spec(workloads, "other", kafka_broker, "some-topic")
    if spec is not None:
        write_spec(workloads, name, kafka_broker, "some-topic", extra=spec)
    register(instance, name)
    with pytest.raises(Failure, match=message):
        consumer_job.execute_in_process(partition_key=name, instance=instance)


def test_landed_files_are_reported_as_materializations_per_day(
    kafka_broker: TansuBroker,
    instance: DagsterInstance,
    workloads: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A landing workload's run reports ``landed_<dataset>`` per day: the new rows of its reports
    add up to what the lake holds for that day, and each day's latest report counts the whole
    day (``dagster/row_count``), with offset ranges, paths and a data version."""
    topic, count = f"consumer-job-landing-{uuid.uuid4().hex[:8]}", 900
    create_topic(kafka_broker.bootstrap, topic, 2)
    produce_days(kafka_broker.bootstrap, topic, count, 2)
    lake = tmp_path / "lake"
    monkeypatch.setenv("LANEHOUSE_LAKE", str(lake))
    (workloads / "lander.yaml").write_text(
        f"name: lander\n{source_yaml(kafka_broker, topic, 'lander-group')}"
        "commit_interval: 100ms\n"
        "landing: {dataset: events, flush_rows: 100, flush_interval: 200ms}\n"
    )
    register(instance, "lander")
    operator = Operator(instance, (lambda: landing_count_safe(lake) == count, "canceling"))
    operator.start()
    started = time.monotonic()
    result = execute(instance, "lander")
    operator.join(5)
    assert operator.error is None, operator.error
    assert instance.get_run_by_id(result.run_id).status == DagsterRunStatus.SUCCESS  # type: ignore[union-attr]
    assert time.monotonic() - started < 60, "the run did not stop on its CANCELING status"

    per_day: dict[str, int] = {}
    for row in landed(lake):
        per_day[str(row["event_date"])] = per_day.get(str(row["event_date"]), 0) + 1
    key = AssetKey("landed_events")
    records = instance.fetch_materializations(key, limit=1000).records
    reported: dict[str, int] = {}
    latest: dict[str, int] = {}  # records come newest first
    for record in records:
        event = record.asset_materialization
        assert event is not None and event.partition is not None and event.tags is not None
        metadata = {k: v.value for k, v in event.metadata.items()}
        new_rows, row_count = metadata["new_rows"], metadata["dagster/row_count"]
        ranges, paths = metadata["offset_ranges"], metadata["paths"]
        assert isinstance(new_rows, int) and isinstance(row_count, int)
        assert isinstance(ranges, dict) and isinstance(paths, list)
        reported[event.partition] = reported.get(event.partition, 0) + new_rows
        latest.setdefault(event.partition, row_count)
        assert set(ranges) <= {f"{topic}[0]", f"{topic}[1]"}
        assert all(isinstance(p, str) and Path(p).exists() for p in paths)
        assert len(event.tags["dagster/data_version"]) == 16
    assert reported == per_day and sum(reported.values()) == count
    assert latest == per_day, "a day's latest report does not count the whole day"
    assert set(reported) == {"2026-11-18", "2026-11-19", "2026-11-20"}
