"""deploy/dagster.yaml against a real PostgreSQL: the compose stack's Dagster instance loads from
the file as shipped (only the environment differs), and runs, event logs and Lanehouse's
heartbeats really land in PostgreSQL tables (not in a SQLite file beside the config)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from dagster import DagsterInstance, DagsterRunStatus, job, op
from sqlalchemy.engine import make_url

from orchestration.lake.runs import SPARK_RUN_TAG
from orchestration.workloads.heartbeat import heartbeat_key, read_heartbeats, write_heartbeat
from orchestration.workloads.names import REPLAY_RUN_TAG
from tests.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[2]


@op
def answer() -> int:
    return 42


@job
def tiny() -> None:
    answer()


@pytest.fixture
def instance(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[DagsterInstance, str]]:
    """deploy/dagster.yaml, copied unchanged into a fresh DAGSTER_HOME, on a fresh database."""
    url = postgres_server.create_database()
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    env = {
        "POSTGRES_HOST": postgres_server.host,
        "POSTGRES_PORT": str(postgres_server.port),
        "POSTGRES_USER": postgres_server.user,
        "POSTGRES_PASSWORD": "unused-by-trust-auth",
        "POSTGRES_DB": str(make_url(url).database),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    dagster_instance = DagsterInstance.from_config(str(home))
    try:
        yield dagster_instance, url
    finally:
        dagster_instance.dispose()
    assert not list(home.glob("**/*.db")), "a SQLite database appeared beside the config"


def test_runs_and_event_logs_are_stored_in_postgres(
    instance: tuple[DagsterInstance, str],
) -> None:
    dagster_instance, url = instance
    result = tiny.execute_in_process(instance=dagster_instance)
    assert result.success

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            status = conn.execute(
                sqlalchemy.text("SELECT status FROM runs WHERE run_id = :id"), {"id": result.run_id}
            ).scalar_one()
            events = conn.execute(
                sqlalchemy.text("SELECT count(*) FROM event_logs WHERE run_id = :id"),
                {"id": result.run_id},
            ).scalar_one()
    finally:
        engine.dispose()
    assert status == DagsterRunStatus.SUCCESS.value
    assert events > 0


def test_heartbeats_go_to_postgres_and_read_back(instance: tuple[DagsterInstance, str]) -> None:
    """The discovery sensor tells live consumer runs from dead ones by these."""
    dagster_instance, url = instance
    write_heartbeat(dagster_instance, "clickstream", "run-1", beat=7)

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            stored = conn.execute(
                sqlalchemy.text("SELECT value FROM kvs WHERE key = :key"),
                {"key": heartbeat_key("clickstream")},
            ).scalar_one()
    finally:
        engine.dispose()
    assert '"beat":7' in stored
    assert set(read_heartbeats(dagster_instance, ["clickstream"])) == {"run-1"}


def test_the_run_queue_never_fills_with_consumer_runs(
    instance: tuple[DagsterInstance, str],
) -> None:
    """The limits of orchestration/local/instance.py hold on the production instance too."""
    dagster_instance, _ = instance
    queue = dagster_instance.get_concurrency_config().run_queue_config
    assert queue is not None
    assert queue.max_concurrent_runs == -1
    limits = {limit["key"]: limit["limit"] for limit in queue.tag_concurrency_limits}
    assert limits == {SPARK_RUN_TAG: 1, REPLAY_RUN_TAG: 1}
    assert type(dagster_instance.run_coordinator).__name__ == "QueuedRunCoordinator"
    assert dagster_instance.event_log_storage.supports_global_concurrency_limits
