"""A handler that ends its own process (``os._exit``) on one record, under the default executor,
run after run as a supervisor (Dagster's sensor, systemd) would restart it: the record is set
aside after a bounded number of deaths and the workload goes on (``consumers.engine.crashes``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from consumers.dev.embedded.tansu import TansuBroker
from consumers.engine.dead_letter_headers import decode_dead_letter
from tests.backends import TansuBackend
from tests.reliability.faults import fill
from tests.support.processes import start_consumer, write_spec
from tests.support.recording import POISON_EXIT, read_run

pytestmark = pytest.mark.reliability

PARTITIONS = 3
RECORDS = 1_500
KEYS = 30
#: Four deaths once the position stops moving (docs/reliability.md), then a run that finishes
#: or stops clearly.
MOST_RUNS = 6


Run = tuple[int, str, Path]


def one_run(spec: Path, tmp_path: Path, n: int) -> Run:
    """``lanehouse consume --until-idle`` with its state in ``tmp_path/home``: (exit status,
    output, record file)."""
    record = tmp_path / f"run{n}.txt"
    proc = start_consumer(
        spec, record, 0.0, "--until-idle", "2", env={"LANEHOUSE_HOME": str(tmp_path / "home")}
    )
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"run {n} did not finish") from None
    return proc.returncode, out.decode(errors="replace"), record


def runs_until_settled(spec: Path, tmp_path: Path) -> list[Run]:
    """Run again after each death, as a supervisor would, up to the first run that did not
    die."""
    runs = []
    for n in range(MOST_RUNS):
        runs.append(one_run(spec, tmp_path, n))
        if runs[-1][0] != POISON_EXIT:
            break
    return runs


def test_a_handler_that_ends_the_process_is_set_aside_after_four_deaths(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic, dlq = topic_factory(PARTITIONS), topic_factory(1)
    records = fill(kafka_broker, topic, RECORDS, KEYS, PARTITIONS)
    group = "g-crash-dlq"
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        group,
        concurrency=20,
        handler="exit_on_poison",
        extra=f"dead_letter: {{topic: {dlq}, max_ratio: 0.5}}\n",
    )
    runs = runs_until_settled(spec, tmp_path)

    # Four deaths once the position stops moving; the first run may commit the records before
    # the poison before it dies (a slow machine reaches a commit first), which is progress.
    statuses = [status for status, *_ in runs]
    assert statuses in ([POISON_EXIT] * 4 + [0], [POISON_EXIT] * 5 + [0]), runs[-1][1][-3000:]
    assert "the last 4 processes holding it died without its position moving" in runs[-1][1]
    backend = TansuBackend(kafka_broker)
    [dead] = [r for part in backend.read(dlq, 1) for r in part]
    value = json.loads(dead.value or b"")
    assert (value["key"], value["seq"]) == ("k0", 3)
    info = decode_dead_letter(list(dead.headers.items()))
    assert "ended the process" in info.error_message and info.source_topic == topic
    handled = {(key, seq) for *_, record in runs for key, seq, *_ in read_run(str(record))}
    assert handled == records - {("k0", 3)}
    last = runs[-1][1]
    assert f"{topic}[{info.source_partition}]@{info.source_offset}" in last
    assert backend.committed(group, topic, PARTITIONS) == backend.log_end(topic, PARTITIONS)


def test_without_dead_letters_the_workload_stops_at_the_record_and_names_it(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS)
    fill(kafka_broker, topic, RECORDS, KEYS, PARTITIONS)
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        "g-crash-stop",
        concurrency=20,
        handler="exit_on_poison",
    )
    runs = runs_until_settled(spec, tmp_path)
    status, out, _ = runs[-1]
    # As above: a first run that commits before it dies adds one death (seen under load in CI).
    deaths = [s for s, *_ in runs[:-1]]
    assert deaths in ([POISON_EXIT] * 4, [POISON_EXIT] * 5), deaths
    assert status not in (0, POISON_EXIT)
    assert "ended the process" in out and "no dead-letter topic" in out, out[-3000:]
    # The next run stops at the same record, with the same words, without dying on it.
    again, words, _ = one_run(spec, tmp_path, MOST_RUNS)
    assert again not in (0, POISON_EXIT) and "ended the process" in words, words[-3000:]
