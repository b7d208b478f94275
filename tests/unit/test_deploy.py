"""deploy/ (the compose stack's Dagster instance, workspace and platform config) and the commands
docker-compose.yml runs: checked here because Docker does not run on the build machines, so a
typo would otherwise only show on a production host."""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from orchestration.local.instance import instance_config
from tests.deploy_check import check_run_launcher

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
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


def names(entries: list[dict[str, str]]) -> list[str]:
    """The chart's ``[{name: X}]`` lists as the launcher's ``[X]``."""
    return [entry["name"] for entry in entries]


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


# --------------------------------------------------------------------------- run launchers


def test_production_instance_launches_every_run_in_a_docker_container() -> None:
    check_run_launcher(DEPLOY / "dagster.yaml", "deploy/dagster.yaml")
    launcher = load("dagster.yaml")["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_docker", "DockerRunLauncher")


def test_docker_runs_get_the_compose_image_network_environment_and_mounts() -> None:
    """What the runs used to have inside dagster-code, they get in containers of their own."""
    config = load("dagster.yaml")["run_launcher"]["config"]
    code = SERVICES["dagster-code"]
    assert config["image"] == code["image"]
    assert config["network"] == COMPOSE["networks"]["default"]["name"]
    # Names only (values come from the daemon's environment): the compose services' own set;
    # the code server adds where the webserver is (its sensor reloads the location).
    assert (
        sorted(config["env_vars"])
        == sorted(COMPOSE["x-lanehouse-env"])
        == sorted(set(code["environment"]) - {"LANEHOUSE_DAGSTER_URL"})
    )
    assert code["environment"]["LANEHOUSE_DAGSTER_URL"] == "http://dagster-webserver:3000"
    assert "dagster-webserver" in SERVICES
    assert config["container_kwargs"]["volumes_from"] == [code["container_name"]]
    assert config["container_kwargs"]["init"] is True
    grace = SERVICES["consumer"]["stop_grace_period"]
    assert config["container_kwargs"]["stop_timeout"] == int(grace.removesuffix("s"))


def test_only_the_services_that_launch_runs_get_the_docker_socket() -> None:
    with_socket = {
        name
        for name, service in SERVICES.items()
        if any(
            str(volume).startswith("/var/run/docker.sock:") for volume in service.get("volumes", [])
        )
    }
    assert with_socket == {"dagster-code", "dagster-webserver", "dagster-daemon"}
    for name in with_socket:  # the image's user is not root: the socket's group, from .env
        (group,) = SERVICES[name]["group_add"]
        assert group.startswith("${DOCKER_GID:?"), name


def test_the_consumer_service_is_for_deployments_without_dagster() -> None:
    """Started only on request (profile `standalone`); Dagster's consumer runs are the default."""
    assert SERVICES["consumer"]["profiles"] == ["standalone"]
    assert [name for name, service in SERVICES.items() if "profiles" in service] == ["consumer"]


def test_the_image_installs_the_launchers_the_deploy_files_name() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    deploy = {re.split(r"[~=<>]", req)[0] for req in extras["deploy"]}
    assert {"dagster-docker", "dagster-k8s"} <= deploy
    assert deploy <= {re.split(r"[~=<>]", req)[0] for req in extras["dev"]}
    assert "['optional-dependencies']['deploy']" in (ROOT / "Dockerfile").read_text()
    for path in (DEPLOY / "dagster.yaml", KUBERNETES / "dagster-instance.yaml"):
        module = yaml.safe_load(path.read_text())["run_launcher"]["module"]
        assert module.replace("_", "-") in deploy, path


