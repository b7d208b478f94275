"""`lanehouse` command line: help, argument validation, import weight."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestration.cli import app

WIDE = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_produce_help_lists_every_option() -> None:
    result = CliRunner().invoke(app, ["produce", "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    for option in (
        "--topic",
        "--count",
        "--keys",
        "--rate",
        "--partitions",
        "--bootstrap",
        "--pulsar",
    ):
        assert option in result.output
    assert "KAFKA_BOOTSTRAP" in result.output


def test_broker_help_names_both_brokers_and_their_options() -> None:
    result = CliRunner().invoke(app, ["broker", "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "kafka|pulsar|both" in result.output
    for option in ("--kafka-port", "--port", "--storage", "--pulsar-port", "--pulsar-data"):
        assert option in result.output
    assert "default 9092" in result.output and "default 6650" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "pulsar", "--port", "9999"], "'--kafka-port' / '--port'"),
        (["--kind", "pulsar", "--storage", "s3://bucket/"], "'--storage'"),
        (["--pulsar-port", "6651"], "'--pulsar-port'"),
        (["--kind", "kafka", "--pulsar-data", "/tmp/x"], "'--pulsar-data'"),
        (["--kind", "zookeeper"], "'--kind'"),
    ],
)
def test_broker_options_of_a_broker_not_started_are_usage_errors(
    args: list[str], message: str
) -> None:
    """Refused before anything starts (a broker started here would outlive the test)."""
    result = CliRunner().invoke(app, ["broker", *args], env=WIDE)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_bad_topic_name_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        app, ["produce", "--topic", "../x", "--count", "1", "--keys", "1"], env=WIDE
    )
    assert result.exit_code == 2, result.output
    assert "invalid topic name" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "a/b"], "invalid Pulsar topic"),
        (["--topic", "t", "--partitions", "2"], "a Pulsar topic is created unpartitioned"),
        (["--topic", "t", "--pulsar", "http://127.0.0.1:6650"], "not a Pulsar service URL"),
    ],
)
def test_bad_pulsar_produce_arguments_are_usage_errors(args: list[str], message: str) -> None:
    """Refused before any client exists (a connection attempt would take seconds)."""
    pulsar = [] if "--pulsar" in args else ["--pulsar", "pulsar://127.0.0.1:1"]
    result = CliRunner().invoke(
        app, ["produce", *pulsar, "--count", "1", "--keys", "1", *args], env=WIDE
    )
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name --clicks-topic, --orders-topic or both"),
        (["--clicks-topic", "../x"], "invalid topic name"),
        (["--orders-topic", "o", "--pulsar", "http://127.0.0.1:6650"], "not a Pulsar service URL"),
        (["--clicks-topic", "c", "--malformed", "1.5"], "--malformed"),
    ],
)
def test_bad_shop_arguments_are_usage_errors(args: list[str], message: str) -> None:
    """Refused before any client exists (the bootstrap is unreachable on purpose)."""
    result = CliRunner().invoke(app, ["shop", "--bootstrap", "127.0.0.1:1", *args], env=WIDE)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_dead_letter_commands_check_a_pulsar_workload_before_any_client(tmp_path: Path) -> None:
    """Refused before any client exists (the service URL is unreachable on purpose)."""
    spec = (
        "name: {name}\n"
        "source: {{kind: pulsar, service_url: 'pulsar://127.0.0.1:1', topics: [orders]}}\n"
        "handler: consumers.dev.examples:enrich\n"
    )
    (tmp_path / "orders.yaml").write_text(
        spec.format(name="orders") + "dead_letter: {topic: orders.dlq}\n"
    )
    (tmp_path / "plain.yaml").write_text(spec.format(name="plain"))
    for args, message in [
        (["list", "plain"], "workload 'plain' has no dead-letter topic"),
        (["replay", "orders", "--to", "orders.dlq"], "is the dead-letter topic itself"),
        (["replay", "orders", "--to", "a/b"], "'--to'"),
    ]:
        result = CliRunner().invoke(
            app, ["dead-letters", *args, "--specs", str(tmp_path)], env=WIDE
        )
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_non_positive_rate_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        app, ["produce", "--topic", "t", "--count", "1", "--keys", "1", "--rate", "0"], env=WIDE
    )
    assert result.exit_code == 2, result.output
    assert "must be positive" in result.output


def test_cli_module_does_not_import_dagster_spark_pulsar_or_sqlalchemy() -> None:
    """`lanehouse --help` and Kafka commands start fast; Pulsar commands load pulsar-client,
    and `permits status` or a shared pool SQLAlchemy (~0.3 s of every `lanehouse consume`)."""
    wanted = "{'dagster', 'pyspark', 'pulsar', 'sqlalchemy'}"
    code = f"import sys, orchestration.cli; print(sorted({wanted} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("verbose", [False, True])
def test_dagster_beta_notices_show_only_when_verbose(verbose: bool) -> None:
    from dagster import BetaWarning, PreviewWarning

    from orchestration.cli.terminal import quiet_dependencies

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with quiet_dependencies(verbose):
            warnings.warn("backfill_policy is in beta", BetaWarning, stacklevel=1)
            warnings.warn("a preview API", PreviewWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
    kinds = [w.category for w in shown]
    assert kinds == ([BetaWarning, PreviewWarning, UserWarning] if verbose else [UserWarning])
