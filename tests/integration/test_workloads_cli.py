"""``lanehouse workloads list|status`` against a Dagster instance on disk, without a platform.

The running platform's view (runs, progress, heartbeats) is checked in ``test_up.py``; here the
phases that need no run, a person's stop recorded in the sensor cursor, a stopped workload's
figures read from a real broker, and the error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from dagster import (
    AssetObservation,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
)
from dagster._core.events import AssetObservationData
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorStatus,
    InstigatorType,
    SensorInstigatorData,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from typer.testing import CliRunner

from consumers.dev.embedded.tansu import TansuBroker
from orchestration.cli import app
from orchestration.local.instance import prepare_dagster_home
from orchestration.workloads.assets import workload_key
from orchestration.workloads.discovery_model import DiscoveryState, LastRun, WorkloadState
from tests.conftest import TopicFactory
from tests.support.discovery_defs import stand_in

pytestmark = pytest.mark.integration

SPEC = """\
name: {name}
source: {{kind: kafka, bootstrap_servers: 127.0.0.1:9092, topics: [{name}-in]}}
handler: consumers.dev.examples:enrich
enabled: {enabled}
"""


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["workloads", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


@pytest.fixture
def platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    state, specs = tmp_path / "state", tmp_path / "workloads"
    specs.mkdir()
    prepare_dagster_home(state)
    (specs / "fresh.yaml").write_text(SPEC.format(name="fresh", enabled="true"))
    (specs / "paused.yaml").write_text(SPEC.format(name="paused", enabled="false"))
    (specs / "broken.yaml").write_text("name: broken\nsource: {kind: kafka}\n")
    (specs / "parked.yaml").write_text(SPEC.format(name="parked", enabled="true"))
    return state, specs


def stop_by_a_person(state: Path, workload: str) -> str:
    """A run of ``workload`` a person terminated, as the sensor's cursor records it."""
    with DagsterInstance.from_config(str((state / "dagster").resolve())) as instance:
        run = instance.create_run_for_job(
            stand_in, tags={"dagster/partition": workload}, status=DagsterRunStatus.CANCELED
        )
        last = LastRun(
            run_id=run.run_id, storage_id=1, status="CANCELED", by_sensor=True, settled=True
        )
        cursor = DiscoveryState(
            workloads={workload: WorkloadState(generation=1, last=last, stopped_by_user=True)}
        ).to_cursor()
        instance.add_instigator_state(
            InstigatorState(
                origin=_origin(),
                instigator_type=InstigatorType.SENSOR,
                status=InstigatorStatus.RUNNING,
                instigator_data=SensorInstigatorData(cursor=cursor),
            )
        )
        return run.run_id


def _origin() -> RemoteInstigatorOrigin:
    location = ManagedGrpcPythonEnvCodeLocationOrigin(
        LoadableTargetOrigin(module_name="orchestration.definitions"), location_name="lanehouse"
    )
    return RemoteInstigatorOrigin(
        RemoteRepositoryOrigin(location, "__repository__"), "workload_discovery"
    )


def test_phases_from_specs_and_the_sensor_cursor(platform: tuple[Path, Path]) -> None:
    state, specs = platform
    run_id = stop_by_a_person(state, "parked")
    code, output = invoke("list", "--json", "--state-dir", str(state), "--specs", str(specs))
    assert code == 0, output
    data = json.loads(output)
    assert data["sensor"] == "RUNNING"
    phases = {w["name"]: (w["phase"], w["valid"]) for w in data["workloads"]}
    assert phases == {
        "broken": ("invalid", False),
        "fresh": ("new", True),
        "parked": ("stopped", True),
        "paused": ("disabled", True),
    }
    (parked,) = [w for w in data["workloads"] if w["name"] == "parked"]
    assert parked["run"]["run_id"] == run_id
    assert "re-execute its stopped run in the UI" in parked["note"]

    code, output = invoke("status", "broken", "--state-dir", str(state), "--specs", str(specs))
    assert code == 0, output
    assert "INVALID" in output and "source.bootstrap_servers" in output


def test_unknown_workload_and_missing_instance_exit_2(
    platform: tuple[Path, Path], tmp_path: Path
) -> None:
    state, specs = platform
    code, output = invoke("status", "ghost", "--state-dir", str(state), "--specs", str(specs))
    assert code == 2 and "no workload named 'ghost'" in output
    code, output = invoke("list", "--state-dir", str(tmp_path / "nowhere"))
    assert code == 2 and "no Dagster instance at" in output and "lanehouse up" in output


def observe(state: Path, run_id: str, workload: str, metadata: dict[str, float | str]) -> None:
    """An observation of the workload's asset by ``run_id``, as its consumer run reports."""
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_OBSERVATION.value,
        job_name=stand_in.name,
        event_specific_data=AssetObservationData(
            AssetObservation(asset_key=workload_key(workload), metadata=metadata)
        ),
    )
    with DagsterInstance.from_config(str((state / "dagster").resolve())) as instance:
        instance.report_dagster_event(event, run_id=run_id)


def test_a_stopped_workload_shows_the_brokers_lag_not_its_last_report(
    platform: tuple[Path, Path], kafka_broker: TansuBroker, topic_factory: TopicFactory
) -> None:
    """Before: 45 s after a Terminate, ``list`` showed ``msg/s 37.2, lag 0, reported 45s ago``
    (the run's last report) while the group was 930 records behind."""
    state, specs = platform
    topic = topic_factory(2)
    spec = SPEC.format(name="halted", enabled="true").replace("halted-in", topic)
    (specs / "halted.yaml").write_text(spec.replace("127.0.0.1:9092", kafka_broker.bootstrap))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(30):
        producer.produce(topic, b"v", partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "lanehouse.halted"}
    )
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 5)], asynchronous=False
    )
    consumer.close()
    run_id = stop_by_a_person(state, "halted")
    observe(state, run_id, "halted", {"status": "running", "throughput_per_s": 37.2, "lag": 0})

    code, output = invoke("list", "--json", "--state-dir", str(state), "--specs", str(specs))
    assert code == 0, output
    [halted] = [w for w in json.loads(output)["workloads"] if w["name"] == "halted"]
    [progress] = halted["progress"]
    assert halted["phase"] == "stopped"
    assert (progress["lag"], progress["lag_from"], progress["throughput_per_s"]) == (
        15,
        "broker",
        None,
    ), progress
    code, output = invoke("list", "--state-dir", str(state), "--specs", str(specs))
    [line] = [line for line in output.splitlines() if "halted" in line]
    assert "broker, now" in line and "37.2" not in line, output
    code, output = invoke("status", "halted", "--state-dir", str(state), "--specs", str(specs))
    assert "lag        15 on" in output and "no replica runs" in output, output
