"""The topic itself changes under a running workload: deleted and created again with the same
name. Checked by the suite's one verifier (``verifier.py``) on the new incarnation, and the lake
read back per incarnation (``_topic_id``)."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.embedded.tansu import TansuBroker, create_topic
from consumers.dev.sample import produce_sample
from tests.helpers import free_port, wait_until
from tests.landing import landed
from tests.reliability.faults import SOAK, fill
from tests.reliability.verifier import CommitSampler, verify
from tests.support.processes import finish, lines, start_consumer, write_spec

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 200


def test_a_topic_deleted_and_recreated_under_a_landing_workload(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """The topic is deleted while a landing workload reads it, then created again and filled
    with new records. The run that had it ends (on Tansu, librdkafka crashes on the broker's
    answer to a fetch for the deleted topic; a live client elsewhere does not follow the new
    incarnation either: docs/reliability.md), and the next run, as the sensor would start it,
    reads the new incarnation from its start: nothing of it lost, key order, commits, and
    the lake holding both incarnations apart, each offset once."""
    count = 50_000 if SOAK else 8_000
    topic = topic_factory(PARTITIONS)
    produce_sample(kafka_broker.bootstrap, topic, count, KEYS)
    group, lake = "g-recreated", tmp_path / "lake"
    landing = "landing: {dataset: events, flush_rows: 500, flush_interval: 200ms}\n"
    spec = write_spec(tmp_path / "spec.yaml", kafka_broker, topic, group, 50, extra=landing)
    env = {"LANEHOUSE_LAKE": str(lake)}
    before = tmp_path / "before.txt"
    proc = start_consumer(spec, before, 0.02, env=env)  # ~2,000 records/s: deleted mid-run
    wait_until(
        lambda: (
            max(committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS).values()) > 0
        ),
        timeout=120,
        message="a commit before the delete",
    )
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    try:
        ended = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a client that survives: the restart is played by a kill
        proc.kill()
        ended = proc.wait(timeout=30)
    handled_before = lines(before)
    assert handled_before < count, "every record was handled before the delete"

    create_topic(kafka_broker.bootstrap, topic, PARTITIONS, exist_ok=True)
    records = fill(kafka_broker, topic, count, KEYS, PARTITIONS, key_prefix="n")
    after = tmp_path / "after.txt"
    with CommitSampler(kafka_broker.bootstrap, group, topic, PARTITIONS) as sampler:
        command = ("--until-idle", "2", "--log-level", "INFO")
        finish(start_consumer(spec, after, 0.0, *command, env=env))
        committed = committed_offsets(kafka_broker.bootstrap, group, topic, PARTITIONS)
        ends = log_end_offsets(kafka_broker.bootstrap, topic, PARTITIONS)
        verdict = verify(records, [after], sampler, committed, ends)

    rows = landed(lake)
    incarnations = Counter(str(r["_topic_id"]) for r in rows)
    assert len(incarnations) == 2, f"the lake should hold two incarnations: {incarnations}"
    new_id = next(str(r["_topic_id"]) for r in rows if _key(r).startswith("n"))
    new = Counter((r["_partition"], r["_offset"]) for r in rows if r["_topic_id"] == new_id)
    old = Counter((r["_partition"], r["_offset"]) for r in rows if r["_topic_id"] != new_id)
    assert set(new) == {(p, o) for p, end in ends.items() for o in range(end)}, "new lost"
    assert max(new.values()) == 1, "a record of the new incarnation landed twice"
    assert max(old.values()) == 1, "a record of the old incarnation landed twice"
    assert all(_key(r).startswith("n") for r in rows if r["_topic_id"] == new_id)
    print(
        verdict.line(
            f"topic deleted after {handled_before:,} of {count:,} records (the run ended with "
            f"{ended}) and recreated; lake: {sum(old.values()):,} old and {sum(new.values()):,} "
            "new rows apart"
        )
    )
    assert verdict.ok, verdict


def test_a_topic_recreated_under_a_live_client_is_fenced(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """The topic is deleted and recreated, and new records written, while the client lives: its
    partitions are paused (handlers hang from offset 300 on, the buffer is full), so it sends no
    fetch for the deleted topic (which crashes librdkafka on Tansu). Its positions (300) belong
    to the old log: committed onto the new topic, they would make the next run skip the new
    records below them. The engine's watch on topic ids fences the topic, so nothing of the
    old run reaches the new topic, and stops the workload; the next run reads the new topic
    whole."""
    topic = topic_factory(2)
    produce_sample(kafka_broker.bootstrap, topic, 2_000, KEYS)
    group = "g-recreated-live"
    spec = write_spec(
        tmp_path / "spec.yaml",
        kafka_broker,
        topic,
        group,
        1_000,  # more than can hang before the buffer pauses: none of offsets 0-299 waits
        handler="hang_from",
        extra="max_buffered: 100\n",
        drain_timeout="1s",
    )
    before = tmp_path / "before.txt"
    port = free_port()
    proc = start_consumer(
        spec,
        before,
        0.0,
        "--log-level",
        "INFO",
        "--metrics-port",
        str(port),
        env={"LH_HANG_FROM": "300"},
    )

    def committed() -> dict[int, int]:
        return committed_offsets(kafka_broker.bootstrap, group, topic, 2)

    def paused() -> set[str]:
        """Partitions the client was told to pause (a CI run once deleted the topic while one
        still fetched: committed 300 can come before the 400th record fills the buffer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
                text = reply.read().decode()
        except OSError:
            return set()
        return set(
            re.findall(r'^lanehouse_partition_paused\{.*partition="(\d+)".*\} 1\.0$', text, re.M)
        )

    wait_until(lambda: committed() == {0: 300, 1: 300}, timeout=60, message="pinned at 300")
    wait_until(lambda: paused() == {"0", "1"}, timeout=60, message="both partitions paused")
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    create_topic(kafka_broker.bootstrap, topic, 2)
    records = fill(kafka_broker, topic, 2_000, KEYS, 2, key_prefix="n")
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        lines_ = [x for x in out.decode(errors="replace").splitlines() if "handler failed" not in x]
        tail = "\n".join(lines_[-40:])
        raise AssertionError(f"the workload ran on after its topic was replaced:\n{tail}") from None
    log = out.decode(errors="replace")
    assert proc.returncode not in (0, -11), f"exit {proc.returncode}:\n{log[-3000:]}"
    assert f"topic '{topic}' was recreated" in log, log[-3000:]
    assert committed() == {0: -1001, 1: -1001}, "the old run committed onto the new topic"

    after = tmp_path / "after.txt"
    with CommitSampler(kafka_broker.bootstrap, group, topic, 2) as sampler:
        finish(start_consumer(spec, after, 0.0, "--until-idle", "2"))
        ends = log_end_offsets(kafka_broker.bootstrap, topic, 2)
        verdict = verify(records, [after], sampler, committed(), ends)
    print(verdict.line("topic recreated under a live client: fenced, then a new run"))
    assert verdict.ok, verdict


def _key(row: dict[str, object]) -> str:
    key = row["_key"]
    assert isinstance(key, bytes), row
    return key.decode()
