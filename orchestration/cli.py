"""The ``lanehouse`` command line.

Commands:
    broker    run a Tansu (Kafka API) broker in the foreground until Ctrl-C or SIGTERM
    produce   write keyed sample records (per-key sequence numbers) to a topic
    validate  check workload specs (and import their handlers) without running anything
    consume   run workloads in this process until a signal or idleness
    demo      embedded broker, sample stream, one workload, a verified summary

This module must stay importable without Dagster or Spark: commands that need them import them
inside the command function, so ``lanehouse --help`` and ``lanehouse produce`` start fast.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from consumers.embedded.tansu import start_tansu, validate_topic_name
from consumers.errors import BrokerError, LanehouseError, SpecError
from consumers.run import run_specs
from consumers.sample import produce_sample
from consumers.spec import WorkloadSpec, load_specs

app = typer.Typer(
    name="lanehouse",
    help="Run Kafka/Pulsar consuming workloads under Dagster and land data for PySpark.",
    no_args_is_help=True,
    add_completion=False,
)
err_console = Console(stderr=True)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
_LIVENESS_INTERVAL = 0.2  # seconds between checks that the foreground broker still runs


def _error(message: str) -> None:
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False)


def _topic_name(value: str) -> str:
    try:
        return validate_topic_name(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _positive_rate(value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise typer.BadParameter(f"must be positive, got {value}")
    return value


@app.command()
def broker(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1.")] = 9092,
    storage: Annotated[
        str,
        typer.Option(
            help="Tansu storage engine: memory:// (lost on exit) or s3://BUCKET/ "
            "(with AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ... in the environment)."
        ),
    ] = "memory://",
) -> None:
    """Run a Tansu broker in the foreground; Ctrl-C or SIGTERM stops it cleanly."""
    try:
        tansu = start_tansu(port, storage)
    except BrokerError as exc:
        _error(str(exc))
        raise typer.Exit(1) from exc

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"Kafka bootstrap: {tansu.bootstrap}", flush=True)
        err_console.print(
            escape(f"Tansu pid {tansu.pid}, storage {storage}, log {tansu.log_path}")
            + "; Ctrl-C stops it.",
            highlight=False,
        )
        while not stop.wait(_LIVENESS_INTERVAL):
            # A terminal's Ctrl-C reaches the broker too: give our handler a moment to see it.
            if not tansu.alive() and not stop.wait(_LIVENESS_INTERVAL):
                _error(f"Tansu exited with status {tansu.returncode}\n{tansu.log_tail()}")
                raise typer.Exit(1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        tansu.stop()
    err_console.print("Tansu stopped.")


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} rec/s" if speed else "- rec/s", style="progress.data.speed")


@app.command()
def produce(
    topic: Annotated[str, typer.Option(callback=_topic_name, help="Topic to write to.")],
    count: Annotated[int, typer.Option(min=1, help="Number of records.")],
    keys: Annotated[int, typer.Option(min=1, help="Number of distinct keys k0..k{keys-1}.")],
    rate: Annotated[
        float | None,
        typer.Option(callback=_positive_rate, help="Records per second (default: unlimited)."),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(min=1, help="Create the topic with this many partitions (kept if it exists)."),
    ] = None,
    bootstrap: Annotated[
        str, typer.Option(envvar="KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")
    ] = DEFAULT_BOOTSTRAP,
    value_size: Annotated[int, typer.Option(min=0, help="Pad each value to this many bytes.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the key order (same seed, same data).")] = 0,
) -> None:
    """Write keyed JSON sample records {key, seq, ts, pad} with per-key sequence numbers."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
    )
    with progress:
        task = progress.add_task(f"produce {topic}", total=count)
        try:
            summary = produce_sample(
                bootstrap,
                topic,
                count,
                keys,
                rate=rate,
                partitions=partitions,
                progress=lambda done: progress.update(task, completed=done),
                value_size=value_size,
                seed=seed,
            )
        except BrokerError as exc:
            progress.stop()
            _error(str(exc))
            raise typer.Exit(1) from exc
    print(
        f"produced {summary.records} records over {summary.keys} keys to {topic} "
        f"in {summary.seconds:.2f} s ({summary.per_second:,.0f} rec/s)"
    )


def _load_or_exit(paths: list[Path]) -> list[WorkloadSpec]:
    """Validate every spec before anything runs; exit 2 naming the file and field."""
    try:
        return load_specs(paths)
    except SpecError as exc:
        _error(str(exc))
        raise typer.Exit(2) from exc


def _pool_sizes(values: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for value in values:
        name, sep, size = value.partition("=")
        if not sep or not name or not size.isdigit() or int(size) < 1:
            raise typer.BadParameter(f"expected NAME=SIZE with SIZE >= 1, got {value!r}")
        sizes[name] = int(size)
    return sizes


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Spec files or directories of *.yaml.")],
) -> None:
    """Validate workload specs (and import their handlers); exit 2 on the first bad one."""
    specs = _load_or_exit(paths)
    for spec in specs:
        state = "enabled" if spec.enabled else "disabled"
        print(f"ok  {spec.name}: {spec.source.kind} {', '.join(spec.source.topics)} ({state})")


@app.command()
def consume(
    paths: Annotated[list[Path], typer.Argument(help="Spec files or directories of *.yaml.")],
    until_idle: Annotated[
        float | None,
        typer.Option(min=0.1, help="Stop once no record arrived for this many seconds."),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Serve Prometheus /metrics here.")
    ] = None,
    pool: Annotated[
        list[str] | None,
        typer.Option(help="Permit pool size as NAME=SIZE (repeatable; default 1000 each)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Python log level.")] = "INFO",
) -> None:
    """Run workloads in this process, sharing permit pools, until Ctrl-C/SIGTERM or idleness.

    The first signal drains in-flight records and commits; a second one exits at once.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    specs = _load_or_exit(paths)
    sizes = _pool_sizes(pool or [])
    try:
        summaries = run_specs(
            specs, pool_sizes=sizes, until_idle=until_idle, metrics_port=metrics_port
        )
    except LanehouseError as exc:
        _error(str(exc))
        raise typer.Exit(1) from exc
    for summary in summaries:
        c = summary.counters
        print(
            f"{summary.name}: consumed {c['consumed']} completed {c['completed']} "
            f"failed {c['failed']} commits {c['commits']} in {summary.seconds:.1f} s"
        )


@app.command()
def demo(
    records: Annotated[int, typer.Option(min=1, help="Records in the sample stream.")] = 200_000,
    keys: Annotated[int, typer.Option(min=1, help="Distinct keys.")] = 1000,
    partitions: Annotated[int, typer.Option(min=1, help="Topic partitions.")] = 4,
) -> None:
    """Embedded broker → keyed sample stream → one workload run to completion → summary."""
    from orchestration.demo import run_demo

    ok = run_demo(records=records, keys=keys, partitions=partitions, console=err_console)
    raise typer.Exit(0 if ok else 1)


if __name__ == "__main__":
    app()
