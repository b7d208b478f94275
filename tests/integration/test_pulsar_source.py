"""The engine's Pulsar path on a real pulsar-lite broker: what the shared contract suites do not
cover (partitioned topics, redeliveries, acknowledgement modes, backlog, kill -9, a Kafka and a
Pulsar workload in one pool)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from consumers import BrokerError, ConsumerApp, DeliveryError, Record, RunnerSettings, Workload
from consumers.backends.metadata import encode_done
from consumers.backends.pulsar.client import PulsarSettings
from consumers.backends.pulsar.consumer import (
    RECEIVE_BATCH,
    PulsarConsumer,
    pulsar_consumer_factory,
)
from consumers.backends.pulsar.producer import PulsarProducer
from consumers.dev.embedded.child import free_port
from consumers.dev.embedded.pulsar import PulsarLiteBroker, start_pulsar_lite
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from tests.backends import (
    PulsarBackend,
    TansuBackend,
    keyed_stream,
    run_sampling_shares,
    unacknowledged,
)
from tests.helpers import wait_until
from tests.support.processes import assert_complete, finish, lines, start_consumer, write_spec

pytestmark = pytest.mark.integration


@pytest.fixture
def backend(pulsar_broker: PulsarLiteBroker) -> PulsarBackend:
    return PulsarBackend(pulsar_broker)


@pytest.fixture(scope="module")
def partitioned_broker() -> Iterator[PulsarLiteBroker]:
    """pulsar-lite creating every topic with three partitions (its only way to partition)."""
    broker = start_pulsar_lite(default_partitions=3)
    try:
        yield broker
    finally:
        broker.stop()


class OrderCheck:
    """A handler recording per-key sequence violations and every value it saw."""

    def __init__(self, delay: float = 0.0) -> None:
        self.last: dict[bytes | None, int] = {}
        self.violations: list[tuple[bytes | None, int | None, int]] = []
        self.seen: list[bytes | None] = []
        self.partitions: set[tuple[str, int]] = set()
        self.delay = delay

    async def __call__(self, rec: Record) -> None:
        seq = rec.json()["seq"]
        if seq != self.last.get(rec.key, -1) + 1:
            self.violations.append((rec.key, self.last.get(rec.key), seq))
        self.last[rec.key] = seq
        if self.delay:
            await asyncio.sleep(self.delay)
        self.seen.append(rec.value)
        self.partitions.add((rec.topic, rec.partition))


def workload(
    settings: PulsarSettings, topic: str, handler: Any, name: str = "pulsar", **kw: Any
) -> Workload:
    return Workload(
        RunnerSettings(name=name, **kw), handler, [topic], pulsar_consumer_factory(settings)
    )


def held_consumer(backend: PulsarBackend, topic: str, group: str) -> PulsarConsumer:
    consumer = PulsarConsumer(backend.settings(group), on_commit=lambda *_: None)
    consumer.subscribe([topic])
    return consumer


def consume_exactly(consumer: PulsarConsumer, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.consume(count - len(got), 0.2)
    assert len(got) == count
    return got


async def test_partitioned_topic_keeps_key_order_and_acknowledges_everything(
    partitioned_broker: PulsarLiteBroker,
) -> None:
    backend = PulsarBackend(partitioned_broker)
    topic = backend.make_topic(3)
    records = keyed_stream(3000, keys=60, seed=21)
    backend.produce(topic, records)
    check = OrderCheck()
    app = ConsumerApp([workload(backend.settings("g-parts"), topic, check, concurrency=50)])
    [summary] = await app.run(until_idle=1.0)

    assert check.violations == []
    assert Counter(check.seen) == Counter(v for _, v in records)  # values: bytes | None
    assert check.partitions == {(topic, 0), (topic, 1), (topic, 2)}
    assert summary.counters["completed"] == 3000
    assert unacknowledged(partitioned_broker, "g-parts", topic) == []


def test_a_redelivery_of_a_held_message_is_dropped(backend: PulsarBackend) -> None:
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(10, keys=2))
    consumer = held_consumer(backend, topic, "g-redeliver")
    try:
        first = consume_exactly(consumer, 10)
        assert [m.offset() for m in first] == list(range(10))
        consumer._require().redeliver_unacknowledged_messages()
        deadline = time.monotonic() + 20
        while consumer.redelivered < 10 and time.monotonic() < deadline:
            assert consumer.consume(100, 0.2) == [], "a held message came back as a new record"
        assert consumer.redelivered == 10
        consumer.commit([(topic, 0, 10, "")], asynchronous=False)
    finally:
        consumer.close()
    assert unacknowledged(backend.broker, "g-redeliver", topic) == []


def test_commit_acknowledges_below_the_position_and_done_offsets_above(
    backend: PulsarBackend,
) -> None:
    """Position 4 with done-offset metadata for 6 and 8: exactly 4, 5, 7 and 9 stay unacked."""
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(10, keys=10))
    consumer = held_consumer(backend, topic, "g-holes")
    try:
        received = consume_exactly(consumer, 10)
        consumer.commit([(topic, 0, 4, encode_done(4, {6, 8}))], asynchronous=False)
    finally:
        consumer.close()
    assert [m.offset() for m in received] == list(range(10))
    unacked = unacknowledged(backend.broker, "g-holes", topic)
    assert backend.produced_indices(topic, unacked) == [4, 5, 7, 9]


def test_consume_takes_received_messages_in_batches_and_never_more_than_asked(
    backend: PulsarBackend,
) -> None:
    """``batch_receive`` while a whole batch fits in what is asked, then single messages:
    every message once, in order, and no call returns more than it was asked for (a message
    received beyond it could not be given back)."""
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(3 * RECEIVE_BATCH, keys=5))
    consumer = held_consumer(backend, topic, "g-batches")
    asked = RECEIVE_BATCH + RECEIVE_BATCH // 2  # one batch fits, the rest one at a time
    got: list[Any] = []
    sizes: list[int] = []
    try:
        deadline = time.monotonic() + 20
        while len(got) < 3 * RECEIVE_BATCH and time.monotonic() < deadline:
            taken = consumer.consume(asked, 0.5)
            sizes.append(len(taken))
            got += taken
    finally:
        consumer.close()
    assert [m.offset() for m in got] == list(range(3 * RECEIVE_BATCH))
    assert max(sizes) <= asked


def test_backlog_estimate_counts_what_was_not_received_yet(backend: PulsarBackend) -> None:
    topic = backend.make_topic(1)
    backend.produce(topic, keyed_stream(100, keys=5))  # unbatched: one message per entry
    consumer = held_consumer(backend, topic, "g-lag")
    try:
        assert consumer.high_watermark((topic, 0)) == -1
        consume_exactly(consumer, 10)
        assert consumer.high_watermark((topic, 0)) == 100
    finally:
        consumer.close()


@pytest.mark.parametrize("subscription_type", ["exclusive", "failover", "key_shared"])
async def test_other_subscription_types_lightly(
    backend: PulsarBackend, subscription_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pulsar-lite is unreliable for these types under concurrent load (shared NOTES), so only a
    small settled stream; cumulative acks where the type allows them, individual ones elsewhere."""
    calls = {"acknowledge": 0, "acknowledge_cumulative": 0}
    for method in calls:
        original = getattr(pulsar.Consumer, method)

        def counting(self: Any, message: Any, _method: str = method, _orig: Any = original) -> Any:
            calls[_method] += 1
            return _orig(self, message)

        monkeypatch.setattr(pulsar.Consumer, method, counting)
    topic = backend.make_topic(1)
    records = keyed_stream(300, keys=10, seed=5)
    backend.produce(topic, records)
    check = OrderCheck()
    settings = PulsarSettings(backend.broker.url, f"g-{subscription_type}", subscription_type)
    [summary] = await ConsumerApp([workload(settings, topic, check)]).run(until_idle=1.0)

    assert check.violations == [] and summary.counters["completed"] == 300
    if subscription_type == "key_shared":
        assert calls == {"acknowledge": 300, "acknowledge_cumulative": 0}
    else:
        assert calls["acknowledge_cumulative"] >= 1
        assert calls["acknowledge"] < 300
    assert backend.committed(f"g-{subscription_type}", topic, 1) == {0: 300}


