"""``lanehouse validate`` and ``consume``: workload specs checked, or run in this process (or
as a local fleet of replica processes)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from consumers import PulsarSourceSpec, SpecError, WorkloadSpec, load_specs, run_specs
from orchestration.cli.params import ip_address
from orchestration.console import exits_on
from orchestration.local.replicas import child_args, run_fleet


def _load_or_exit(paths: list[Path]) -> list[WorkloadSpec]:
    """Validate every spec before anything runs; exit 2 naming the file and field."""
    with exits_on(SpecError, code=2):
        return load_specs(paths)


def _pool_sizes(values: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for value in values:
        name, sep, size = value.partition("=")
        if not sep or not name or not size.isdecimal() or int(size) < 1:
            raise typer.BadParameter(f"expected NAME=SIZE with SIZE >= 1, got {value!r}")
        sizes[name] = int(size)
    return sizes


def validate(
    paths: Annotated[list[Path], typer.Argument(help="Spec files or directories of *.yaml.")],
) -> None:
    """Validate workload specs (and import their handlers); exit 2 on the first bad one."""
    specs = _load_or_exit(paths)
    for spec in specs:
        state = "enabled" if spec.enabled else "disabled"
        print(f"ok  {spec.name}: {_describe_source(spec)} ({state})")


def _describe_source(spec: WorkloadSpec) -> str:
    """Where the workload reads: kind, topics, broker, and its group or subscription."""
    source = spec.source
    topics = ", ".join(source.topics)
    cluster = f" (cluster {source.cluster})" if source.cluster else ""
    if isinstance(source, PulsarSourceSpec):
        return (
            f"pulsar {topics} at {source.service_url}{cluster}, "
            f"{source.subscription_type} subscription {source.subscription}"
        )
    return f"kafka {topics} at {source.bootstrap_servers}{cluster}, group {source.group}"


def consume(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(help="Spec files or directories of *.yaml.")],
    until_idle: Annotated[
        float | None,
        typer.Option(min=0.1, help="Stop once no record arrived for this many seconds."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve /metrics (Prometheus), /healthz and /tap/<workload> (server-sent events) here.",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            callback=ip_address,
            help="Address the metrics server binds (0.0.0.0 to be scraped from other hosts; "
            "beyond loopback /tap needs the secret in LANEHOUSE_TAP_TOKEN, else it is off).",
        ),
    ] = "127.0.0.1",
    pool: Annotated[
        list[str] | None,
        typer.Option(help="Permit pool size as NAME=SIZE (repeatable; default 1000 each)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Python log level.")] = "INFO",
    replicas: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Run this many processes of these workloads (one consumer group: they split "
            "the partitions); replica I serves metrics on --metrics-port + I.",
        ),
    ] = 1,
) -> None:
    """Run workloads in this process, sharing permit pools, until Ctrl-C/SIGTERM or idleness.

    The first signal drains in-flight records and commits; a second one exits at once.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    specs = _load_or_exit(paths)
    sizes = _pool_sizes(pool or [])
    if replicas > 1:
        args = child_args(ctx, skip={"replicas", "metrics_port"})
        raise typer.Exit(run_fleet(specs, replicas, args, metrics_port))
    with exits_on():
        summaries = run_specs(
            specs,
            pool_sizes=sizes,
            until_idle=until_idle,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
        )
    for summary in summaries:
        c = summary.counters
        print(
            f"{summary.name}: consumed {c['consumed']} completed {c['completed']} "
            f"failed {c['failed']} commits {c['commits']} in {summary.seconds:.1f} s"
        )
