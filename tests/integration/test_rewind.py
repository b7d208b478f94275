"""``lanehouse workloads rewind`` on real brokers: Kafka positions by time with the lake kept
exact, Pulsar subscriptions recreated, and bad input refused with nothing changed."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path

import pulsar
import pytest
import yaml
from confluent_kafka import Consumer, Producer
from typer.testing import CliRunner, Result

from consumers import KafkaSourceSpec, Record, RewindRefused, WorkloadSpec
from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.pulsar import PulsarLiteBroker, validate_pulsar_topic
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.rewind.apply import rewind_workload
from consumers.rewind.target import RewindTarget, parse_target
from consumers.service.launch import build_app
from orchestration.cli import app
from orchestration.demo.events import generate
from orchestration.lake.tables import landed_root, read_days
from spark_jobs import LANDED_SCHEMA
from spark_jobs.cleaning import clean_clicks
from tests.landing import landed, produce_days

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Values the handler saw, in the order it saw them (the engine runs in this process).
HANDLED: list[int] = []


async def remember(record: Record) -> None:
    HANDLED.append(int(record.value or b"-1"))


def kafka_spec(broker: TansuBroker, topic: str) -> dict[str, object]:
    return {
        "name": "rewound",
        "handler": "tests.integration.test_rewind:remember",
        "source": {
            "kind": "kafka",
            "bootstrap_servers": broker.bootstrap,
            "topics": [topic],
            "config": dict(TEST_CLIENT_CONFIG),
        },
        "landing": {"dataset": "events", "flush_rows": 1500, "flush_interval": "300ms"},
        "commit_interval": "50ms",
    }


def declare(tmp_path: Path, data: dict[str, object]) -> tuple[WorkloadSpec, Path, Path]:
    """The spec, a workloads directory holding it as its one file, and a state dir beside it."""
    specs, state = tmp_path / "workloads", tmp_path / "state"
    specs.mkdir()
    (specs / "rewound.yaml").write_text(yaml.safe_dump(data))
    return WorkloadSpec.model_validate(data), specs, state


def cli(*args: str, specs: Path, state: Path) -> Result:
    """The command in this process (the engine's handler list is this module's)."""
    command = ["workloads", "rewind", *args, "--specs", str(specs), "--state-dir", str(state)]
    return CliRunner().invoke(app, command, env={"DAGSTER_HOME": ""})


async def test_kafka_rewind_by_time_handles_from_there_again_and_keeps_the_lake_exact(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic, count = topic_factory(2), 10_000
    stamps = produce_days(kafka_broker.bootstrap, topic, count, 2)
    spec, specs, state = declare(tmp_path, kafka_spec(kafka_broker, topic))
    assert isinstance(spec.source, KafkaSourceSpec)
    lake = state / "lake"
    HANDLED.clear()
    await build_app([spec], lake=lake).run(until_idle=1.0)
    assert sorted(HANDLED) == list(range(count))

    # Halfway between record 4,000's and 4,001's timestamps, as an operator would type it.
    middle = (stamps[4000] + stamps[4001]) / 2000
    moment = datetime.fromtimestamp(middle, tz=UTC).isoformat()
    dry = cli(rewound := "rewound", "--to", moment, "--dry-run", specs=specs, state=state)
    assert dry.exit_code == 0, dry.output
    assert f"would rewind kafka group lanehouse.{rewound}" in dry.output
    assert "total: 5999 records handled again" in dry.output, dry.output
    assert committed_offsets(kafka_broker.bootstrap, spec.source.group, topic, 2) == {
        0: 5000,
        1: 5000,
    }  # a dry run changes nothing

    done = cli(rewound, "--to", moment, specs=specs, state=state)
    assert done.exit_code == 0, done.output
    # Record i sits in partition i % 2 at offset i // 2: 4,001 is [1]@2000, 4,002 is [0]@2001.
    assert f"{topic}[0]: 5000 -> 2001, 2999 handled again" in done.output, done.output
    assert f"{topic}[1]: 5000 -> 2000, 3000 handled again" in done.output, done.output

    HANDLED.clear()
    await build_app([spec], lake=lake).run(until_idle=1.0)
    assert sorted(HANDLED) == list(range(4001, count))  # from 4,001 on, none before
    rows = landed(lake)
    positions = Counter((r["_partition"], r["_offset"]) for r in rows)
    assert len(positions) == count and set(positions.values()) == {1}  # each offset once
    assert sorted(int(r["value"]) for r in rows) == list(range(count))  # type: ignore[call-overload]
    assert committed_offsets(kafka_broker.bootstrap, spec.source.group, topic, 2) == {
        0: 5000,
        1: 5000,
    }


def test_bad_input_is_refused_and_changes_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(2)
    produce_days(kafka_broker.bootstrap, topic, 100, 2)
    spec, specs, state = declare(tmp_path, kafka_spec(kafka_broker, topic))
    assert isinstance(spec.source, KafkaSourceSpec)

    unknown = cli("nobody", "--to", "earliest", specs=specs, state=state)
    assert unknown.exit_code == 2 and "no workload named 'nobody'" in unknown.output
    future = cli("rewound", "--to", "2999-01-01T00:00:00Z", specs=specs, state=state)
    assert future.exit_code == 2 and "is in the future" in future.output
    garbled = cli("rewound", "--to", "yesterday-ish", specs=specs, state=state)
    assert garbled.exit_code == 2 and "cannot read 'yesterday-ish'" in garbled.output
    missing = cli("rewound", "--to", "earliest", "--partitions", "0,7", specs=specs, state=state)
    assert missing.exit_code == 1 and "no partition 7" in missing.output, missing.output

    member = Consumer(
        {
            **TEST_CLIENT_CONFIG,
            "bootstrap.servers": kafka_broker.bootstrap,
            "group.id": spec.source.group,
            "auto.offset.reset": "earliest",
        }
    )
    member.subscribe([topic])
    seen = 0
    while seen < 100:
        seen += sum(1 for m in member.consume(100, 0.5) if m.error() is None)
    member.commit(asynchronous=False)
    try:
        with pytest.raises(RewindRefused, match="has live members"):
            rewind_workload(spec, parse_target("earliest"))
        live = cli("rewound", "--to", "earliest", specs=specs, state=state)
        assert live.exit_code == 1 and "has live members" in live.output
    finally:
        member.close()
    assert committed_offsets(kafka_broker.bootstrap, spec.source.group, topic, 2) == {0: 50, 1: 50}


async def test_pulsar_rewind_to_earliest_handles_everything_again_as_duplicates(
    pulsar_broker: PulsarLiteBroker, tmp_path: Path
) -> None:
    topic = validate_pulsar_topic(f"rewind-{tmp_path.name}")
    spec = WorkloadSpec.model_validate(
        {
            "name": "rewound",
            "handler": "tests.integration.test_rewind:remember",
            "source": {"kind": "pulsar", "service_url": pulsar_broker.url, "topics": [topic]},
            "landing": {"dataset": "orders", "flush_rows": 100, "flush_interval": "300ms"},
            "commit_interval": "50ms",
        }
    )
    client = pulsar.Client(pulsar_broker.url)
    try:
        producer = client.create_producer(topic)
        for i in range(300):
            producer.send(str(i).encode(), partition_key=f"k{i % 7}")
    finally:
        client.close()
    lake = tmp_path / "lake"
    HANDLED.clear()
    await build_app([spec], lake=lake).run(until_idle=1.0)
    assert sorted(HANDLED) == list(range(300))
    before = {(r["_offset"], r["value"]) for r in landed(lake)}

    plan = rewind_workload(spec, parse_target("earliest"), lake=lake)
    assert [(m.committed, m.new, m.again) for m in plan.moves] == [(0, 300, 300)]
    HANDLED.clear()
    await build_app([spec], lake=lake).run(until_idle=1.0)
    assert sorted(HANDLED) == list(range(300))  # everything handled again
    rows = landed(lake)
    # Landed again: a file cut at the same messages replaces its twin, any other one is a second
    # copy under a new name. Every message id keeps its value, so the clean tables (deduplicated
    # by the lineage key) stay as they were.
    assert {(r["_offset"], r["value"]) for r in rows} == before
    assert set(Counter(r["_offset"] for r in rows).values()) <= {1, 2}


def test_a_disabled_workload_can_be_rewound_before_it_is_enabled_again(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(1)
    produce_days(kafka_broker.bootstrap, topic, 10, 1)
    spec, specs, state = declare(tmp_path, {**kafka_spec(kafka_broker, topic), "enabled": False})
    assert isinstance(spec.source, KafkaSourceSpec)
    done = cli("rewound", "--to", "latest", specs=specs, state=state)
    assert done.exit_code == 0, done.output
    assert f"{topic}[0]: nothing committed -> 10, 0 handled again" in done.output
    assert committed_offsets(kafka_broker.bootstrap, spec.source.group, topic, 1) == {0: 10}


async def test_the_spark_days_rebuilt_after_a_rewind_equal_a_fresh_run(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path, spark
) -> None:
    """Demo clicks over two days, landed, rewound into the first day, landed again: the clean,
    quarantined and duplicate rows of both days are those of one run that never rewound."""
    days = [date(2026, 11, 20), date(2026, 11, 21)]
    records = list(generate(days, users=40, seed=7))
    topic = topic_factory(2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 5})
    for record in records:
        producer.produce(topic, record.value, record.key, timestamp=record.timestamp_ms)
    assert producer.flush(30) == 0

    def lander(group: str) -> WorkloadSpec:
        data = kafka_spec(kafka_broker, topic)
        data["source"]["group"] = group  # type: ignore[index]
        data["landing"] = {"dataset": "clickstream", "flush_rows": 200, "flush_interval": "300ms"}
        return WorkloadSpec.model_validate({**data, "handler": None})

    rewound, fresh = tmp_path / "rewound", tmp_path / "fresh"
    await build_app([lander("g-rewound")], lake=rewound).run(until_idle=1.0)
    middle = records[len(records) // 3].timestamp_ms
    plan = rewind_workload(lander("g-rewound"), RewindTarget("time", middle), lake=rewound)
    assert plan.again > 0
    await build_app([lander("g-rewound")], lake=rewound).run(until_idle=1.0)
    await build_app([lander("g-fresh")], lake=fresh).run(until_idle=1.0)

    def tables(lake: Path) -> list[list[tuple[object, ...]]]:
        landed = read_days(spark, landed_root(lake, "clickstream"), LANDED_SCHEMA, days).cache()
        result = clean_clicks(landed)
        return [
            sorted((tuple(row) for row in frame.collect()), key=repr)
            for frame in (result.clean, result.quarantined, result.duplicates)
        ]

    again, once = tables(rewound), tables(fresh)
    assert len(once[0]) > 0 and len(once[1]) > 0  # valid and malformed clicks both present
    assert again == once
