"""`lanehouse` against real brokers: `validate` and `consume` refuse bad specs before any record
is read; `broker`, `produce` and `consume` work with Kafka and with Pulsar."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

import consumers.dev.examples as examples
from consumers import BrokerError
from consumers.backends.kafka.consumer import committed_offsets
from consumers.dev.embedded.child import accepts_tcp
from consumers.dev.embedded.pulsar import PulsarLiteBroker
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.dev.sample import produce_pulsar_sample, produce_sample
from orchestration.cli import app
from orchestration.demo.runner import pulsar_unacknowledged
from tests.backends import assert_all_committed
from tests.helpers import free_port, wait_until

pytestmark = pytest.mark.integration

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def spec_text(bootstrap: str, topic: str, group: str, **overrides: str) -> str:
    config = "".join(f"\n    {k}: {v}" for k, v in TEST_CLIENT_CONFIG.items())
    fields = {
        "name": "cli-test",
        "handler": "consumers.dev.examples:enrich",
        **overrides,
    }
    extra = "".join(f"{k}: {v}\n" for k, v in fields.items() if k not in ("name", "handler"))
    return (
        f"name: {fields['name']}\n"
        f"source:\n  kind: kafka\n  bootstrap_servers: {bootstrap}\n  topics: [{topic}]\n"
        f"  group: {group}\n  config:{config}\n"
        f"handler: {fields['handler']}\n{extra}"
    )


BAD = {
    "unknown_field": ({"colour": "blue"}, "colour"),
    "bad_name": ({"name": '"../x"'}, "name"),
    "unimportable_handler": ({"handler": "no_such_module.handlers:run"}, "handler"),
    "missing_env_var": ({"timeout": "${LANEHOUSE_TEST_UNSET_VAR}"}, "timeout"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_spec_fails_validate_and_consume_before_reading(
    case: str, kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(1)
    produce_sample(kafka_broker.bootstrap, topic, 10, keys=2)
    overrides, field = BAD[case]
    spec = tmp_path / f"{case}.yaml"
    spec.write_text(spec_text(kafka_broker.bootstrap, topic, f"g-{case}", **overrides))

    for command in (["validate", str(spec)], ["consume", str(spec), "--until-idle", "1"]):
        result = CliRunner().invoke(app, command, env=ENV)
        assert result.exit_code == 2, result.output
        assert str(spec) in result.output and field in result.output, result.output

    # Nothing was read: the group never committed anything.
    assert committed_offsets(kafka_broker.bootstrap, f"g-{case}", topic, 1) == {0: -1001}


def test_a_copied_landing_workload_is_refused_before_anything_lands(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    """Issue #31: a copy of a landing spec under a new name and group would land every record
    of the topic a second time into the same dataset."""
    topic = topic_factory(1)
    produce_sample(kafka_broker.bootstrap, topic, 10, keys=2)
    specs = tmp_path / "workloads"
    specs.mkdir()
    files = []
    for name in ("clicks", "clicks-v2"):
        text = spec_text(kafka_broker.bootstrap, topic, f"g-{name}", name=name)
        files.append(specs / f"{name}.yaml")
        files[-1].write_text(text + "landing: {dataset: clicks}\n")
    lake = tmp_path / "lake"
    env = {**ENV, "LANEHOUSE_LAKE": str(lake)}

    for command in (["validate", str(specs)], ["consume", str(specs), "--until-idle", "1"]):
        result = CliRunner().invoke(app, command, env=env)
        assert result.exit_code == 2, result.output
        text = " ".join(result.output.split())
        assert all(str(file) in text for file in files), text
        assert f"both land topic '{topic}'" in text and "into dataset 'clicks'" in text, text

    # Nothing was read or landed.
    assert not lake.exists()
    for name in ("clicks", "clicks-v2"):
        assert committed_offsets(kafka_broker.bootstrap, f"g-{name}", topic, 1) == {0: -1001}

    # Landing into a second dataset is the way to run both.
    files[1].write_text(files[1].read_text().replace("dataset: clicks", "dataset: clicks_v2"))
    result = CliRunner().invoke(app, ["validate", str(specs)], env=env)
    assert result.exit_code == 0, result.output


def test_validate_accepts_the_example_workloads() -> None:
    env = {
        **ENV,
        "KAFKA_BOOTSTRAP": "kafka.example:9092",
        "PULSAR_URL": "pulsar://pulsar.example:6650",
    }
    result = CliRunner().invoke(app, ["validate", "workloads"], env=env)
    assert result.exit_code == 0, result.output
    assert (
        "ok  clickstream: kafka clickstream.events at kafka.example:9092 (cluster kafka), "
        "group lanehouse.clickstream (enabled)"
    ) in result.output
    assert (
        "ok  orders: pulsar persistent://public/default/orders at pulsar://pulsar.example:6650 "
        "(cluster pulsar), shared subscription lanehouse.orders (enabled)"
    ) in result.output


def test_consume_runs_to_idle_and_serves_metrics(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(2)
    produce_sample(kafka_broker.bootstrap, topic, 500, keys=10)
    spec = tmp_path / "ok.yaml"
    spec.write_text(spec_text(kafka_broker.bootstrap, topic, "g-cli-ok"))
    port = free_port()
    scraped: list[str] = []

    import consumers.dev.examples as examples

    original = examples.ORDER.observe

    def observe_and_scrape(key: bytes | None, seq: int) -> None:
        original(key, seq)
        if examples.ORDER.handled == 250:  # mid-run, from the handler's own thread
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                scraped.append(resp.read().decode())

    examples.ORDER.reset()
    examples.ORDER.observe = observe_and_scrape  # type: ignore[method-assign]
    try:
        result = CliRunner().invoke(
            app,
            ["consume", str(spec), "--until-idle", "1", "--metrics-port", str(port)],
            env=ENV,
        )
    finally:
        examples.ORDER.observe = original  # type: ignore[method-assign]
    assert result.exit_code == 0, result.output
    assert "cli-test: consumed 500 completed 500 failed 0" in result.output
    assert_all_committed(kafka_broker.bootstrap, "g-cli-ok", topic, 2)
    [text] = scraped
    assert 'lanehouse_records_consumed_total{workload="cli-test"}' in text
    assert "lanehouse_partition_buffered" in text and "lanehouse_pool_size" in text


# --------------------------------------------------------------------------- Pulsar


def test_broker_kind_both_serves_kafka_and_pulsar_until_sigterm(tmp_path: Path) -> None:
    kafka_port, pulsar_port, data = free_port(), free_port(), tmp_path / "pulsar-data"
    out = tmp_path / "out.txt"
    command = [sys.executable, "-m", "orchestration.cli", "broker", "--kind", "both"]
    command += ["--port", str(kafka_port), "--pulsar-port", str(pulsar_port)]
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [*command, "--pulsar-data", str(data)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"pulsar://127.0.0.1:{pulsar_port}"
    try:
        wait_until(
            lambda: f"Pulsar service URL: {url}" in out.read_text(),
            timeout=30,
            message="`lanehouse broker --kind both` did not print its Pulsar URL",
        )
        assert f"Kafka bootstrap: 127.0.0.1:{kafka_port}" in out.read_text()
        AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"}).list_topics(timeout=5)
        assert produce_pulsar_sample(url, "probe", 10, 2).records == 10
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert "Tansu stopped." in text and "pulsar-lite stopped." in text, text
    wait_until(lambda: not accepts_tcp(kafka_port) and not accepts_tcp(pulsar_port), timeout=5)
    assert (data / "pulsar-lite.log").exists(), "a --pulsar-data directory is kept"


def pulsar_spec_text(url: str, topic: str, subscription: str) -> str:
    return (
        "name: cli-pulsar\n"
        f"source:\n  kind: pulsar\n  service_url: {url}\n  topics: [{topic}]\n"
        f"  subscription: {subscription}\n"
        "handler: consumers.dev.examples:enrich\n"
    )


def test_produce_to_pulsar_then_consume_acknowledges_everything(
    pulsar_broker: PulsarLiteBroker, tmp_path: Path
) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    full = f"persistent://public/default/{topic}"
    runner = CliRunner()
    args = ["--pulsar", pulsar_broker.url, "--topic", topic, "--count", "2000", "--keys", "10"]
    produced = runner.invoke(app, ["produce", *args], env=ENV)
    assert produced.exit_code == 0, produced.output
    assert f"produced 2000 records over 10 keys to {full}" in produced.output

    spec = tmp_path / "pulsar.yaml"
    spec.write_text(pulsar_spec_text(pulsar_broker.url, full, "cli-sub"))
    examples.ORDER.reset()
    consumed = runner.invoke(app, ["consume", str(spec), "--until-idle", "1"], env=ENV)
    assert consumed.exit_code == 0, consumed.output
    assert "cli-pulsar: consumed 2000 completed 2000 failed 0" in consumed.output
    # Keys arrived (ten of them) and every key's records in its sequence order.
    assert set(examples.ORDER.last) == {f"k{i}".encode() for i in range(10)}
    assert examples.ORDER.handled == 2000 and not examples.ORDER.violations
    assert pulsar_unacknowledged(pulsar_broker.url, full, "cli-sub") == 0


def test_produce_to_an_unreachable_pulsar_is_a_broker_error() -> None:
    with pytest.raises(BrokerError, match="cannot write to 'persistent://public/default/x'"):
        produce_pulsar_sample(
            f"pulsar://127.0.0.1:{free_port()}",
            "x",
            10,
            2,
            client_options={"operation_timeout_seconds": 1},
        )