def test_producer_maps_keys_headers_and_tombstones_and_refuses_binary_ones(
    backend: PulsarBackend,
) -> None:
    topic = backend.make_topic(1)
    producer = PulsarProducer(backend.broker.url, {})
    results: list[tuple[str, bool] | None] = []

    def delivered(error: DeliveryError | None, _msg: object) -> None:
        results.append(None if error is None else (error.reason, error.permanent))

    try:
        producer.produce(topic, b"v1", b"k1", headers=[("h", b"x")], on_delivery=delivered)
        producer.produce(topic, b"v2", b"\xff", on_delivery=delivered)
        producer.produce(topic, b"v3", b"k3", headers=[("h", b"\xfe")], on_delivery=delivered)
        producer.produce(topic, None, b"k4", on_delivery=delivered)
        assert producer.flush(10) == 0
    finally:
        producer.close()
    refused = ("Pulsar keys and properties must be UTF-8 text", True)  # for good: never sent
    assert Counter(results) == Counter({None: 2, refused: 2})
    [stored, tombstone] = backend.read(topic, 1)[0]
    assert (stored.key, stored.value, stored.headers) == (b"k1", b"v1", {"h": b"x"})
    assert (tombstone.key, tombstone.value) == (b"k4", None), "a null value arrived as data"