def _broken_copy(tmp_path: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    data = load("dagster.yaml")
    edit(data["run_launcher"])
    path = tmp_path / "dagster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


BROKEN: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "misspelled field": (
        lambda b: b["config"].update(netwrok=b["config"].pop("network")),
        r"run_launcher\.config\.netwrok: unknown field; DockerRunLauncher's config accepts: "
        r"container_kwargs, env_vars, image, network, networks, registry$",
    ),
    "wrong type": (
        lambda b: b["config"].update(env_vars="POSTGRES_HOST"),
        r"run_launcher\.config\.env_vars: .*must be list",
    ),
    "wrong item type": (
        lambda b: b["config"]["env_vars"].append(5432),
        r"run_launcher\.config\.env_vars\[14\]: .*not valid for expected type \"String\"",
    ),
    "missing field": (
        lambda b: b["config"].update(registry={"url": "registry.example.com"}),
        r"run_launcher\.config\.registry\.password: required field is missing$",
    ),
    "misspelled placeholder": (
        lambda b: b["config"].update(image={"evn": "LANEHOUSE_IMAGE"}),
        r"run_launcher\.config\.image\.evn: unknown field; this block accepts: env$",
    ),
    "option the launcher sets": (
        lambda b: b["config"]["container_kwargs"].update(environment={"A": "1"}),
        r"run_launcher\.config\.container_kwargs\.environment: not allowed; .*`env_vars`$",
    ),
    "unknown class": (
        lambda b: b.update({"class": "DockerLauncher"}),
        r"run_launcher\.class: dagster_docker has no configurable class 'DockerLauncher'$",
    ),
    "unknown module": (
        lambda b: b.update(module="dagster_dockr"),
        r"run_launcher\.module: cannot import 'dagster_dockr'$",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_run_launcher_fails_naming_the_file_and_the_field(
    case: str, tmp_path: Path
) -> None:
    edit, message = BROKEN[case]
    with pytest.raises(ValueError, match=r"^deploy/dagster\.yaml: " + message):
        check_run_launcher(_broken_copy(tmp_path, edit), "deploy/dagster.yaml")


def test_the_file_in_the_error_defaults_to_the_path(tmp_path: Path) -> None:
    path = _broken_copy(tmp_path, lambda b: b["config"].update(imge="x"))
    with pytest.raises(
        ValueError, match=f"^{re.escape(path.as_posix())}: run_launcher.config.imge"
    ):
        check_run_launcher(path)


def test_env_placeholders_validate_unset_and_resolve_where_the_launcher_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``{env: NAME}`` is checked for shape only; the launching process resolves it."""
    from dagster._config import process_config
    from dagster_docker import DockerRunLauncher

    monkeypatch.delenv("LANEHOUSE_IMAGE", raising=False)
    path = _broken_copy(tmp_path, lambda b: b["config"].update(image={"env": "LANEHOUSE_IMAGE"}))
    check_run_launcher(path)

    config = yaml.safe_load(path.read_text())["run_launcher"]["config"]
    monkeypatch.setenv("LANEHOUSE_IMAGE", "registry.example.com/lanehouse:0.1.0")
    result = process_config(DockerRunLauncher.config_type(), config)
    assert result.success and result.value is not None, result.errors
    assert result.value["image"] == "registry.example.com/lanehouse:0.1.0"


# --------------------------------------------------------------------------- kubernetes


def test_kubernetes_instance_launches_runs_as_kubernetes_jobs() -> None:
    check_run_launcher(
        KUBERNETES / "dagster-instance.yaml", "deploy/kubernetes/dagster-instance.yaml"
    )
    launcher = yaml.safe_load((KUBERNETES / "dagster-instance.yaml").read_text())["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")


def test_kubernetes_instance_is_valid_dagster_config_with_lanehouses_run_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster_postgres.storage import DagsterPostgresStorage

    config, instance_class = dagster_instance_config(str(KUBERNETES), "dagster-instance.yaml")
    assert instance_class is None
    # The password is a placeholder, resolved in each pod from the Secret the chart names.
    storage = config["storage"]["postgres"]
    assert storage["postgres_db"]["password"] == {"env": "DAGSTER_PG_PASSWORD"}
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "hunter2")
    resolved = process_config(DagsterPostgresStorage.config_type(), storage)
    assert resolved.success and resolved.value is not None, resolved.errors
    assert resolved.value["postgres_db"]["password"] == "hunter2"

    raw = yaml.safe_load((KUBERNETES / "dagster-instance.yaml").read_text())
    for section, expected in instance_config().items():
        assert raw.get(section) == expected, f"deploy/kubernetes/dagster-instance.yaml: {section}"


def test_a_parameter_the_launcher_requires_beyond_its_schema_is_checked(tmp_path: Path) -> None:
    """K8sRunLauncher's schema lets service_account_name out; its constructor does not."""
    data = yaml.safe_load((KUBERNETES / "dagster-instance.yaml").read_text())
    del data["run_launcher"]["config"]["service_account_name"]
    path = tmp_path / "dagster-instance.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"^x\.yaml: run_launcher\.config\.service_account_name: "):
        check_run_launcher(path, "x.yaml")


HELM = yaml.safe_load((KUBERNETES / "values.yaml").read_text())


def test_helm_values_name_a_k8s_run_launcher_the_image_and_the_secrets() -> None:
    """What can be checked without the chart's schema (not vendored) or helm."""
    assert HELM["runLauncher"]["type"] == "K8sRunLauncher"
    launcher = HELM["runLauncher"]["config"]["k8sRunLauncher"]
    assert "image" not in launcher  # a run takes its code location's image
    assert names(launcher["envSecrets"]) == ["lanehouse-secrets"]
    assert names(launcher["envConfigMaps"]) == ["lanehouse-env"]
    (deployment,) = HELM["dagster-user-deployments"]["deployments"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert deployment["image"]["repository"] and deployment["image"]["tag"] == version
    # Dagster's database password only from a Secret the team creates, never from the values.
    assert HELM["generatePostgresqlPasswordSecret"] is False
    assert HELM["global"]["postgresqlSecretName"]
    assert "postgresqlPassword" not in HELM["postgresql"]


def test_the_tap_token_reaches_the_runs_from_a_secret_never_a_value() -> None:
    """Runs bind beyond loopback, where /tap needs LANEHOUSE_TAP_TOKEN. Docker: the name only,
    copied from the daemon's environment; Kubernetes: a secretKeyRef, in the runs only."""
    assert "LANEHOUSE_TAP_TOKEN" in load("dagster.yaml")["run_launcher"]["config"]["env_vars"]
    instance = yaml.safe_load((KUBERNETES / "dagster-instance.yaml").read_text())
    written = instance["run_launcher"]["config"]["run_k8s_config"]["container_config"]["env"]
    launcher = HELM["runLauncher"]["config"]["k8sRunLauncher"]
    env = launcher["runK8sConfig"]["containerConfig"]["env"]
    assert env == written
    (token,) = [entry for entry in env if entry["name"] == "LANEHOUSE_TAP_TOKEN"]
    assert token == {
        "name": "LANEHOUSE_TAP_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "lanehouse-tap", "key": "token", "optional": True}},
    }
    assert "lanehouse-tap" in (KUBERNETES / "values.yaml").read_text().split("\nglobal:")[0]
    (deployment,) = HELM["dagster-user-deployments"]["deployments"]
    assert "LANEHOUSE_TAP_TOKEN" not in names(deployment["env"])  # the code server serves no tap


def test_no_secret_is_a_literal_env_value_in_the_kubernetes_files() -> None:
    secret = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|API_?KEY|PRIVATE_KEY", re.IGNORECASE)

    def env_entries(data: Any) -> Any:
        if isinstance(data, dict):
            if isinstance(data.get("name"), str) and ("value" in data or "valueFrom" in data):
                yield data
            for value in data.values():
                yield from env_entries(value)
        elif isinstance(data, list):
            for value in data:
                yield from env_entries(value)

    for path in (KUBERNETES / "values.yaml", KUBERNETES / "dagster-instance.yaml"):
        entries = list(env_entries(yaml.safe_load(path.read_text())))
        assert any(secret.search(entry["name"]) for entry in entries), path
        for entry in entries:
            if secret.search(entry["name"]):
                assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], entry


def test_helm_code_server_runs_the_compose_code_location() -> None:
    (deployment,) = HELM["dagster-user-deployments"]["deployments"]
    args = deployment["codeServerArgs"]
    command = SERVICES["dagster-code"]["command"]
    for option in ("-m", "-a"):
        assert args[args.index(option) + 1] == command[command.index(option) + 1]
    exit_code, output = _parse("dagster", ["code-server", "start", *args, "--help"])
    assert exit_code == 0, output
    # The code server reads what the runs read: the specs, lanehouse.yaml, the lake.
    launcher = HELM["runLauncher"]["config"]["k8sRunLauncher"]
    for key in ("envConfigMaps", "envSecrets", "volumes", "volumeMounts"):
        assert deployment[key] == launcher[key], key


def test_helm_values_agree_with_the_kubernetes_instance() -> None:
    """The two describe one deployment: with the chart, and written out without it."""
    instance = yaml.safe_load((KUBERNETES / "dagster-instance.yaml").read_text())
    config = instance["run_launcher"]["config"]
    launcher = HELM["runLauncher"]["config"]["k8sRunLauncher"]
    assert names(launcher["envConfigMaps"]) == config["env_config_maps"]
    assert names(launcher["envSecrets"]) == config["env_secrets"]
    assert launcher["volumes"] == config["volumes"]
    assert launcher["volumeMounts"] == config["volume_mounts"]
    assert launcher["resources"] == config["resources"]
    assert launcher["imagePullPolicy"] == config["image_pull_policy"]
    assert launcher["loadInclusterConfig"] == config["load_incluster_config"]
    assert launcher["runK8sConfig"]["podSpecConfig"] == config["run_k8s_config"]["pod_spec_config"]
    assert HELM["global"]["dagsterHome"] == config["dagster_home"]
    assert HELM["global"]["serviceAccountName"] == config["service_account_name"]
    assert HELM["global"]["postgresqlSecretName"] == config["postgres_password_secret"]
    db = instance["storage"]["postgres"]["postgres_db"]
    chart_db = HELM["postgresql"]
    assert (chart_db["postgresqlHost"], chart_db["service"]["port"]) == (db["hostname"], db["port"])
    assert (chart_db["postgresqlUsername"], chart_db["postgresqlDatabase"]) == (
        db["username"],
        db["db_name"],
    )
    assert chart_db["postgresqlScheme"] == db["scheme"]


def test_helm_values_have_lanehouses_run_limits() -> None:
    expected = instance_config()
    runs, pools = expected["concurrency"]["runs"], expected["concurrency"]["pools"]
    concurrency = HELM["concurrency"]
    assert concurrency["enabled"] is True
    assert concurrency["runs"] == {
        "maxConcurrentRuns": runs["max_concurrent_runs"],
        "tagConcurrencyLimits": runs["tag_concurrency_limits"],
    }
    assert concurrency["pools"] == {
        "granularity": pools["granularity"],
        "defaultLimit": pools["default_limit"],
    }
    monitoring = HELM["dagsterDaemon"]["runMonitoring"]
    assert monitoring == {
        "enabled": True,
        "startTimeoutSeconds": expected["run_monitoring"]["start_timeout_seconds"],
        "cancelTimeoutSeconds": expected["run_monitoring"]["cancel_timeout_seconds"],
    }
    assert HELM["telemetry"] == expected["telemetry"]


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

        command = create_dagster_webserver_cli()
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
