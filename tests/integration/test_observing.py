"""A workload's asset is observable: Observe on its page reads its figures from the broker now
(a still workload's phase and lag), and Dagster offers no Materialize for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from dagster import DagsterInstance

from consumers.dev.embedded.tansu import TansuBroker
from orchestration.definitions import build_definitions
from orchestration.workloads.assets import workload_key
from tests.conftest import TopicFactory
from tests.integration.test_workloads_cli import SPEC, platform, stop_by_a_person

pytestmark = pytest.mark.integration

__all__ = ["platform"]  # the fixture, shared with the CLI's tests


def test_observing_a_stopped_workload_reads_its_phase_and_lag_from_the_broker(
    platform: tuple[Path, Path],
    kafka_broker: TansuBroker,
    topic_factory: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, specs = platform
    topic = topic_factory(1)
    spec = SPEC.format(name="halted", enabled="true").replace("halted-in", topic)
    (specs / "halted.yaml").write_text(spec.replace("127.0.0.1:9092", kafka_broker.bootstrap))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for _ in range(12):
        producer.produce(topic, b"v", partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "lanehouse.halted"}
    )
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    consumer.close()
    stop_by_a_person(state, "halted")
    monkeypatch.setenv("LANEHOUSE_WORKLOADS", str(specs))

    defs = build_definitions(specs)
    node = defs.resolve_asset_graph().get(workload_key("halted"))
    assert node.is_observable and not node.is_materializable  # Observe, not Materialize
    job = defs.resolve_implicit_global_asset_job_def()
    with DagsterInstance.from_config(str((state / "dagster").resolve())) as instance:
        result = job.execute_in_process(instance=instance, asset_selection=[node.key])
        assert result.success
        [record] = instance.fetch_observations(workload_key("halted"), limit=1).records
    assert record.asset_observation is not None
    figures = {k: v.value for k, v in record.asset_observation.metadata.items()}
    assert (figures["status"], figures["lag"], figures["lag_from"]) == ("stopped", 8, "broker")
    assert (figures["throughput_per_s"], figures["in_flight"]) == (0.0, 0)
