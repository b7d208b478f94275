"""deploy/ (the compose stack's Dagster instance, workspace and platform config) and the commands
docker-compose.yml runs: checked here because Docker does not run on the build machines, so a
typo would otherwise only show on a production host."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from orchestration.local.instance import instance_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SERVICES: dict[str, dict[str, Any]] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())[
    "services"
]
POSTGRES_ENV = {
    "POSTGRES_HOST": "postgres",
    "POSTGRES_PORT": "5432",
    "POSTGRES_USER": "lanehouse",
    "POSTGRES_PASSWORD": "hunter2",
    "POSTGRES_DB": "lanehouse",
}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return data


# --------------------------------------------------------------------------- dagster.yaml


def test_production_instance_has_lanehouses_run_limits() -> None:
    """Same queue rules as `lanehouse up`: consumer runs never end, so no limit on runs in
    progress, Spark and replays limited by tag and pool, run monitoring on."""
    production = load("dagster.yaml")
    for section, expected in instance_config().items():
        assert production.get(section) == expected, f"deploy/dagster.yaml: {section}"


def test_production_instance_stores_everything_in_postgres_from_the_environment() -> None:
    db = dict(load("dagster.yaml")["storage"]["postgres"]["postgres_db"])
    # SQLAlchemy 2.1's default driver for postgresql:// is psycopg 3, which is not installed.
    assert db.pop("scheme") == "postgresql+psycopg2"
    assert set(db) == {"hostname", "port", "username", "password", "db_name"}
    for field, value in db.items():
        assert isinstance(value, dict) and set(value) == {"env"}, f"{field} is not from env"


def test_production_instance_is_valid_dagster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster._core.instance.config import dagster_instance_config

    for name, value in POSTGRES_ENV.items():
        monkeypatch.setenv(name, value)
    config, instance_class = dagster_instance_config(str(DEPLOY))
    assert instance_class is None
    assert config["concurrency"]["runs"]["max_concurrent_runs"] == -1


def test_workspace_points_at_the_code_server_compose_runs() -> None:
    (entry,) = load("workspace.yaml")["load_from"]
    server = entry["grpc_server"]
    command = SERVICES["dagster-code"]["command"]
    assert server["host"] == "dagster-code"
    assert str(server["port"]) == command[command.index("-p") + 1]
    assert server["location_name"] == command[command.index("--location-name") + 1]


# --------------------------------------------------------------------------- lanehouse.yaml


def test_platform_config_shares_the_default_pool_through_postgres() -> None:
    from consumers.config.platform import load_platform_config

    config = load_platform_config(DEPLOY / "lanehouse.yaml", env=POSTGRES_ENV)
    assert config.permits.url == ("postgresql+psycopg2://lanehouse:hunter2@postgres:5432/lanehouse")
    assert config.permits.pools["default"].size == 500
    assert "hunter2" not in (DEPLOY / "lanehouse.yaml").read_text()


# --------------------------------------------------------------------------- commands


def _parse(program: str, args: list[str]) -> tuple[int, str]:
    """Run a console script of the Lanehouse image in-process: (exit code, output)."""
    if program == "lanehouse":  # typer's own runner: typer ships its own click
        from typer.testing import CliRunner as TyperRunner

        from orchestration.cli import app

        typer_result = TyperRunner().invoke(app, args)
        return typer_result.exit_code, typer_result.output
    command: click.Command
    if program == "dagster":
        from dagster._cli import cli as command
    elif program == "dagster-daemon":
        from dagster._daemon.cli import cli as command
    elif program == "dagster-webserver":
        from dagster_webserver.cli import create_dagster_webserver_cli

        command = create_dagster_webserver_cli()  # type: ignore[no-untyped-call]
    else:
        raise AssertionError(f"no CLI known for {program!r}")
    result = CliRunner().invoke(command, args)
    return result.exit_code, result.output


def _image_commands() -> list[tuple[str, list[str]]]:
    """Every command and CMD health check the Lanehouse image runs in the compose stack."""
    found: list[tuple[str, list[str]]] = []
    for name, service in SERVICES.items():
        if "build" not in service:
            continue
        found.append((f"{name}: command", list(service["command"])))
        test = service["healthcheck"]["test"]
        if test[0] == "CMD" and test[1] != "python":
            found.append((f"{name}: healthcheck", list(test[1:])))
    return found


@pytest.mark.parametrize(("where", "argv"), _image_commands(), ids=lambda v: str(v)[:40])
def test_commands_and_health_checks_exist_with_these_options(where: str, argv: list[str]) -> None:
    """Parsing ``argv + --help`` fails on an unknown command or option without running it."""
    program, *args = argv
    if program == "spark-class":  # pyspark's launcher, installed next to the interpreter
        assert shutil.which(program, path=str(Path(sys.executable).parent)), where
        return
    exit_code, output = _parse(program, [*args, "--help"])
    assert exit_code == 0, f"{where}: {' '.join(argv)}\n{output}"


def test_the_option_check_rejects_a_misspelled_option() -> None:
    """Guards the test above: an unknown option really fails to parse."""
    assert _parse("dagster", ["api", "grpc-health-check", "--prot", "1"])[0] != 0
    assert _parse("lanehouse", ["consume", "workloads", "--metrics-prot", "1", "--help"])[0] != 0


def test_spark_home_in_the_image_is_where_pip_puts_pyspark() -> None:
    """spark-class (the cluster's master and workers) needs SPARK_HOME = pyspark's directory;
    its path names the Python version, so it must follow the base image's."""
    import pyspark

    dockerfile = (ROOT / "Dockerfile").read_text()
    site = Path(pyspark.__file__).resolve().parent.relative_to(Path(sys.prefix).resolve())
    assert f"SPARK_HOME=/usr/local/{site.as_posix()}" in dockerfile
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert re.search(rf"^FROM python:{re.escape(python)}\.\d+-slim-\w+$", dockerfile, re.M)


def test_env_example_spark_properties_are_accepted() -> None:
    """The example's JSON survives .env quoting (single quotes: taken literally by compose)."""
    from orchestration.lake.spark_config import SPARK_CONF_ENV, extra_spark_conf

    (line,) = [
        line
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line.startswith(f"{SPARK_CONF_ENV}=")
    ]
    value = line.partition("=")[2]
    assert value.startswith("'") and value.endswith("'")
    conf = extra_spark_conf({SPARK_CONF_ENV: value[1:-1]})
    assert {"spark.executor.memory", "spark.cores.max"} <= set(conf)
