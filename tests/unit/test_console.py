"""``orchestration/console.py``: an error raised on purpose is one red line, its place under it,
and an exit status, never a traceback."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from consumers import BrokerError, SpecError, TopicMissing
from orchestration.console import exits_on

pytestmark = pytest.mark.unit


def run(error: Exception) -> tuple[int, str]:
    app = typer.Typer()

    @app.command()
    def fail() -> None:
        with exits_on():
            raise error

    result = CliRunner().invoke(app, [], env={"NO_COLOR": "1", "COLUMNS": "200"})
    return result.exit_code, result.output


def test_an_error_with_a_place_prints_it_under_the_message() -> None:
    code, out = run(TopicMissing("topic 'orders' does not exist on k:9092", topic="orders"))
    assert code == 1
    assert out.splitlines() == [
        "error: topic 'orders' does not exist on k:9092",
        "  topic orders · running again will not help",
    ]
    assert "Traceback" not in out


def test_an_error_without_a_place_is_one_line() -> None:
    assert run(BrokerError("cannot read topic metadata"))[1].splitlines() == [
        "error: cannot read topic metadata"
    ]
    assert run(SpecError("a.yaml", "handler", "required"))[1].splitlines() == [
        "error: a.yaml: handler: required"
    ]


def test_a_long_path_stays_on_its_line_at_any_width() -> None:
    """Not folded at the console's width (80 columns when it is not a terminal): a path split
    over two lines can neither be copied nor found with grep."""
    path = "/tmp/" + "/".join(["a-rather-long-directory-name"] * 6) + "/bad.yaml"
    app = typer.Typer()

    @app.command()
    def fail() -> None:
        with exits_on():
            raise SpecError(path, "source", "this field is required")

    out = CliRunner().invoke(app, [], env={"NO_COLOR": "1", "COLUMNS": "60"}).output
    assert out.splitlines() == [f"error: {path}: source: this field is required"]
