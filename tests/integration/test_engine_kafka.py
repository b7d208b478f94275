"""The engine in one process against a real broker (Tansu): volume, slow handlers, shared pools,
odd records."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
from pathlib import Path

import pytest

from consumers import ConsumerApp, Record, RunnerSettings, Workload
from consumers.backends.kafka.consumer import kafka_consumer_factory, kafka_identities
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.dev.examples import OrderCheck
from consumers.dev.sample import produce_sample
from tests.backends import TansuBackend, assert_all_committed, run_sampling_shares
from tests.conftest import TopicFactory

pytestmark = pytest.mark.integration


def factory(broker: TansuBroker, group: str, **config: object):
    return kafka_consumer_factory(
        {**TEST_CLIENT_CONFIG, "bootstrap.servers": broker.bootstrap, "group.id": group, **config}
    )


async def test_100k_keyed_records_with_random_latency(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    topic = topic_factory(8)
    count = 100_000
    produce_sample(kafka_broker.bootstrap, topic, count, keys=1000)
    order = OrderCheck()
    rng = random.Random(11)

    async def handler(rec: Record) -> None:
        if rng.random() < 0.05:
            await asyncio.sleep(rng.random() * 0.005)
        order.observe(rec.key, rec.json()["seq"])

    settings = RunnerSettings(name="volume", concurrency=500, commit_interval=0.2)
    app = ConsumerApp([Workload(settings, handler, [topic], factory(kafka_broker, "g-volume"))])
    [summary] = await app.run(until_idle=1.5)

    assert order.violations == []
    assert order.handled == count == summary.counters["completed"]
    assert summary.counters["failed"] == 0
    assert_all_committed(kafka_broker.bootstrap, "g-volume", topic, 8)


async def test_handler_slower_than_max_poll_interval_keeps_membership(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    topic = topic_factory(1)
    produce_sample(kafka_broker.bootstrap, topic, 3, keys=1)
    handled: list[int] = []

    async def slow(rec: Record) -> None:
        await asyncio.sleep(3.0)  # each call outlives max.poll.interval.ms below
        handled.append(rec.offset)

    settings = RunnerSettings(name="slow", ordering="partition", concurrency=1, timeout=10)
    client = factory(kafka_broker, "g-slow", **{"max.poll.interval.ms": 2500})
    app = ConsumerApp([Workload(settings, slow, [topic], client)])
    [summary] = await app.run(until_idle=1.0)

    assert handled == [0, 1, 2], "a record was handled twice: the member was kicked"
    assert summary.counters["rebalances"] == 1
    assert_all_committed(kafka_broker.bootstrap, "g-slow", topic, 1)


async def test_two_workloads_share_one_pool_by_weight(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    heavy_topic, light_topic = topic_factory(4), topic_factory(4)
    for topic in (heavy_topic, light_topic):
        produce_sample(kafka_broker.bootstrap, topic, 4000, keys=400)

    async def handler(rec: Record) -> None:
        await asyncio.sleep(0.02)

    def workload(name: str, topic: str, weight: float) -> Workload:
        settings = RunnerSettings(name=name, concurrency=100, weight=weight)
        return Workload(settings, handler, [topic], factory(kafka_broker, f"g-{name}"), "shared")

    app = ConsumerApp(
        [workload("heavy", heavy_topic, 3), workload("light", light_topic, 1)],
        pool_sizes={"shared": 20},
    )
    summaries, samples = await run_sampling_shares(app, "heavy", "light")

    assert all(s.counters["completed"] == 4000 for s in summaries)
    assert len(samples) >= 50, "both workloads were never contending at once"
    assert all(heavy + light <= 20 for heavy, light in samples), "pool size exceeded"
    heavy = statistics.mean(h for h, _ in samples)
    light = statistics.mean(lt for _, lt in samples)
    assert 14 <= heavy <= 16 and 4 <= light <= 6, f"shares {heavy:.1f}/{light:.1f}, want 15/5"


async def test_null_key_empty_value_and_5mb_value(kafka_broker: TansuBroker) -> None:
    backend = TansuBackend(kafka_broker)
    topic = backend.make_topic(1)
    big = b'"' + b"x" * (5 * 1024 * 1024) + b'"'  # a 5 MB JSON string
    backend.produce(topic, [(None, b'{"a": 1}'), (b"k", b""), (b"k", big), (b"k", None)])
    seen: list[tuple[bytes | None, int | None, object]] = []

    async def handler(rec: Record) -> None:
        seen.append((rec.key, None if rec.value is None else len(rec.value), rec.json()))

    settings = RunnerSettings(name="odd")
    app = ConsumerApp([Workload(settings, handler, [topic], backend.factory("g-odd"))])
    [summary] = await app.run(until_idle=1.0)

    assert summary.counters["failed"] == 0
    assert seen[0] == (None, 8, {"a": 1})
    assert seen[1][2] is None and seen[3][2] is None  # empty value and tombstone: no JSON
    assert seen[2][2] == "x" * (5 * 1024 * 1024)
    assert [(k, n) for k, n, _ in seen] == [(None, 8), (b"k", 0), (b"k", len(big)), (b"k", None)]
    assert_all_committed(kafka_broker.bootstrap, "g-odd", topic, 1)


async def test_transactional_topic_is_committed_to_its_log_end_when_idle(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    """A transaction ends in a marker offset no consumer is given: after the last record the
    committed offset must still reach the log end, or every lag monitor reads 1 forever."""
    from confluent_kafka import Producer

    topic = topic_factory(2)
    producer = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"tx-{topic}"}
    )
    producer.init_transactions(10)
    for txn in range(20):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, b"{}", key=b"k%d" % (i % 10), partition=i % 2)
        if txn % 4 == 3:
            producer.abort_transaction(10)
        else:
            producer.commit_transaction(10)
    producer.flush(10)
    del producer  # its coordinator connection would outlive the test
    handled: list[int] = []

    async def handler(rec: Record) -> None:
        handled.append(rec.offset)

    settings = RunnerSettings(name="txn", concurrency=50, commit_interval=0.2)
    client = factory(kafka_broker, "g-txn", **{"isolation.level": "read_committed"})
    [summary] = await ConsumerApp([Workload(settings, handler, [topic], client)]).run(
        until_idle=2.5
    )

    assert summary.counters["completed"] == len(handled) >= 750
    assert_all_committed(kafka_broker.bootstrap, "g-txn", topic, 2)


def librdkafka_clients() -> int:
    """librdkafka instances alive in this process: each has one thread named rdk:main."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names.count("rdk:main")


def test_workloads_of_one_cluster_share_one_admin_client(
    kafka_broker: TansuBroker, topic_factory: TopicFactory
) -> None:
    """Each workload's watch on replaced topics looks its topics up every few seconds; 50
    workloads of a host run used to hold 50 admin clients (about 200 threads)."""
    topic = topic_factory(partitions=1)
    config = {"bootstrap.servers": kafka_broker.bootstrap, **TEST_CLIENT_CONFIG}
    before = librdkafka_clients()
    lookups = [kafka_identities(dict(config)) for _ in range(5)]
    ids = {lookup([topic])[topic].topic_id for lookup in lookups}
    assert len(ids) == 1
    assert librdkafka_clients() == before + 1
    other = kafka_identities({**config, "client.id": "another"})
    assert other([topic])[topic].topic_id in ids
    assert librdkafka_clients() == before + 2
    del lookups, other
    gc.collect()
    assert librdkafka_clients() == before, "the shared client outlived its workloads"
