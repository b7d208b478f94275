"""Listing and replaying a Pulsar workload's dead letters on a real pulsar-lite broker: written by
the real engine, shown and replayed by the CLI, and the filters, limit and guard by API."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from consumers import (
    ConsumerApp,
    DeadLetterPolicy,
    Record,
    RetryPolicy,
    RunnerSettings,
    Workload,
    WorkloadSummary,
)
from consumers.backends.pulsar.dead_letters import PulsarDeadLetters
from consumers.dead_letters.listing import list_dead_letters
from consumers.dead_letters.replay import replay_dead_letters
from consumers.dev.embedded.pulsar import PulsarLiteBroker
from consumers.engine.dead_letter_headers import HEADER_REPLAY_COUNT
from orchestration.cli import app
from tests.backends import PulsarBackend
from tests.support.dead_letters import HOUR_MS, Dead, now_ms, write_pulsar

pytestmark = pytest.mark.integration

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
SUBSCRIPTION = "orders-sub"


def spec_text(url: str, name: str, source: str, dlq: str | None) -> str:
    dead_letter = f"dead_letter:\n  topic: {dlq}\n" if dlq else ""
    return (
        f"name: {name}\n"
        f"source:\n  kind: pulsar\n  service_url: {url}\n  topics: [{source}]\n"
        f"  subscription: {SUBSCRIPTION}\n"
        f"handler: consumers.dev.examples:enrich\n{dead_letter}"
    )


class Poison:
    """Fails every attempt on key ``bad`` while ``broken``; records what it handled."""

    def __init__(self) -> None:
        self.broken = True
        self.handled: list[tuple[bytes | None, bytes | None, bytes | None]] = []

    async def __call__(self, rec: Record) -> None:
        if self.broken and rec.key == b"bad":
            raise ValueError("cannot handle bad")
        self.handled.append((rec.key, rec.value, rec.header(HEADER_REPLAY_COUNT)))


async def consume(backend: PulsarBackend, topic: str, dlq: str, handler: Poison) -> WorkloadSummary:
    """Run the engine as workload ``orders`` until its subscription is idle."""
    settings = RunnerSettings(
        name="orders",
        commit_interval=0.05,
        drain_timeout=10.0,
        retry=RetryPolicy(max_attempts=2, backoff=0.01, jitter=False),
        dead_letter=DeadLetterPolicy(dlq, max_ratio=1.0),
    )
    workload = Workload(
        settings,
        handler,
        [topic],
        backend.factory(SUBSCRIPTION),
        producer_factory=backend.producer_factory(),
    )
    [summary] = await ConsumerApp([workload]).run(until_idle=0.5)
    return summary


async def test_engine_dead_letter_listed_replayed_after_a_fix_then_handled(
    pulsar_broker: PulsarLiteBroker, tmp_path: Path
) -> None:
    backend = PulsarBackend(pulsar_broker)
    url = pulsar_broker.url
    topic, dlq = backend.make_topic(1), backend.make_topic(1)
    backend.produce(topic, [(b"a", b"1"), (b"bad", b"2"), (b"b", b"3")])
    handler = Poison()
    summary = await consume(backend, topic, dlq, handler)
    assert summary.counters["dead_lettered"] == 1
    assert sorted(handler.handled) == [(b"a", b"1", None), (b"b", b"3", None)]

    (tmp_path / "orders.yaml").write_text(spec_text(url, "orders", topic, dlq))
    (tmp_path / "plain.yaml").write_text(spec_text(url, "plain", topic, None))
    runner = CliRunner()
    specs = ["--specs", str(tmp_path)]

    # The engine's dead letter, with its headers, as the API and the CLI show it.
    [entry] = list_dead_letters(PulsarDeadLetters(url), dlq, "orders")
    info = entry.info
    assert (entry.key, entry.value, entry.partition) == (b"bad", b"2", 0)
    assert (info.workload, info.source_topic, info.source_partition) == ("orders", topic, 0)
    assert (info.attempts, info.error_type, info.replay_count) == (2, "ValueError", 0)
    assert "cannot handle bad" in info.error_message
    assert entry.message_id is not None and entry.timestamp_ms is not None
    listed = runner.invoke(app, ["dead-letters", "list", "orders", *specs], env=ENV)
    assert listed.exit_code == 0, listed.output
    assert f"[0]@{entry.message_id}" in listed.output and "ValueError" in listed.output
    assert f"{topic}[0]@{info.source_offset}" in listed.output
    assert "1 dead letters" in listed.output

    # The fix is deployed; the replay sends the dead letter back to the source topic.
    handler.broken = False
    replay = runner.invoke(app, ["dead-letters", "replay", "orders", *specs], env=ENV)
    assert replay.exit_code == 0, replay.output
    assert f"replayed 1 dead letters of orders from {dlq} to {topic}" in replay.output
    assert "skipped 0 of other workloads, 0 older than --since, 0 unreadable" in replay.output
    await consume(backend, topic, dlq, handler)
    assert (b"bad", b"2", b"1") in handler.handled  # handled, as its first replay

    # Acknowledged on the replay subscription: nothing left to replay, the letter stays listed.
    again = runner.invoke(app, ["dead-letters", "replay", "orders", *specs], env=ENV)
    assert again.exit_code == 0, again.output
    assert "replayed 0 dead letters" in again.output
    assert [e.key for e in list_dead_letters(PulsarDeadLetters(url), dlq, "orders")] == [b"bad"]

    for args, message in [
        (["list", "nobody"], "no workload named 'nobody'"),
        (["replay", "plain"], "no dead-letter topic"),
        (["replay", "orders", "--to", dlq.rsplit("/", 1)[1]], "dead-letter topic itself"),
        (["replay", "orders", "--to", "bad topic"], "--to"),
    ]:
        result = runner.invoke(app, ["dead-letters", *args, *specs], env=ENV)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


def test_filters_limit_and_replay_guard(pulsar_broker: PulsarLiteBroker) -> None:
    backend = PulsarBackend(pulsar_broker)
    url, now, count = pulsar_broker.url, now_ms(), HEADER_REPLAY_COUNT
    dlq, target = backend.make_topic(1), backend.make_topic(1)
    write_pulsar(
        url,
        dlq,
        [
            Dead("payments", b"p1", b"w1", "payments.in"),
            Dead("orders", b"old", b"v0", target, last_failure_ms=now - 3 * HOUR_MS),
            Dead("orders", b"tired", b"v1", target, 0, 1, (("trace", b"t"), (count, b"3"))),
            Dead("orders", b"twice", b"v2", target, 0, 2, ((count, b"2"),)),
            Dead("orders", b"fresh", b"v3", target, 0, 3),
        ],
        raw=(b"not a dead letter",),
    )

    def keys(
        workload: str, limit: int | None = None, since: int | None = None
    ) -> list[bytes | None]:
        return [
            e.key for e in list_dead_letters(PulsarDeadLetters(url), dlq, workload, limit, since)
        ]

    assert keys("orders") == [b"old", b"tired", b"twice", b"fresh"]
    assert keys("orders", since=now - HOUR_MS) == [b"tired", b"twice", b"fresh"]
    assert keys("orders", limit=2) == [b"old", b"tired"]
    assert keys("payments") == [b"p1"]

    # 0.3 s without a message end a replay with nothing left to read.
    store = PulsarDeadLetters(url, idle=0.3)
    first = replay_dead_letters(store, dlq, "orders", target, limit=2, since_ms=now - HOUR_MS)
    # Passed over: another workload's, the old one; the one replayed 3 times is reported.
    assert (first.replayed, first.exhausted, first.skipped_older) == (1, 1, 1)
    assert (first.skipped_other_workloads, first.malformed) == (1, 0)
    (tired,) = first.exhausted_entries
    assert (tired.key, tired.info.replay_count) == (b"tired", 3)
    [stored] = backend.read(target, 1)[0]
    assert (stored.key, stored.value, stored.headers) == (b"twice", b"v2", {count: b"3"})

    # The limit stopped it after two of this workload's: the next run continues after them.
    rest = replay_dead_letters(store, dlq, "orders", target)
    assert (rest.replayed, rest.exhausted, rest.skipped_older, rest.malformed) == (1, 0, 0, 1)
    assert [s.key for s in backend.read(target, 1)[0]] == [b"twice", b"fresh"]
    last = replay_dead_letters(store, dlq, "orders", target)
    assert last == type(last)()  # everything was acknowledged: nothing read at all
