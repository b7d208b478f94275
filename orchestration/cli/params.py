"""Option values checked as the command line is parsed: a bad one is a usage error (exit 2)
that names the option, before anything starts."""

from __future__ import annotations

import ipaddress

import typer

from consumers.config.names import validate_topic_name
from consumers.config.pulsar_options import validate_pulsar_topic, validate_pulsar_url


def topic_name(value: str, param_hint: str | None = None) -> str:
    """A Kafka topic name, checked by the engine's naming rule."""
    try:
        return validate_topic_name(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def pulsar_topic(value: str, param_hint: str | None = None) -> str:
    """The full name of a Pulsar topic given short or full."""
    try:
        return validate_pulsar_topic(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def positive_rate(value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise typer.BadParameter(f"must be positive, got {value}")
    return value


def pulsar_url(value: str | None) -> str | None:
    try:
        return None if value is None else validate_pulsar_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--pulsar'") from exc


def ip_address(value: str) -> str:
    """An IP address to bind (``127.0.0.1``, ``0.0.0.0``, ``::``)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::)"
        ) from None
    return value
