"""``lanehouse backfill`` argument checks, and the GraphQL request it would send (no server)."""

from __future__ import annotations

from datetime import date

import pytest
from typer.testing import CliRunner

from orchestration.cli import app
from orchestration.shop.backfill import backfill_variables, day_range, selected_assets

pytestmark = pytest.mark.unit


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["backfill", *args])
    return result.exit_code, " ".join(result.output.split())  # rich wraps long lines


def test_an_unknown_asset_exits_2_listing_the_valid_ones() -> None:
    code, output = invoke("clean_clickz", "--from", "2026-03-01", "--to", "2026-03-02")
    assert code == 2
    assert "unknown Spark asset(s) 'clean_clickz'" in output
    assert "valid: clean_clicks, click_quarantine, click_duplicates, clean_orders" in output


@pytest.mark.parametrize(
    ("first", "last", "message"),
    [
        ("2026-3-1x", "2026-03-02", "--from: '2026-3-1x' is not a date like 2026-03-01"),
        ("2026-03-01", "tomorrow", "--to: 'tomorrow' is not a date"),
        ("2026-03-02", "2026-03-01", "--from 2026-03-02 is after --to 2026-03-01"),
        ("2025-12-31", "2026-01-02", "days must be within the lake's partitions, 2026-01-01 to"),
        ("2026-03-01", "2099-01-01", "days must be within the lake's partitions"),
    ],
)
def test_bad_days_exit_2_saying_why(first: str, last: str, message: str) -> None:
    code, output = invoke("sessions", "--from", first, "--to", last, "--in-process")
    assert code == 2
    assert message in output


def test_missing_options_are_usage_errors() -> None:
    code, output = invoke("sessions", "--from", "2026-03-01")
    assert code == 2 and "--to" in output


def test_a_multi_asset_member_brings_its_siblings() -> None:
    assert selected_assets(["sessions", "click_quarantine"]) == [
        "clean_clicks",
        "click_quarantine",
        "click_duplicates",
        "sessions",
    ]
    with pytest.raises(ValueError, match=r"\(none given\)"):
        selected_assets([])


def test_day_range_is_inclusive() -> None:
    days = day_range("2026-02-27", "2026-03-01", today=date(2026, 3, 1))
    assert days == [date(2026, 2, 27), date(2026, 2, 28), date(2026, 3, 1)]


def test_the_backfill_request_selects_the_assets_over_the_days() -> None:
    variables = backfill_variables(["sessions"], [date(2026, 3, 1), date(2026, 3, 2)])
    assert variables == {
        "params": {
            "assetSelection": [{"path": ["sessions"]}],
            "partitionNames": ["2026-03-01", "2026-03-02"],
            "tags": [{"key": "lanehouse/spark", "value": "backfill"}],
            "title": "lanehouse backfill 2026-03-01..2026-03-02",
        }
    }
