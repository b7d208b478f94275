"""``lanehouse permits status``: pools and leases read from the database of the config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from consumers.permits.store import LeaseReport, PermitStore
from orchestration.cli import app

pytestmark = pytest.mark.unit

WIDE = {"COLUMNS": "200"}  # one table row per line


@pytest.fixture
def config(tmp_path: Path) -> Path:
    url = f"sqlite:///{tmp_path / 'permits.db'}"
    store = PermitStore(url)
    store.declare_pools({"api": 10})
    store.renew("api", "host:1:aa", [LeaseReport("refunds", 2.0, 50, 8, 3, 3, 1.5)], ttl=60)
    path = tmp_path / "lanehouse.yaml"
    path.write_text(f"permits:\n  url: {url}\n  pools: {{api: {{size: 10}}}}\n")
    return path


def test_status_shows_pools_and_leases(config: Path) -> None:
    result = CliRunner().invoke(app, ["permits", "status", "--config", str(config)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "pool api: size 10, granted 8, in use 3, demand 8" in result.output
    assert "refunds" in result.output and "host:1:aa" in result.output


def test_status_as_json(config: Path) -> None:
    result = CliRunner().invoke(app, ["permits", "status", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    [pool] = json.loads(result.stdout)
    [lease] = pool["leases"]
    assert (pool["size"], lease["workload"], lease["granted"], lease["in_use"]) == (
        10,
        "refunds",
        8,
        3,
    )
    assert 0 < lease["expires_in"] <= 60


def test_bad_config_and_json_with_watch_are_usage_errors(tmp_path: Path, config: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("permits: {url: 'mysql://x'}\n")
    result = CliRunner().invoke(app, ["permits", "status", "--config", str(bad)])
    assert result.exit_code == 1
    assert "permits.url" in result.output
    result = CliRunner().invoke(
        app, ["permits", "status", "--config", str(config), "--json", "--watch"]
    )
    assert result.exit_code == 2


def test_the_table_fits_80_columns_without_cutting_names(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'permits.db'}"
    store = PermitStore(url)
    store.declare_pools({"payments-api": 40})
    holder = "worker-7.prod.example.internal:123456:0123456789abcdef"
    store.renew(
        "payments-api", holder, [LeaseReport("payments-refunds-eu", 2.0, 50, 8, 3, 3, 1.5)], 60
    )
    path = tmp_path / "lanehouse.yaml"
    path.write_text(f"permits:\n  url: {url}\n  pools: {{payments-api: {{size: 40}}}}\n")
    result = CliRunner().invoke(
        app, ["permits", "status", "--config", str(path)], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.output
    assert any(line.split()[:2] == ["payments-refunds-eu", "2"] for line in lines if line.strip())
    # The holder may wrap inside its column, but every character of it is there, in order.
    assert holder in "".join(
        line.split()[0] for line in lines if line.strip() and line.startswith(" ")
    )
