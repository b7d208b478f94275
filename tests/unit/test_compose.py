"""docker-compose.yml is for production users; Docker does not run here, so validate its shape."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

COMPOSE = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())


def test_every_image_is_pinned() -> None:
    for name, service in COMPOSE["services"].items():
        image = service["image"]
        tag = image.rpartition(":")[2] if ":" in image else ""
        assert tag and tag != "latest" and any(c.isdigit() for c in tag), f"{name}: {image}"


def test_every_dependency_is_waited_for_by_health() -> None:
    services = COMPOSE["services"]
    for name, service in services.items():
        for dep, condition in service.get("depends_on", {}).items():
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dep}"
            assert "healthcheck" in services[dep], f"{dep} has no health check"


def test_named_volumes_are_declared_and_ports_bind_loopback() -> None:
    declared = set(COMPOSE.get("volumes", {}))
    for name, service in COMPOSE["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith(".") or source in declared, f"{name}: {volume}"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_consumer_stops_slower_than_it_drains() -> None:
    grace = COMPOSE["services"]["consumer"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > 30
