"""`lanehouse validate` and `lanehouse consume` refuse bad specs before any record is read."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from consumers.backends.kafka import committed_offsets
from consumers.embedded.tansu import TEST_CLIENT_CONFIG, TansuBroker
from consumers.sample import produce_sample
from orchestration.cli import app
from tests.backends import assert_all_committed
from tests.helpers import free_port

pytestmark = pytest.mark.integration

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def spec_text(bootstrap: str, topic: str, group: str, **overrides: str) -> str:
    config = "".join(f"\n    {k}: {v}" for k, v in TEST_CLIENT_CONFIG.items())
    fields = {
        "name": "cli-test",
        "handler": "consumers.examples:enrich",
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


def test_validate_accepts_the_example_workloads() -> None:
    result = CliRunner().invoke(app, ["validate", "workloads"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "ok  clickstream" in result.output


def test_consume_runs_to_idle_and_serves_metrics(
    kafka_broker: TansuBroker, topic_factory, tmp_path: Path
) -> None:
    topic = topic_factory(2)
    produce_sample(kafka_broker.bootstrap, topic, 500, keys=10)
    spec = tmp_path / "ok.yaml"
    spec.write_text(spec_text(kafka_broker.bootstrap, topic, "g-cli-ok"))
    port = free_port()
    scraped: list[str] = []

    import consumers.examples as examples

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
