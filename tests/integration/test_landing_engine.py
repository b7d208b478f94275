"""Landing workloads on a real Tansu broker: every record lands exactly once, offsets are
committed only behind landed files, outcomes decide what lands, and restarts and kill -9 never
lose or duplicate a row."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers import DeadLetter, Drop, Land, Record, WorkloadSpec
from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.backends.pulsar.consumer import pack_pulsar_position
from consumers.backends.pulsar.probe import unacknowledged
from consumers.dev.embedded.pulsar import (
    PULSAR_TEST_CLIENT_KWARGS,
    PulsarLiteBroker,
    validate_pulsar_topic,
)
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.service.launch import build_app
from tests.helpers import until, wait_until
from tests.landing import DAY_MS, START_MS, landed, landing_count_safe, produce_days
from tests.support.processes import finish, source_yaml, start_consumer

pytestmark = pytest.mark.integration


def spec(broker: TansuBroker, topic: str, group: str, **extra: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "name": "lander",
            "source": {
                "kind": "kafka",
                "bootstrap_servers": broker.bootstrap,
                "topics": [topic],
                "group": group,
                "config": dict(TEST_CLIENT_CONFIG),
            },
            "landing": {"dataset": "events", "flush_rows": 150, "flush_interval": "300ms"},
            "commit_interval": "50ms",
            **extra,
        }
    )


def topic_id(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    return str(admin.describe_topics(TopicCollection([topic]))[topic].result().topic_id)


async def test_every_record_lands_once_with_lineage_and_is_committed(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic, count = topic_factory(3), 1500
    stamps = produce_days(kafka_broker.bootstrap, topic, count, 3)
    app = build_app([spec(kafka_broker, topic, "g-land")], lake=tmp_path)
    [summary] = await app.run(until_idle=1.0)

    rows = landed(tmp_path)
    assert sorted(int(value_of(r)) for r in rows) == list(range(count))
    assert len({(r["_partition"], r["_offset"]) for r in rows}) == count
    incarnation = topic_id(kafka_broker.bootstrap, topic)
    for r in rows:
        index = int(value_of(r))
        stamp = datetime.fromtimestamp(stamps[index] / 1000, tz=UTC)
        assert r["event_date"] == stamp.date().isoformat()
        assert r["_timestamp"] == stamp
        assert r["_key"] == f"u{index % 50}".encode()
        assert (r["_source_kind"], r["_cluster"], r["_topic"]) == (
            "kafka",
            kafka_broker.bootstrap,
            topic,
        )
        assert r["_topic_id"] == incarnation and len(incarnation) > 8
        assert (r["_workload"], r["_partition"]) == ("lander", index % 3)
        assert str(r["file"]).endswith(f"-p{r['_partition']}-o{min_offset(rows, r)}.parquet")
    assert {r["event_date"] for r in rows} == {"2026-11-18", "2026-11-19", "2026-11-20"}
    assert committed_offsets(kafka_broker.bootstrap, "g-land", topic, 3) == log_end_offsets(
        kafka_broker.bootstrap, topic, 3
    )
    assert app.runners["lander"].landing is not None
    assert app.runners["lander"].landing.rows_landed == count == summary.counters["completed"]


def offset_of(row: dict[str, object]) -> int:
    """A landed row's ``_offset`` (an integer column)."""
    offset = row["_offset"]
    assert isinstance(offset, int), offset
    return offset


def value_of(row: dict[str, object]) -> bytes:
    """A landed row's ``value`` (a binary column)."""
    value = row["value"]
    assert isinstance(value, bytes), value
    return value


def min_offset(rows: list[dict[str, object]], row: dict[str, object]) -> int:
    """The smallest offset in ``row``'s file: the name a file must carry."""
    return min(offset_of(r) for r in rows if r["file"] == row["file"])


