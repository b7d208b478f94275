"""The host job on a real Tansu broker and a real Dagster instance, executed in process: the
members the sensor writes are picked up at runtime (added ones start, removed ones drain and
commit, neighbours never restart), one member's failure stops it alone and is reported, and a
terminate drains every member and ends the run SUCCESS."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter, instance_for_test

from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from orchestration.workloads.host_job import HOST_PARTITIONS, host_job
from orchestration.workloads.host_store import read_statuses, write_members
from orchestration.workloads.names import HOST_JOB_NAME
from orchestration.workloads.registry import read_registry
from tests.conftest import TopicFactory
from tests.helpers import wait_until
from tests.support import host_handlers
from tests.support.processes import source_yaml

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HOST = "host.0"
PARTITIONS = 2


def write(directory: Path, name: str, broker: TansuBroker, topic: str, handler: str) -> None:
    (directory / f"{name}.yaml").write_text(
        f"name: {name}\n{source_yaml(broker, topic, f'{name}-group')}"
        f"handler: tests.support.host_handlers:{handler}\n"
        "commit_interval: 100ms\ndrain_timeout: 10s\n"
    )


def logs(instance: DagsterInstance) -> list[str]:
    runs = instance.get_runs(RunsFilter(job_name=HOST_JOB_NAME), limit=1)
    return [e.user_message for e in instance.all_logs(runs[0].run_id)] if runs else []


def logged(instance: DagsterInstance, text: str) -> Callable[[], bool]:
    return lambda: any(text in line for line in logs(instance))


def test_a_host_follows_its_members_and_isolates_a_failure(
    tmp_path: Path,
    kafka_broker: TansuBroker,
    topic_factory: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = tmp_path / "workloads"
    directory.mkdir()
    monkeypatch.setenv("LANEHOUSE_WORKLOADS", str(directory))
    monkeypatch.setenv("LANEHOUSE_LAKE", str(tmp_path / "lake"))
    bootstrap = kafka_broker.bootstrap
    topics = {name: topic_factory(PARTITIONS) for name in ("alpha", "beta", "gamma")}
    write(directory, "alpha", kafka_broker, topics["alpha"], "record")
    write(directory, "beta", kafka_broker, topics["beta"], "record")
    write(directory, "gamma", kafka_broker, topics["gamma"], "misuse")
    hashes = {name: entry.hash for name, entry in read_registry(directory).workloads.items()}
    for name in ("alpha", "beta"):
        produce_sample(bootstrap, topics[name], 300, keys=6)
    produce_sample(bootstrap, topics["gamma"], 40, keys=1)  # one partition gets them all
    host_handlers.reset()

    def members(*names: str) -> None:
        write_members(instance, {HOST: {name: hashes[name] for name in names}})

    def committed(name: str) -> int:
        offsets = committed_offsets(bootstrap, f"{name}-group", topics[name], PARTITIONS)
        return sum(max(o, 0) for o in offsets.values())

    errors: list[BaseException] = []

    def operate() -> None:
        """What the sensor and a person do while the host runs, each once its condition holds."""
        try:
            wait_until(lambda: host_handlers.count(topics["alpha"]) == 300, 60, message="alpha")
            members("alpha", "beta")
            wait_until(lambda: host_handlers.count(topics["beta"]) == 300, 60, message="beta")
            members("beta", "gamma")  # alpha leaves, gamma (which will fail) arrives
            wait_until(logged(instance, "workload alpha stopped (removed)"), 60)
            assert committed("alpha") == 300
            wait_until(logged(instance, "workload gamma stopped by an error"), 60)
            produce_sample(bootstrap, topics["beta"], 100, keys=6)
            wait_until(lambda: host_handlers.count(topics["beta"]) == 400, 60, message="beta on")
        except BaseException as exc:
            errors.append(exc)
        finally:
            [run] = instance.get_runs(RunsFilter(job_name=HOST_JOB_NAME))
            instance.report_run_canceling(run)
            os.kill(os.getpid(), signal.SIGINT)  # Dagster's terminate: CANCELING, then SIGINT

    with instance_for_test() as instance:
        instance.add_dynamic_partitions(HOST_PARTITIONS.name or "", [HOST])
        members("alpha")
        operator = threading.Thread(target=operate, daemon=True)
        operator.start()
        result = host_job.execute_in_process(
            partition_key=HOST,
            instance=instance,
            run_config={"ops": {"host": {"config": {"observe_every_seconds": 0.5}}}},
            raise_on_error=False,
        )
        operator.join(10)
        assert errors == [], errors
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.status == DagsterRunStatus.SUCCESS
        lines = logs(instance)
        # Each member started once: arrivals and departures restarted no neighbour.
        for name in ("alpha", "beta"):
            assert sum(f"workload {name} started" in line for line in lines) == 1, name
        status = read_statuses(instance, ["alpha", "beta", "gamma"])
        assert status["alpha"].state == status["beta"].state == "stopped"
        assert status["gamma"].state == "waiting" and status["gamma"].failures >= 1
        assert "no dead-letter topic" in (status["gamma"].error or "")
        assert status["gamma"].run_id == result.run_id
    assert committed("beta") == 400
    # gamma stopped at its bad record: nothing at or above it is committed.
    assert committed("gamma") == host_handlers.bad_offset
    assert host_handlers.count(topics["gamma"]) == host_handlers.bad_offset
