"""``lanehouse workloads list|status`` against a Dagster instance on disk, without a platform.

The running platform's view (runs, progress, heartbeats) is checked in ``test_up.py``; here the
phases that need no run, a person's stop recorded in the sensor cursor, and the error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus
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

from orchestration.cli import app
from orchestration.local.instance import prepare_dagster_home
from orchestration.workloads.cursor import DiscoveryState, LastRun, WorkloadState
from tests.integration.discovery_defs import stand_in

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
