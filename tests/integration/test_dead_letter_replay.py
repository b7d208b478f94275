"""Scheduled dead-letter replay: the schedule's choices on a real instance, and the replay job
run in process against Tansu."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import (
    DagsterRunStatus,
    Definitions,
    RunRequest,
    build_schedule_context,
    instance_for_test,
)

from consumers.dev.embedded.tansu import TansuBroker
from orchestration.local.instance import instance_config
from orchestration.workloads.names import REPLAY_RUN_TAG as REPLAY_TAG
from orchestration.workloads.partitions import WORKLOAD_PARTITIONS
from orchestration.workloads.replay_job import dead_letter_replay_schedule, replay_job
from tests.support.dead_letters import Dead, read_all, spec_text, write

pytestmark = pytest.mark.integration

AT = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def opted_in(text: str, enabled: bool = True) -> str:
    text = text.replace("dead_letter:\n", "dead_letter:\n  scheduled_replay: true\n")
    return text + ("" if enabled else "enabled: false\n")


def test_the_schedule_requests_one_run_per_opted_in_registered_kafka_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEHOUSE_WORKLOADS", str(tmp_path))
    bootstrap = "127.0.0.1:9092"
    files = {
        "wanted": opted_in(spec_text(bootstrap, "wanted", "a.in", "a.dlq")),
        "paused": opted_in(spec_text(bootstrap, "paused", "b.in", "b.dlq"), enabled=False),
        "manual": spec_text(bootstrap, "manual", "c.in", "c.dlq"),
        "unregistered": opted_in(spec_text(bootstrap, "unregistered", "d.in", "d.dlq")),
    }
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    with instance_for_test() as instance:
        instance.add_dynamic_partitions(
            str(WORKLOAD_PARTITIONS.name), ["wanted", "paused", "manual"]
        )
        defs = Definitions(jobs=[replay_job], schedules=[dead_letter_replay_schedule])
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=AT, repository_def=defs.get_repository_def()
        )
        data = dead_letter_replay_schedule.evaluate_tick(context)
        requests = data.run_requests or []
        assert [(r.partition_key, r.run_key) for r in requests] == [
            ("wanted", f"wanted:{AT.isoformat()}")
        ]
        assert isinstance(requests[0], RunRequest) and requests[0].tags[REPLAY_TAG] == "wanted"

        (tmp_path / "wanted.yaml").unlink()
        skipped = dead_letter_replay_schedule.evaluate_tick(context)
        assert not skipped.run_requests
        assert "scheduled_replay: true" in (skipped.skip_message or "")


def test_the_replay_job_republishes_a_workloads_dead_letters_once(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = kafka_broker.bootstrap
    dlq, source = topic_factory(1), topic_factory(1)
    monkeypatch.setenv("LANEHOUSE_WORKLOADS", str(tmp_path))
    (tmp_path / "orders.yaml").write_text(opted_in(spec_text(bootstrap, "orders", source, dlq)))
    write(
        bootstrap,
        dlq,
        [
            Dead("orders", b"o1", b"v1", source, 0, 10),
            Dead("payments", b"p1", b"w1", "payments.in"),
            Dead("orders", b"o2", b"v2", source, 0, 11),
        ],
    )
    with instance_for_test() as instance:
        instance.add_dynamic_partitions(str(WORKLOAD_PARTITIONS.name), ["orders"])
        first = replay_job.execute_in_process(partition_key="orders", instance=instance)
        assert first.success
        assert sorted(r[2] for r in read_all(bootstrap, source, 1)) == [b"v1", b"v2"]
        logs = [e.user_message for e in instance.all_logs(first.run_id)]
        assert any("replayed 2; exhausted 0" in m for m in logs), logs

        again = replay_job.execute_in_process(partition_key="orders", instance=instance)
        assert again.success
        assert len(read_all(bootstrap, source, 1)) == 2, "a second replay republished again"

        (tmp_path / "orders.yaml").write_text(spec_text(bootstrap, "orders", source, None))
        nothing = replay_job.execute_in_process(
            partition_key="orders", instance=instance, raise_on_error=False
        )
        run = instance.get_run_by_id(nothing.run_id)
        assert run is not None and run.status == DagsterRunStatus.FAILURE
        failure = nothing.failure_data_for_node("replay")
        assert failure is not None and "sets no dead_letter topic" in str(failure.error)


def test_the_instance_runs_one_replay_per_workload_at_a_time() -> None:
    limits = instance_config()["concurrency"]["runs"]["tag_concurrency_limits"]
    assert {
        "key": REPLAY_TAG,
        "value": {"applyLimitPerUniqueValue": True},
        "limit": 1,
    } in limits
