"""Dead letters that fit, on real brokers, through specs as ``lanehouse consume`` runs them.

A 5 MB record that fails its handler reaches the dead-letter topic whole (Tansu: the producer is
sized from the source's consumer; pulsar-lite: a record just under the broker's 5 MiB limit is
sent in chunks once its dead-letter headers push it over) and the workload goes on. A dead
letter that can never be written stops the workload within a bound, with an error naming the
record and the topic, and commits nothing at or above the record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from consumers import Record, SinkWriteError, WorkloadSpec, WorkloadSummary, load_spec
from consumers.config.platform import load_platform_config
from consumers.dev.embedded.pulsar import PulsarLiteBroker
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.engine.dead_letter_headers import decode_dead_letter
from consumers.service.launch import build_app
from tests.backends import PulsarBackend, TansuBackend
from tests.helpers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BIG = 5_000_000
#: The offset of the large record among small ones.
BIG_AT = 20
SMALL = 40


async def fail_large(rec: Record) -> None:
    """The workloads' handler: a record over 1 MiB always fails, with a long message (its
    dead letter's headers then take over 1 kB)."""
    if len(rec.value or b"") > 1024 * 1024:
        raise ValueError("too large to handle: " + "the reasons, at length; " * 40)


def records(big: int, count: int = SMALL) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"k%d" % i, b"x" * (big if i == BIG_AT else 100)) for i in range(count)]


