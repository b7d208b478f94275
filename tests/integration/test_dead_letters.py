"""Listing and replaying dead letters on a real (Tansu) broker, by API and by CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from consumers import BrokerError
from consumers.backends.kafka.consumer import committed_offsets
from consumers.backends.kafka.dead_letters import KafkaDeadLetters
from consumers.dead_letters.listing import list_dead_letters
from consumers.dead_letters.replay import replay_dead_letters
from consumers.dead_letters.selection import replay_group
from consumers.dev.embedded.tansu import TansuBroker
from consumers.engine.dead_letter_headers import HEADER_REPLAY_COUNT
from orchestration.cli import app
from tests.support.dead_letters import (
    CLIENT,
    HOUR_MS,
    Dead,
    now_ms,
    read_all,
    spec_text,
    write,
)

pytestmark = pytest.mark.integration

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_list_filters_by_workload_and_since(kafka_broker: TansuBroker, topic_factory) -> None:
    now = now_ms()
    bootstrap = kafka_broker.bootstrap
    dlq = topic_factory(2)
    old, new = now - 2 * HOUR_MS, now - 60_000
    write(
        bootstrap,
        dlq,
        [
            Dead("orders", b"o1", b"v1", "orders.in", 1, 10, (("trace", b"t1"),), old, 1),
            Dead("payments", b"p1", b"w1", "payments.in", 0, 5, (), new, 0),
            Dead("orders", b"o2", b"v2", "orders.in", 0, 11, (), new, 0),
            Dead("orders", None, None, "orders.in", 0, 12, (), old, 0),
            Dead("orders", b"o4", b"v4", "orders.in", 1, 13, (), new, 1),
        ],
        raw=(b"not a dead letter",),
    )

    entries = list_dead_letters(KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders")
    # DLQ order: partition, then offset; other workloads and unreadable records left out.
    assert [(e.partition, e.offset, e.key) for e in entries] == [
        (0, 1, b"o2"),
        (0, 2, None),
        (1, 0, b"o1"),
        (1, 1, b"o4"),
    ]
    first = entries[2]
    assert (first.value, first.info.source_topic, first.info.source_partition) == (
        b"v1",
        "orders.in",
        1,
    )
    assert (first.info.source_offset, first.info.attempts, first.info.last_failure_ms) == (
        10,
        3,
        old,
    )
    assert first.info.original_headers == (("trace", b"t1"),)
    assert first.timestamp_ms is not None

    recent = list_dead_letters(KafkaDeadLetters(bootstrap), dlq, "orders", since_ms=now - HOUR_MS)
    assert [e.key for e in recent] == [b"o2", b"o4"]
    assert [
        e.key for e in list_dead_letters(KafkaDeadLetters(bootstrap), dlq, "orders", limit=3)
    ] == [
        b"o2",
        None,
        b"o1",
    ]
    assert [e.key for e in list_dead_letters(KafkaDeadLetters(bootstrap), dlq, "payments")] == [
        b"p1"
    ]
    assert list_dead_letters(KafkaDeadLetters(bootstrap), dlq, "nobody") == []
    # Listing commits nothing.
    assert committed_offsets(bootstrap, "lanehouse.orders.dlq-list", dlq, 2) == {
        0: -1001,
        1: -1001,
    }


def test_replay_republishes_this_workloads_letters_once(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    bootstrap = kafka_broker.bootstrap
    dlq, target = topic_factory(2), topic_factory(2)
    write(
        bootstrap,
        dlq,
        [
            Dead(
                "orders",
                b"o1",
                b"v1",
                target,
                1,
                10,
                (("trace", b"t1"), ("n", b"2")),
                dlq_partition=1,
            ),
            Dead("payments", b"p1", b"w1", "payments.in", dlq_partition=0),
            # Same key, other source partition: only "back to its source partition" does this.
            Dead("orders", b"o1", b"v2", target, 0, 11, dlq_partition=0),
            Dead("payments", b"p2", b"w2", "payments.in", dlq_partition=1),
            Dead("orders", None, b"v3", "elsewhere", 1, 12, dlq_partition=0),
        ],
        raw=(b"not a dead letter",),
    )

    summary = replay_dead_letters(KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders", target)
    assert (summary.replayed, summary.exhausted, summary.skipped_other_workloads) == (3, 0, 2)
    assert (summary.skipped_older, summary.malformed) == (0, 1)

    replayed = read_all(bootstrap, target, 2)
    one = [(HEADER_REPLAY_COUNT, b"1")]
    by_value = {value: (partition, key, headers) for partition, key, value, headers in replayed}
    assert by_value[b"v1"] == (1, b"o1", [("trace", b"t1"), ("n", b"2"), *one])
    assert by_value[b"v2"] == (0, b"o1", one)
    assert by_value[b"v3"][1:] == (None, one)  # source topic differs: the partitioner chose
    assert len(replayed) == 3

    # The group recorded everything it read; a second run finds nothing new.
    group = replay_group("orders")
    assert committed_offsets(bootstrap, group, dlq, 2) == {0: 4, 1: 2}  # the log ends
    again = replay_dead_letters(KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders", target)
    assert (again.replayed, again.skipped_other_workloads, again.malformed) == (0, 0, 0)
    assert len(read_all(bootstrap, target, 2)) == 3

    # A new dead letter is the only one the next run republishes.
    write(bootstrap, dlq, [Dead("orders", b"o5", b"v5", target, 0, 13, dlq_partition=1)])
    third = replay_dead_letters(KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders", target)
    assert (third.replayed, third.skipped_other_workloads) == (1, 0)
    assert sorted(r[2] for r in read_all(bootstrap, target, 2)) == [b"v1", b"v2", b"v3", b"v5"]


def test_replay_guard_limit_and_since(kafka_broker: TansuBroker, topic_factory) -> None:
    now = now_ms()
    bootstrap = kafka_broker.bootstrap
    dlq, target = topic_factory(1), topic_factory(1)
    count = HEADER_REPLAY_COUNT
    write(
        bootstrap,
        dlq,
        [
            Dead("orders", b"old", b"v0", target, last_failure_ms=now - 3 * HOUR_MS),
            Dead("orders", b"tired", b"v1", target, 0, 1, (("trace", b"t"), (count, b"3"))),
            Dead("orders", b"twice", b"v2", target, 0, 2, ((count, b"2"),)),
            Dead("orders", b"fresh", b"v3", target, 0, 3),
        ],
    )

    since = now - HOUR_MS
    first = replay_dead_letters(
        KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders", target, limit=2, since_ms=since
    )
    # The old one is passed over; the one replayed 3 times is reported, not republished.
    assert (first.replayed, first.exhausted, first.skipped_older) == (1, 1, 1)
    (tired,) = first.exhausted_entries
    assert (tired.key, tired.info.replay_count, tired.info.original_headers) == (
        b"tired",
        3,
        (("trace", b"t"),),
    )
    assert read_all(bootstrap, target, 1) == [(0, b"twice", b"v2", [(count, b"3")])]

    # The limit stopped it after two: the next run continues with the rest.
    rest = replay_dead_letters(
        KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders", target, max_replays=3
    )
    assert (rest.replayed, rest.exhausted, rest.skipped_older) == (1, 0, 0)
    assert [r[1] for r in read_all(bootstrap, target, 1)] == [b"twice", b"fresh"]
    # The republished "twice" (now replayed 3 times) failing again would be exhausted next time.
    assert read_all(bootstrap, target, 1)[0][3] == [(count, b"3")]


def test_a_failed_batch_is_not_committed_and_the_rerun_republishes_it(
    kafka_broker: TansuBroker, topic_factory
) -> None:
    bootstrap = kafka_broker.bootstrap
    dlq, target = topic_factory(1), topic_factory(1)
    write(
        bootstrap,
        dlq,
        [Dead("orders", b"small", b"s", target), Dead("orders", b"big", b"x" * 5000, target)],
    )
    # The producer refuses the second record; the first may already be out.
    with pytest.raises(BrokerError, match="cannot republish") as refused:
        replay_dead_letters(
            KafkaDeadLetters(bootstrap, {**CLIENT, "message.max.bytes": 2000}),
            dlq,
            "orders",
            target,
        )
    assert refused.value.topic == target
    assert committed_offsets(bootstrap, replay_group("orders"), dlq, 1) == {0: -1001}

    summary = replay_dead_letters(KafkaDeadLetters(bootstrap, CLIENT), dlq, "orders", target)
    assert summary.replayed == 2
    keys = [r[1] for r in read_all(bootstrap, target, 1)]
    assert keys in ([b"small", b"big"], [b"small", b"small", b"big"])  # at-least-once


def test_missing_topics_are_clear_errors(kafka_broker: TansuBroker, topic_factory) -> None:
    """They name the topic in the message and as the error's field, and say a rerun cannot
    help (the CLI prints both)."""
    dlq = topic_factory(1)
    with pytest.raises(BrokerError, match="dead-letter topic 'no-such-dlq' does not exist") as e:
        list_dead_letters(KafkaDeadLetters(kafka_broker.bootstrap, CLIENT), "no-such-dlq", "orders")
    assert (e.value.topic, e.value.retriable) == ("no-such-dlq", False)
    with pytest.raises(BrokerError, match="target topic 'no-such-target' does not exist") as e:
        replay_dead_letters(
            KafkaDeadLetters(kafka_broker.bootstrap), dlq, "orders", "no-such-target"
        )
    assert e.value.context() == "topic no-such-target · running again will not help"


def test_cli_list_and_replay(kafka_broker: TansuBroker, topic_factory, tmp_path: Path) -> None:
    now = now_ms()
    bootstrap = kafka_broker.bootstrap
    dlq, source = topic_factory(1), topic_factory(2)
    (tmp_path / "orders.yaml").write_text(spec_text(bootstrap, "orders", source, dlq))
    (tmp_path / "plain.yaml").write_text(spec_text(bootstrap, "plain", source, None))
    write(
        bootstrap,
        dlq,
        [
            Dead("orders", b"o1", b"v1", source, 1, 7, last_failure_ms=now - 2 * HOUR_MS),
            Dead("payments", b"p1", b"w1", "payments.in"),
            Dead("orders", b"o2", b"v2", source, 0, 8),
        ],
    )
    runner = CliRunner()
    specs = ["--specs", str(tmp_path)]

    listed = runner.invoke(app, ["dead-letters", "list", "orders", *specs], env=ENV)
    assert listed.exit_code == 0, listed.output
    assert "o1" in listed.output and "o2" in listed.output and "p1" not in listed.output
    assert f"{source}[1]@7" in listed.output and "ValueError" in listed.output
    assert "2 dead letters" in listed.output

    recent = runner.invoke(
        app, ["dead-letters", "list", "orders", *specs, "--since", "1h"], env=ENV
    )
    assert recent.exit_code == 0, recent.output
    assert "o2" in recent.output and "o1" not in recent.output

    # The specs directory may come from the environment instead.
    env = {**ENV, "LANEHOUSE_WORKLOADS": str(tmp_path)}
    replay = runner.invoke(app, ["dead-letters", "replay", "orders"], env=env)
    assert replay.exit_code == 0, replay.output
    assert f"replayed 2 dead letters of orders from {dlq} to {source}" in replay.output
    assert "skipped 1 of other workloads" in replay.output
    replayed = read_all(bootstrap, source, 2)
    assert sorted((p, k) for p, k, _, _ in replayed) == [(0, b"o2"), (1, b"o1")]

    again = runner.invoke(app, ["dead-letters", "replay", "orders", *specs], env=ENV)
    assert again.exit_code == 0, again.output
    assert "replayed 0 dead letters" in again.output

    for args, message in [
        (["list", "nobody"], "no workload named 'nobody'"),
        (["replay", "plain"], "no dead-letter topic"),
        (["replay", "orders", "--since", "yesterday"], "duration ago"),
        (["replay", "orders", "--to", dlq], "dead-letter topic itself"),
    ]:
        result = runner.invoke(app, ["dead-letters", *args, *specs], env=ENV)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
