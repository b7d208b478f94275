"""``measure_lag`` on Tansu: records behind and the oldest one's age per partition, read without
touching the group."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from consumers import LagUnavailable, Record, WorkloadSpec
from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.scaling import measure_lag

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 20
#: Record i of a partition is stamped this many seconds after the first.
STEP = 1.0


async def handle(record: Record) -> None:
    """Never called: the spec needs a handler."""


def spec_for(bootstrap: str, topic: str, **config: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "name": "lagging",
            "handler": "tests.integration.test_scaling_lag:handle",
            "source": {
                "kind": "kafka",
                "bootstrap_servers": bootstrap,
                "topics": [topic],
                "config": {**TEST_CLIENT_CONFIG, **config},
            },
            "replicas": {"min": 1, "max": 3, "target_lag": "30s"},
        }
    )


def produce(bootstrap: str, topic: str, first_ms: int) -> None:
    """PER_PARTITION records per partition; record i at ``first_ms + i * STEP``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            stamp = first_ms + int(i * STEP * 1000)
            producer.produce(topic, value=b"%d" % i, partition=partition, timestamp=stamp)
    assert producer.flush(10) == 0


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit explicit offsets for ``group`` without joining it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        consumer.commit(offsets=tps, asynchronous=False)
    finally:
        consumer.close()


def test_lag_per_partition_from_the_committed_offsets(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    topic = topic_factory(PARTITIONS)
    first_ms = int(time.time() * 1000) - 600_000  # ten minutes ago
    produce(kafka_broker.bootstrap, topic, first_ms)
    spec = spec_for(kafka_broker.bootstrap, topic)
    group = spec.source.group  # type: ignore[union-attr]
    commit(kafka_broker.bootstrap, group, topic, {0: 5, 1: PER_PARTITION})  # [2]: none

    now = time.time()
    started = time.monotonic()
    lag = measure_lag(spec, now=now)
    took = time.monotonic() - started
    print(f"measure_lag on {PARTITIONS} partitions took {took * 1000:.0f} ms")

    assert lag.partitions == PARTITIONS
    parts = {p.partition: p for p in lag.by_partition}
    assert [(p.committed, p.end, p.behind) for p in lag.by_partition] == [
        (5, PER_PARTITION, PER_PARTITION - 5),
        (PER_PARTITION, PER_PARTITION, 0),
        (None, PER_PARTITION, PER_PARTITION),  # earliest: a new member reads everything
    ]
    assert lag.records == 2 * PER_PARTITION - 5
    age_at = {offset: now - (first_ms / 1000 + offset * STEP) for offset in (0, 5)}
    assert parts[0].oldest_age == pytest.approx(age_at[5], abs=1.0)
    assert parts[1].oldest_age is None
    assert parts[2].oldest_age == pytest.approx(age_at[0], abs=1.0)
    assert lag.oldest_age == pytest.approx(age_at[0], abs=1.0)
    assert took < 5.0  # no wait for a client timeout (10 s): a loaded machine stays under

    # Measuring joined no group and committed nothing.
    assert committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS) == {
        0: 5,
        1: PER_PARTITION,
        2: -1001,
    }

    commit(kafka_broker.bootstrap, group, topic, dict.fromkeys(range(PARTITIONS), PER_PARTITION))
    caught_up = measure_lag(spec)
    assert (caught_up.records, caught_up.oldest_age) == (0, 0.0)
    assert [p.behind for p in caught_up.by_partition] == [0] * PARTITIONS


def test_a_group_without_commits_starting_at_the_end_is_not_behind(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    topic = topic_factory(PARTITIONS)
    produce(kafka_broker.bootstrap, topic, int(time.time() * 1000))
    lag = measure_lag(spec_for(kafka_broker.bootstrap, topic, **{"auto.offset.reset": "latest"}))
    assert (lag.records, lag.oldest_age, lag.partitions) == (0, 0.0, PARTITIONS)
    assert [p.end for p in lag.by_partition] == [PER_PARTITION] * PARTITIONS


def test_an_unreachable_broker_raises_within_the_timeout() -> None:
    spec = spec_for("127.0.0.1:1", "nowhere")
    started = time.monotonic()
    with pytest.raises(LagUnavailable, match="workload 'lagging': cannot measure lag"):
        measure_lag(spec, timeout=1.0)
    assert time.monotonic() - started < 3.0  # the timeout, and room for a loaded machine


def test_pulsar_lag_is_unavailable_with_the_reason() -> None:
    spec = WorkloadSpec.model_validate(
        {
            "name": "pulsing",
            "handler": "tests.integration.test_scaling_lag:handle",
            "source": {
                "kind": "pulsar",
                "service_url": "pulsar://127.0.0.1:6650",
                "topics": ["persistent://public/default/events"],
                "subscription": "pulsing",
            },
        }
    )
    with pytest.raises(
        LagUnavailable, match="a Pulsar subscription's lag needs the broker's admin API"
    ):
        measure_lag(spec)
