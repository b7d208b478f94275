"""``lanehouse demo`` and ``up``: the whole platform on this machine, as a verified run over
a few days of data or until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from consumers.config.loading import state_dir as default_state_dir
from orchestration.cli.terminal import quiet_dependencies
from orchestration.console import err_console, exits_on
from orchestration.local.up import UpSettings, run_up


def demo(
    days: Annotated[
        int, typer.Option(min=1, max=31, help="UTC days of data, ending yesterday.")
    ] = 3,
    users: Annotated[int, typer.Option(min=1, max=10_000, help="Shop users (keys).")] = 200,
    sessions: Annotated[
        float, typer.Option(min=0.1, max=12.0, help="Sessions per user and day.")
    ] = 2.0,
    malformed: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Fraction of records corrupted on purpose.")
    ] = 0.02,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the Kafka topic.")] = 4,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="State directory (default: $LANEHOUSE_HOME or .lanehouse); the lake is "
            "<state>/demo/lake, emptied first.",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Also show Dagster's beta and preview notices.")
    ] = False,
) -> None:
    """Embedded Kafka and Pulsar → a shop's clicks and orders over several days → both
    workloads land them → the Spark assets for those days → a reconciliation table per day
    (exit 1 unless everything reconciles)."""
    from orchestration.demo.runner import run_demo  # Dagster and Spark

    with exits_on(), quiet_dependencies(verbose):
        ok = run_demo(
            err_console,
            state=default_state_dir(state_dir),
            days=days,
            users=users,
            sessions=sessions,
            malformed=malformed,
            partitions=partitions,
        )
    raise typer.Exit(0 if ok else 1)


def up(
    state_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            show_default=False,
            help="Where Dagster's home, broker data and logs live (default $LANEHOUSE_HOME or "
            ".lanehouse).",
        ),
    ] = None,
    ui_port: Annotated[int, typer.Option(min=1, max=65535, help="Dagster UI port.")] = 3000,
    kafka_port: Annotated[int, typer.Option(min=1, max=65535, help="Embedded Kafka port.")] = 9092,
    pulsar_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Embedded Pulsar port.")
    ] = 6650,
    rate: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Clicks per second of the live shop; sample records per second into the topic "
            "of any workload the shop does not feed.",
        ),
    ] = 20.0,
) -> None:
    """Run the platform: embedded brokers, demo producers and Dagster (UI, daemon, the discovery
    sensor starting the workloads' runs: host runs, and runs of their own for those that ask).
    Ctrl-C or SIGTERM stops it all, consumer runs first (they drain and commit)."""
    settings = UpSettings(
        state=default_state_dir(state_dir),
        ui_port=ui_port,
        kafka_port=kafka_port,
        pulsar_port=pulsar_port,
        rate=rate,
    )
    with exits_on():
        run_up(settings, say=lambda text: err_console.print(escape(text), highlight=False))