async def test_offsets_are_committed_only_behind_landed_files(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """While the workload runs, every offset below the committed position is in a landed file
    (sampled: committed position first, then the lake). With an hour-long interval only full
    buffers land while running: 150 rows of each day's 200, so the position stops at 150, where
    the first day's unlanded rest begins. The drain lands the rest."""
    topic, count = topic_factory(1), 600
    produce_days(kafka_broker.bootstrap, topic, count, 1)
    lazy = spec(kafka_broker, topic, "g-lazy")
    assert lazy.landing is not None
    lazy = lazy.model_copy(
        update={"landing": lazy.landing.model_copy(update={"flush_interval": 3600.0})}
    )
    app = build_app([lazy], lake=tmp_path)
    checked: list[int] = []

    async def check_while_running() -> None:
        await until(lambda: "lander" in app.runners)
        landing = app.runners["lander"].landing
        assert landing is not None
        deadline = asyncio.get_running_loop().time() + 20
        while not checked or checked[-1] < 150:
            assert asyncio.get_running_loop().time() < deadline, f"positions seen: {checked[-5:]}"
            position = (
                await asyncio.to_thread(
                    committed_offsets, kafka_broker.bootstrap, "g-lazy", topic, 1
                )
            ).get(0, 0)
            present = {offset_of(r) for r in landed(tmp_path)}
            assert set(range(position)) <= present, f"committed {position} before landing"
            checked.append(position)
            await asyncio.sleep(0.02)
        app.request_stop()

    checker = asyncio.ensure_future(check_while_running())
    await app.run()
    await checker
    assert max(checked) == 150, checked[-5:]
    assert len(landed(tmp_path)) == count  # the drain landed the partial buffers
    assert committed_offsets(kafka_broker.bootstrap, "g-lazy", topic, 1) == {0: count}


async def test_outcomes_decide_what_lands(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """None lands the record, Land(value) lands that value, Drop and DeadLetter land nothing."""
    topic, count = topic_factory(2), 300
    produce_days(kafka_broker.bootstrap, topic, count, 2)
    dead = topic_factory(1)
    workload = spec(
        kafka_broker,
        topic,
        "g-outcomes",
        handler="tests.integration.test_landing_engine:by_value",
        dead_letter={"topic": dead, "max_ratio": 0.5},
    )
    [summary] = await build_app([workload], lake=tmp_path).run(until_idle=1.0)
    values = Counter(value_of(r) for r in landed(tmp_path))
    expected: Counter[bytes] = Counter()
    for i in range(count):
        if i % 5 == 0:
            expected[f"{i}!".encode()] += 1
        elif i % 5 in (1, 2):
            expected[str(i).encode()] += 1
    assert values == expected
    assert summary.counters["dead_lettered"] == count // 5
    assert summary.counters["dropped_by_handler"] == count // 5
    assert committed_offsets(kafka_broker.bootstrap, "g-outcomes", topic, 2) == log_end_offsets(
        kafka_broker.bootstrap, topic, 2
    )


async def by_value(rec: Record) -> Land | Drop | DeadLetter | None:
    i = int(rec.value or b"-1")
    return [Land(f"{i}!".encode()), None, None, Drop("test"), DeadLetter("test")][i % 5]


async def test_a_restart_replaces_files_past_the_committed_position(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """A crash leaves files past the committed position (landed, not yet committed), some cut
    differently than the replay will cut them: the restart removes them and lands each record
    exactly once again."""
    topic, count = topic_factory(1), 900
    produce_days(kafka_broker.bootstrap, topic, count, 1)
    await build_app([spec(kafka_broker, topic, "g-restart")], lake=tmp_path).run(until_idle=1.0)
    first = sorted({int(str(r["file"]).rsplit("-o", 1)[1].split(".")[0]) for r in landed(tmp_path)})
    boundary = first[len(first) // 2]
    # The "crash": only the files below `boundary` were committed; one more file was written
    # with other cuts (as a replay with different timing would), the rest as before.
    rewind(kafka_broker.bootstrap, "g-restart", topic, boundary)
    [odd] = [p for p in (tmp_path / "landed").rglob(f"*-o{first[-1]}.parquet")]
    odd.rename(odd.with_name(odd.name.replace(f"-o{first[-1]}.", f"-o{first[-1] + 1}.")))

    [summary] = await build_app([spec(kafka_broker, topic, "g-restart")], lake=tmp_path).run(
        until_idle=1.0
    )
    rows = landed(tmp_path)
    assert Counter(offset_of(r) for r in rows) == Counter(range(count))
    assert summary.counters["completed"] == count - boundary


def rewind(bootstrap: str, group: str, topic: str, position: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, position)], asynchronous=False)
    finally:
        consumer.close()
    assert committed_offsets(bootstrap, group, topic, 1) == {0: position}


def test_kill_9_while_landing_loses_and_duplicates_nothing(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, count = topic_factory(3), 6000
    produce_days(kafka_broker.bootstrap, topic, count, 3)
    lake = tmp_path / "lake"
    monkeypatch.setenv("LANEHOUSE_LAKE", str(lake))
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"""name: lander
{source_yaml(kafka_broker, topic, "g-kill-landing")}handler: tests.integration.test_landing_engine:slow
concurrency: 5
commit_interval: 100ms
landing: {{dataset: events, flush_rows: 97, flush_interval: 200ms}}
"""
    )
    first, second = tmp_path / "run1.txt", tmp_path / "run2.txt"
    proc = start_consumer(path, first, 0.005)
    wait_until(lambda: landing_count_safe(lake) >= 1500, timeout=60, message="landing began")
    proc.kill()  # SIGKILL mid-landing: no drain, no final commit, maybe a half-written .tmp
    proc.wait(timeout=10)
    assert landing_count_safe(lake) < count, "the first run finished before it was killed"

    finish(start_consumer(path, second, 0.0, "--until-idle", "2"))
    rows = landed(lake)
    assert Counter((r["_partition"], r["_offset"]) for r in rows) == Counter(
        (i % 3, i // 3) for i in range(count)
    )
    assert sorted(int(value_of(r)) for r in rows) == list(range(count))
    assert committed_offsets(kafka_broker.bootstrap, "g-kill-landing", topic, 3) == (
        log_end_offsets(kafka_broker.bootstrap, topic, 3)
    )


async def slow(rec: Record) -> None:
    """5 ms per record: slow enough that a kill lands mid-run."""
    await asyncio.sleep(0.005)


async def test_pulsar_records_land_once_at_their_message_ids(
    pulsar_broker: PulsarLiteBroker, tmp_path: Path
) -> None:
    """Pulsar's engine offsets restart each session, so rows carry the message id as their
    position: unique, stable, and the same after the messages are read again."""
    topic, count = validate_pulsar_topic(f"landing-{uuid.uuid4().hex[:8]}"), 600
    client = pulsar.Client(pulsar_broker.url, **PULSAR_TEST_CLIENT_KWARGS)
    try:
        producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        ids: dict[int, int] = {}
        stamps = [START_MS + i * (3 * DAY_MS // count) for i in range(count)]

        def sent(i: int):
            def done(result: pulsar.Result, mid: pulsar.MessageId) -> None:
                assert result == pulsar.Result.Ok
                ids[i] = pack_pulsar_position(mid.ledger_id(), mid.entry_id(), mid.batch_index())

            return done

        for i, stamp in enumerate(stamps):
            producer.send_async(
                str(i).encode(), sent(i), partition_key=f"u{i % 50}", event_timestamp=stamp
            )
        producer.flush()
        wait_until(lambda: len(ids) == count, 10, message="send callbacks")
    finally:
        client.close()

    def workload(subscription: str) -> WorkloadSpec:
        return WorkloadSpec.model_validate(
            {
                "name": "lander",
                "source": {
                    "kind": "pulsar",
                    "service_url": pulsar_broker.url,
                    "topics": [topic],
                    "subscription": subscription,
                },
                "landing": {"dataset": "orders", "flush_rows": 100, "flush_interval": "300ms"},
                "commit_interval": "50ms",
            }
        )

    await build_app([workload("s1")], lake=tmp_path / "a").run(until_idle=1.0)
    await build_app([workload("s2")], lake=tmp_path / "b").run(until_idle=1.0)
    first, second = landed(tmp_path / "a"), landed(tmp_path / "b")
    assert {int(value_of(r)): r["_offset"] for r in first} == ids
    assert len(first) == count and len({r["_offset"] for r in first}) == count
    assert sorted(offset_of(r) for r in second) == sorted(ids.values())
    assert {(r["_source_kind"], r["_cluster"], r["_topic_id"]) for r in first} == {
        ("pulsar", pulsar_broker.url, "")
    }
    for r in first:
        sent_at = datetime.fromtimestamp(stamps[int(value_of(r))] / 1000, tz=UTC)
        assert r["event_date"] == sent_at.date().isoformat()
    assert unacknowledged(pulsar_broker.url, "s1", topic) == []
