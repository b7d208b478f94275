"""`lanehouse` command line: help, argument validation, import weight."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from orchestration.cli import app

WIDE = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_produce_help_lists_every_option() -> None:
    result = CliRunner().invoke(app, ["produce", "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    for option in ("--topic", "--count", "--keys", "--rate", "--partitions", "--bootstrap"):
        assert option in result.output
    assert "KAFKA_BOOTSTRAP" in result.output


def test_bad_topic_name_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        app, ["produce", "--topic", "../x", "--count", "1", "--keys", "1"], env=WIDE
    )
    assert result.exit_code == 2, result.output
    assert "invalid topic name" in result.output


def test_non_positive_rate_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        app, ["produce", "--topic", "t", "--count", "1", "--keys", "1", "--rate", "0"], env=WIDE
    )
    assert result.exit_code == 2, result.output
    assert "must be positive" in result.output


def test_cli_module_does_not_import_dagster_or_spark() -> None:
    code = "import sys, orchestration.cli; print(sorted({'dagster', 'pyspark'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
