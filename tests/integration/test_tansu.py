"""The embedded Tansu broker, the sample producer and the `lanehouse broker` command, for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # no stubs installed
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from consumers import BrokerError
from consumers.dev.embedded import tansu
from consumers.dev.embedded.child import accepts_tcp
from consumers.dev.embedded.tansu import (
    TEST_CLIENT_CONFIG,
    TansuBroker,
    create_topic,
    start_tansu,
)
from consumers.dev.sample import produce_sample
from orchestration.cli import app
from tests.conftest import TopicFactory
from tests.helpers import free_port, wait_until
from tests.support.platform_up import REPO, alive, listeners

pytestmark = pytest.mark.integration


def _read_all(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> list[tuple[int, bytes, dict[str, object]]]:
    """Assign every partition from the start (no group) and read ``expected`` records."""
    consumer = Consumer(
        {
            **TEST_CLIENT_CONFIG,
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[tuple[int, bytes, dict[str, object]]] = []
    deadline = time.monotonic() + 30
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.2):
                assert msg.error() is None, msg.error()
                partition, key, value = msg.partition(), msg.key(), msg.value()
                assert partition is not None and key is not None and value is not None
                records.append((partition, key, json.loads(value)))
    finally:
        consumer.close()
    return records


def test_broker_starts_and_answers(kafka_broker: TansuBroker) -> None:
    assert kafka_broker.alive()
    assert kafka_broker.bootstrap == f"127.0.0.1:{kafka_broker.port}"
    metadata = AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=5)
    assert len(metadata.brokers) == 1


def test_sample_round_trip_keeps_per_key_order(kafka_broker: TansuBroker) -> None:
    topic = f"sample-{uuid.uuid4().hex[:8]}"
    summary = produce_sample(kafka_broker.bootstrap, topic, 10_000, 100, partitions=4)
    assert (summary.records, summary.keys, summary.topic) == (10_000, 100, topic)
    assert create_topic(kafka_broker.bootstrap, topic, 4, exist_ok=True) == 4

    records = _read_all(kafka_broker.bootstrap, topic, 4, 10_000)

    assert len(records) == 10_000
    seqs: dict[str, list[int]] = defaultdict(list)
    partitions_of: dict[str, set[int]] = defaultdict(set)
    for partition, raw_key, value in records:
        key = raw_key.decode()
        assert key == value["key"]
        assert isinstance(value["ts"], int) and isinstance(value["seq"], int)
        seqs[key].append(value["seq"])
        partitions_of[key].add(partition)
    assert sorted(seqs) == sorted(f"k{i}" for i in range(100))
    for key, got in seqs.items():
        assert got == list(range(100)), f"{key}: sequence not 0..99 in order"
        assert len(partitions_of[key]) == 1, f"{key} spread over {partitions_of[key]}"
    assert len({p for ps in partitions_of.values() for p in ps}) == 4


def test_value_size_pads_values(kafka_broker: TansuBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    produce_sample(kafka_broker.bootstrap, topic, 50, 5, value_size=300)
    records = _read_all(kafka_broker.bootstrap, topic, 1, 50)
    assert len(records) == 50
    assert all(len(json.dumps(value, separators=(",", ":"))) == 300 for _, _, value in records)


def test_second_broker_on_same_port_raises(kafka_broker: TansuBroker) -> None:
    with pytest.raises(BrokerError, match="already in use"):
        start_tansu(kafka_broker.port)
    assert kafka_broker.alive()


def test_port_race_is_detected_even_though_tansu_exits_0(
    kafka_broker: TansuBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Skip the pre-check, as if another broker grabbed the port between check and bind.
    monkeypatch.setattr(tansu, "_port_is_free", lambda port: True)
    with pytest.raises(BrokerError, match=r"exited with status 0.*already in use"):
        start_tansu(kafka_broker.port)
    assert kafka_broker.alive()


@pytest.mark.parametrize("name", ["../x", "", ".", "a/b", "x" * 250])
def test_topic_names_are_validated_before_any_request(kafka_broker: TansuBroker, name: str) -> None:
    with pytest.raises(ValueError, match="invalid topic name"):
        create_topic(kafka_broker.bootstrap, name, 1)
    with pytest.raises(ValueError, match="invalid topic name"):
        produce_sample(kafka_broker.bootstrap, name, 1, 1)


def test_create_topic_exist_ok(kafka_broker: TansuBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    with pytest.raises(BrokerError, match="already exists"):
        create_topic(kafka_broker.bootstrap, topic, 2)
    assert create_topic(kafka_broker.bootstrap, topic, 3, exist_ok=True) == 2


def test_stop_is_clean_and_kill_is_a_crash(tmp_path: Path) -> None:
    with start_tansu(log_dir=tmp_path) as broker:
        port = broker.port
    assert broker.returncode == 0
    assert not accepts_tcp(port)
    assert (tmp_path / f"tansu-{port}.log").exists(), "caller-chosen log dir must be kept"

    broker = start_tansu()
    log_dir = broker.log_path.parent
    assert broker.kill() == -signal.SIGKILL
    assert not log_dir.exists(), "the broker's own temp dir is removed when it stops"


@pytest.mark.parametrize("how", ["ctrl-c", "kill -9"])
def test_broker_has_a_session_of_its_own_and_leaves_with_its_parent(
    how: str, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C reaches only the parent (``lanehouse up`` stops its brokers after the
    runs' final commits); the parent stops the broker at exit, or Linux does if it is killed."""
    script = (  # the log in pytest's temp dir: a killed parent cannot remove a dir of its own
        "import signal, sys; from pathlib import Path; "
        "from consumers.dev.embedded.tansu import start_tansu; "
        "b = start_tansu(log_dir=Path(sys.argv[1])); print(b.pid, b.port, flush=True); "
        "signal.pause()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        process_group=0,  # the terminal's foreground job, without pytest
    )
    try:
        assert parent.stdout is not None
        pid, port = map(int, parent.stdout.readline().split())
        broker = psutil.Process(pid)
        assert os.getsid(pid) == pid != os.getsid(parent.pid)
        assert [(x.ip, x.port) for x in listeners(pid, descendants=False)] == [("127.0.0.1", port)]
        if how == "ctrl-c":
            os.killpg(parent.pid, signal.SIGINT)
        else:
            parent.kill()
        parent.wait(timeout=30)
        wait_until(lambda: not alive(broker), timeout=10, message=f"Tansu ended after {how}")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_cli_broker_runs_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", "broker", "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: f"Kafka bootstrap: 127.0.0.1:{port}" in out.read_text(),
            timeout=30,
            message="`lanehouse broker` did not print its bootstrap address",
        )
        AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Tansu stopped." in out.read_text()
    wait_until(lambda: not accepts_tcp(port), timeout=5, message="broker still listening")


def test_cli_produce(kafka_broker: TansuBroker, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=2)
    args = ["produce", "--topic", topic, "--count", "2000", "--keys", "10"]
    result = CliRunner().invoke(app, [*args, "--bootstrap", kafka_broker.bootstrap])
    assert result.exit_code == 0, result.output
    assert f"produced 2000 records over 10 keys to {topic}" in result.output
    assert len(_read_all(kafka_broker.bootstrap, topic, 2, 2000)) == 2000


@pytest.mark.slow  # waits out the 10 s admin request timeout
def test_cli_produce_reports_unreachable_broker_as_error() -> None:
    result = CliRunner().invoke(
        app,
        ["produce", "--topic", "nowhere", "--count", "1", "--keys", "1", "--partitions", "1"],
        env={"KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"},
    )
    assert result.exit_code == 1, result.output
    assert "error:" in result.output