def spec_for(
    tmp_path: Path, source: Mapping[str, object], dead_letter: Mapping[str, object]
) -> Path:
    path = tmp_path / "sizes.yaml"
    spec = {
        "name": "sizes",
        "source": source,
        "handler": f"{__name__}:fail_large",
        "retries": {"max_attempts": 2, "backoff": "50ms", "jitter": False},
        "dead_letter": {"max_ratio": 0.5, "window": 10, **dead_letter},
        "commit_interval": "50ms",
        "drain_timeout": "5s",
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def kafka_source(broker: TansuBroker, topic: str) -> dict[str, object]:
    return {
        "kind": "kafka",
        "bootstrap_servers": broker.bootstrap,
        "topics": [topic],
        "group": f"g-{topic}",
        "config": dict(TEST_CLIENT_CONFIG),
    }


async def run(spec: WorkloadSpec, within: float = 60.0) -> list[WorkloadSummary]:
    """Run until idle; a workload still busy after ``within`` seconds fails the test."""
    platform = load_platform_config(None, env={})
    return await asyncio.wait_for(build_app([spec], platform=platform).run(until_idle=1.0), within)


async def test_a_5_mb_record_is_dead_lettered_whole_and_the_workload_moves_on(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """No size set anywhere: librdkafka's 1 MB producer default would refuse it forever."""
    tansu = TansuBackend(kafka_broker)
    topic, dlq = topic_factory(1), topic_factory(1)
    produced = records(BIG)
    tansu.produce(topic, produced)
    spec = load_spec(spec_for(tmp_path, kafka_source(kafka_broker, topic), {"topic": dlq}), env={})

    [summary] = await run(spec)

    [[dead]] = tansu.read(dlq, 1)
    assert (dead.key, dead.value) == produced[BIG_AT]  # whole: 5,000,000 bytes
    info = decode_dead_letter(list(dead.headers.items()))
    assert (info.source_topic, info.source_offset, info.error_type) == (topic, BIG_AT, "ValueError")
    assert summary.counters["dead_lettered"] == 1
    assert summary.counters["dead_letter_write_failures"] == 0
    assert tansu.committed(f"g-{topic}", topic, 1) == {0: SMALL}


async def test_a_dead_letter_over_the_producers_limit_stops_the_workload_below_the_record(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """``message.max.bytes`` set for the dead letters (as to mirror a broker's 1 MB topic
    limit; Tansu itself takes any size): MSG_SIZE_TOO_LARGE is refused for good, so the workload
    stops at once instead of sending it again 6-7 times a second forever."""
    tansu = TansuBackend(kafka_broker)
    topic, dlq = topic_factory(1), topic_factory(1)
    tansu.produce(topic, records(BIG))
    limited = {"topic": dlq, "config": {"message.max.bytes": 1_000_000}}
    spec = load_spec(spec_for(tmp_path, kafka_source(kafka_broker, topic), limited), env={})

    started = time.monotonic()
    with pytest.raises(SinkWriteError) as raised:
        await run(spec)
    took = time.monotonic() - started

    error = raised.value
    assert (error.kind, error.sink, error.topic, error.offset) == (
        "dead letter",
        dlq,
        topic,
        BIG_AT,
    )
    assert "MSG_SIZE_TOO_LARGE" in str(error) and f"{topic}[0]@{BIG_AT}" in str(error)
    assert took < 15, f"stopped after {took:.1f}s"
    assert tansu.read(dlq, 1) == [[]]
    assert tansu.committed(f"g-{topic}", topic, 1) == {0: BIG_AT}  # below the record


async def test_a_dead_letter_cluster_that_never_answers_stops_the_workload_after_its_timeout(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """Dead letters go to a cluster nobody answers on: each send times out (transient), is sent
    again, and ``dead_letter.write_timeout`` after the first send the workload stops."""
    tansu = TansuBackend(kafka_broker)
    topic = topic_factory(1)
    tansu.produce(topic, records(2_000_000))
    config = tmp_path / "lanehouse.yaml"
    away = {"kind": "kafka", "bootstrap_servers": f"127.0.0.1:{free_port()}"}
    config.write_text(yaml.safe_dump({"clusters": {"away": away}}))
    platform = load_platform_config(config, env={})
    unreachable = {
        "topic": "sizes.dlq",
        "cluster": "away",
        "write_timeout": "2s",
        "config": {"message.timeout.ms": 500},
    }
    path = spec_for(tmp_path, kafka_source(kafka_broker, topic), unreachable)
    spec = load_spec(path, env={}, platform=platform)

    started = time.monotonic()
    with pytest.raises(SinkWriteError, match=r"past dead_letter.write_timeout \(2s\)") as raised:
        await asyncio.wait_for(build_app([spec], platform=platform).run(until_idle=1.0), 60)
    took = time.monotonic() - started

    assert (raised.value.sink, raised.value.offset) == ("sizes.dlq", BIG_AT)
    assert "_MSG_TIMED_OUT" in raised.value.reason
    assert 2 <= took < 15, f"stopped after {took:.1f}s"
    assert tansu.committed(f"g-{topic}", topic, 1) == {0: BIG_AT}


async def test_a_record_at_the_pulsar_limit_is_dead_lettered_in_chunks(
    pulsar_broker: PulsarLiteBroker, tmp_path: Path
) -> None:
    """pulsar-client sends up to the broker's 5 MiB less about 10 kB, counting the message's
    metadata (5,232,614 bytes of value with a key, measured): this record fits at the source,
    but not once the ``lanehouse.*`` headers join it. It comes last: pulsar-lite sometimes stops
    dispatching after a message this close to its limit when the consumer asks for the last
    message id meanwhile (as the engine's lag estimate does), which is not what this tests."""
    backend = PulsarBackend(pulsar_broker)
    topic, dlq = backend.make_topic(1), backend.make_topic(1)
    near_limit = 5_232_000
    produced = records(near_limit, count=BIG_AT + 1)
    backend.produce(topic, produced)
    source = {
        "kind": "pulsar",
        "service_url": pulsar_broker.url,
        "topics": [topic],
        "subscription": "sizes",
    }
    spec = load_spec(spec_for(tmp_path, source, {"topic": dlq}), env={})

    [summary] = await run(spec)

    [[dead]] = backend.read(dlq, 1)
    assert (dead.key, dead.value) == produced[BIG_AT]
    assert decode_dead_letter(list(dead.headers.items())).source_topic == topic
    assert summary.counters["dead_letter_write_failures"] == 0
    assert backend.committed("sizes", topic, 1) == {0: BIG_AT + 1}
