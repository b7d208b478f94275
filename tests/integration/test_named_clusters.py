"""Named clusters on two real brokers: a workload reads cluster A, forwards to A and dead-letters
to cluster B; each record arrives on its own cluster's topic and nowhere else, and the
dead-letter tools read B and replay to A."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from consumers import DeadLetter, Forward, Record, load_spec
from consumers.config.platform import load_platform_config
from consumers.dead_letters.places import list_workload_dead_letters, replay_workload_dead_letters
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker, create_topic, start_tansu
from consumers.service.launch import build_app
from tests.support.dead_letters import read_all

pytestmark = pytest.mark.integration

POISON = b"poison"


async def forward_or_dead_letter(record: Record) -> Forward | DeadLetter:
    """The handler of the workload below: the poison record is dead-lettered, others forwarded."""
    if record.key == POISON:
        return DeadLetter("poison")
    return Forward(record.value or b"")


@pytest.fixture(scope="module")
def second_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    broker = start_tansu(log_dir=tmp_path_factory.mktemp("tansu-b"))
    try:
        yield broker
    finally:
        broker.stop()


async def test_dead_letters_go_to_their_own_cluster_and_outputs_to_the_sources(
    kafka_broker: TansuBroker, second_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    a, b = kafka_broker.bootstrap, second_broker.bootstrap
    source = topic_factory(1)
    out, dlq = f"{source}.out", f"{source}.dlq"
    for bootstrap in (a, b):  # on both, so a record sent to the wrong cluster would be seen
        for topic in (out, dlq):
            create_topic(bootstrap, topic, 1)
    config = tmp_path / "lanehouse.yaml"
    clusters = {
        "cluster-a": {"kind": "kafka", "bootstrap_servers": a, "config": dict(TEST_CLIENT_CONFIG)},
        "cluster-b": {"kind": "kafka", "bootstrap_servers": b},
    }
    config.write_text(yaml.safe_dump({"clusters": clusters}))
    spec_file = tmp_path / "split.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "name": "split",
                "source": {"cluster": "cluster-a", "topics": [source]},
                "handler": f"{__name__}:forward_or_dead_letter",
                "output": {"topic": out},
                "dead_letter": {"topic": dlq, "cluster": "cluster-b"},
                "commit_interval": "50ms",
            }
        )
    )
    platform = load_platform_config(config, env={})
    spec = load_spec(spec_file, env={}, platform=platform)

    producer = Producer({"bootstrap.servers": a})
    for key in (b"k1", POISON, b"k2"):
        producer.produce(source, key + b"-value", key)
    assert producer.flush(10) == 0

    [summary] = await build_app([spec], platform=platform).run(until_idle=1.0)

    assert summary.counters["dead_lettered"] == 1, summary.counters
    [(_, key, value, headers)] = read_all(b, dlq, 1)
    assert (key, value) == (POISON, b"poison-value")
    assert ("lanehouse.workload", b"split") in headers
    assert read_all(a, dlq, 1) == []
    assert [value for _, _, value, _ in read_all(a, out, 1)] == [b"k1-value", b"k2-value"]
    assert read_all(b, out, 1) == []

    # The dead-letter tools read cluster B and republish to the source topic on cluster A.
    [entry] = list_workload_dead_letters(spec)
    assert (entry.key, entry.info.source_topic) == (POISON, source)
    replayed = replay_workload_dead_letters(spec, source)
    assert (replayed.replayed, replayed.exhausted) == (1, 0)
    assert [key for _, key, _, _ in read_all(a, source, 1)] == [b"k1", POISON, b"k2", POISON]
    assert replay_workload_dead_letters(spec, source).replayed == 0  # its progress was committed