def test_source_tells_a_null_value_from_an_empty_one(backend: PulsarBackend) -> None:
    """The source asks the client about a null value only when the data is empty: an empty
    value must stay ``b""``, a null one ``None``, and a value with data its data."""
    topic = backend.make_topic(1)
    producer = PulsarProducer(backend.broker.url, {})
    try:
        for value in (b"v", b"", None):
            producer.produce(topic, value, b"k")
        assert producer.flush(10) == 0
    finally:
        producer.close()
    consumer = held_consumer(backend, topic, "g-null")
    try:
        values = [msg.value() for msg in consume_exactly(consumer, 3)]
    finally:
        consumer.close()
    assert values == [b"v", b"", None]


def test_kill_9_mid_run_then_restart_loses_nothing(tmp_path: Path) -> None:
    """The broker is restarted between the two runs (same data dir, same port): pulsar-lite
    keeps a consumer whose connection ended in a reset registered, and then refuses every new
    consumer on that subscription ("Consumer 0 already exists") until it restarts. Production
    Pulsar drops the consumer with its connection. The restart keeps topics and cursors."""
    data = tmp_path / "pulsar"
    backend = PulsarBackend(start_pulsar_lite(data_dir=data))
    try:
        topic = backend.make_topic(1)
        count, keys = 20_000, 200
        backend.produce(topic, keyed_stream(count, keys=keys, seed=9))
        spec = write_spec(tmp_path / "spec.yaml", backend.broker, topic, "g-kill", concurrency=50)
        first, second = tmp_path / "run1.txt", tmp_path / "run2.txt"

        proc = start_consumer(spec, first, 0.01)
        wait_until(lambda: lines(first) >= 4000, timeout=60, message="first run made progress")
        proc.kill()  # SIGKILL: no drain, no final acknowledgements
        proc.wait(timeout=10)
        assert lines(first) < count, "the first run finished before it was killed"
        backend.broker.stop()
        backend.broker = start_pulsar_lite(port=backend.broker.port, data_dir=data)

        finish(start_consumer(spec, second, 0.0, "--until-idle", "2"))

        assert_complete([first, second], count, keys)
        assert backend.committed("g-kill", topic, 1) == {0: count}
    finally:
        backend.broker.stop()


async def test_kafka_and_pulsar_workloads_share_one_pool_by_weight(
    backend: PulsarBackend, kafka_broker: TansuBroker
) -> None:
    kafka = TansuBackend(kafka_broker)
    kafka_topic, pulsar_topic = kafka.make_topic(4), backend.make_topic(1)
    produce_sample(kafka_broker.bootstrap, kafka_topic, 4000, keys=400)
    backend.produce(pulsar_topic, keyed_stream(4000, keys=400, seed=3))
    running = {"now": 0, "max": 0}

    async def handler(rec: Record) -> None:
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        try:
            await asyncio.sleep(0.02)
        finally:
            running["now"] -= 1

    heavy = Workload(
        RunnerSettings(name="kafka", concurrency=100, weight=3),
        handler,
        [kafka_topic],
        kafka.factory("g-mixed"),
        "shared",
    )
    light = Workload(
        RunnerSettings(name="pulsar", concurrency=100, weight=1),
        handler,
        [pulsar_topic],
        backend.factory("g-mixed"),
        "shared",
    )
    app = ConsumerApp([heavy, light], pool_sizes={"shared": 20})
    summaries, samples = await run_sampling_shares(app, "kafka", "pulsar")

    assert all(s.counters["completed"] == 4000 for s in summaries)
    assert running["max"] <= 20, f"{running['max']} handlers ran at once in a pool of 20"
    assert len(samples) >= 50, "both workloads were never contending at once"
    kafka_share = statistics.mean(k for k, _ in samples)
    pulsar_share = statistics.mean(p for _, p in samples)
    print(f"\nshares kafka {kafka_share:.1f} / pulsar {pulsar_share:.1f}; max {running['max']}")
    assert 14 <= kafka_share <= 16 and 4 <= pulsar_share <= 6, (kafka_share, pulsar_share)
    assert backend.committed("g-mixed", pulsar_topic, 1) == {0: 4000}


def test_an_unreachable_service_is_a_broker_error_naming_it() -> None:
    url = f"pulsar://127.0.0.1:{free_port()}"
    settings = PulsarSettings(url, "g", client_options={"operation_timeout_seconds": 1})
    consumer = PulsarConsumer(settings, on_commit=lambda *_: None)
    with pytest.raises(BrokerError, match="cannot subscribe 'g'") as info:
        consumer.subscribe(["persistent://public/default/nowhere"])
    assert url in str(info.value)
