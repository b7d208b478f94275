"""Retries, dead letters and ordered outputs survive ``kill -9`` of the consumer process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.tansu import TansuBroker
from consumers.dev.sample import produce_sample
from consumers.engine.dead_letter_headers import decode_dead_letter
from tests.backends import TansuBackend, assert_all_committed
from tests.helpers import wait_until
from tests.support.processes import finish, lines, start_consumer, write_spec
from tests.support.recording import order_violations, read_run

pytestmark = pytest.mark.integration


def poison_attempts(path: Path) -> int:
    return path.read_text().count("POISON") if path.exists() else 0


def test_poison_retries_survive_kill_9_then_dead_letter(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic, dlq = topic_factory(4), topic_factory(1)
    count, keys = 10_000, 100
    produce_sample(kafka_broker.bootstrap, topic, count, keys)  # key k0's seq 0 is the poison
    retries = "retries: {max_attempts: 6, backoff: 300ms, max_backoff: 1s, jitter: false}\n"
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        "g-poison",
        concurrency=50,
        handler="poison",
        extra=retries + f"dead_letter: {{topic: {dlq}, max_ratio: 0.5}}\n",
    )
    first, second = tmp_path / "run1.txt", tmp_path / "run2.txt"

    proc = start_consumer(spec, first, 0.005)
    wait_until(lambda: poison_attempts(first) >= 2, timeout=60, message="poison retried twice")
    proc.kill()  # in the middle of the poison's retries
    proc.wait(timeout=10)
    assert poison_attempts(first) < 6, "the first run reached the last attempt before the kill"

    finish(start_consumer(spec, second, 0.0, "--until-idle", "2"))

    assert poison_attempts(second) == 6  # attempts restart after a crash: nothing is assumed
    runs = [read_run(str(first)), read_run(str(second))]
    handled = {(key, seq) for run in runs for key, seq, *_ in run}
    assert ("k0", 0) not in handled
    assert len(handled) == count - 1, "a record other than the poison was lost"
    for run in runs:
        assert order_violations(run) == []
    # k0's later records waited behind the poison in each run: none ran before it settled.
    k0_first_run = [seq for key, seq, *_ in runs[0] if key == "k0"]
    assert k0_first_run == []
    backend = TansuBackend(kafka_broker)
    dead = [r for part in backend.read(dlq, 1) for r in part]
    assert len(dead) == 1
    info = decode_dead_letter(list(dead[0].headers.items()))
    assert (info.source_topic, info.attempts, info.error_type) == (topic, 6, "RuntimeError")
    assert_all_committed(kafka_broker.bootstrap, "g-poison", topic, 4)


def test_outputs_are_acknowledged_before_their_source_is_committed_across_kill_9(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic, out = topic_factory(4), topic_factory(4)
    count = 20_000
    produce_sample(kafka_broker.bootstrap, topic, count, keys=500)
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        "g-out",
        concurrency=200,
        handler="forward",
        extra=f"output: {{topic: {out}}}\n",
    )
    first, second = tmp_path / "run1.txt", tmp_path / "run2.txt"
    backend = TansuBackend(kafka_broker)

    def outputs() -> set[tuple[int, int]]:
        return {
            (src["p"], src["o"])
            for part in backend.read(out, 4)
            for src in (json.loads(r.value or b"") for r in part)
        }

    def committed_some() -> bool:
        return any(
            o > 0 for o in committed_offsets(kafka_broker.bootstrap, "g-out", topic, 4).values()
        )

    proc = start_consumer(spec, first, 0.05)  # ~2.5 s for all: time to commit, then kill
    wait_until(committed_some, timeout=60, interval=0.05, message="the first run committed")
    proc.kill()
    proc.wait(timeout=10)
    assert lines(first) < count, "the first run finished before it was killed"
    committed = committed_offsets(kafka_broker.bootstrap, "g-out", topic, 4)
    produced = outputs()
    for partition, position in committed.items():
        missing = [o for o in range(max(position, 0)) if (partition, o) not in produced]
        assert missing == [], f"partition {partition}: committed without output: {missing[:5]}"

    finish(start_consumer(spec, second, 0.0, "--until-idle", "2"))

    ends = backend.log_end(topic, 4)
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    assert expected <= outputs(), "a source record has no output"
    assert_all_committed(kafka_broker.bootstrap, "g-out", topic, 4)
