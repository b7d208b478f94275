"""The ``lanehouse`` command line.

Commands:
    broker    run embedded brokers in the foreground until Ctrl-C or SIGTERM: Tansu (Kafka
              API), pulsar-lite (Pulsar protocol) or both
    produce   write keyed sample records (per-key sequence numbers) to a Kafka or Pulsar topic
    validate  check workload specs (and import their handlers) without running anything
    consume   run workloads in this process until a signal or idleness
    demo      embedded brokers, a Kafka and a Pulsar stream, both workloads on one permit pool,
              a verified summary
    up        the platform: brokers, demo producers, Dagster with the discovery sensor
    backfill  rebuild Spark assets for a day range: a UI backfill if Dagster is up, else here
    dead-letters list|replay   show a (Kafka) workload's dead letters, or republish them
    workloads list|status      workloads with their consumer runs and the engine's progress
    permits status             shared permit pools: holders, leases, demand and waits

This module must stay importable without Dagster or Spark: commands that need them import them
inside the command function, so ``lanehouse --help`` and ``lanehouse produce`` start fast.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import threading
from collections.abc import Iterator
from enum import StrEnum
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

from consumers.config.names import validate_topic_name
from consumers.config.pulsar_options import validate_pulsar_topic, validate_pulsar_url
from consumers.config.spec import KafkaSourceSpec, PulsarSourceSpec, WorkloadSpec, load_specs
from consumers.dev.embedded.child import BrokerProcess
from consumers.dev.embedded.tansu import start_tansu
from consumers.dev.sample import produce_pulsar_sample, produce_sample
from consumers.errors import BrokerError, SpecError
from consumers.service.launch import run_specs
from orchestration.cli.permits import permits_app
from orchestration.cli.workloads import workloads_app
from orchestration.console import err_console, exits_on, print_error
from orchestration.demo.events import MAX_USERS, Stream
from orchestration.lake.backfill import backfill_command

app = typer.Typer(
    name="lanehouse",
    help="Run Kafka/Pulsar consuming workloads under Dagster and land data for PySpark.",
    no_args_is_help=True,
    add_completion=False,
)
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_KAFKA_PORT = 9092
DEFAULT_PULSAR_PORT = 6650
_LIVENESS_INTERVAL = 0.2  # seconds between checks that the foreground broker still runs


def _topic_name(value: str, param_hint: str | None = None) -> str:
    try:
        return validate_topic_name(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def _pulsar_topic(value: str, param_hint: str | None = None) -> str:
    """The full name of a Pulsar topic given short or full."""
    try:
        return validate_pulsar_topic(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def _positive_rate(value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise typer.BadParameter(f"must be positive, got {value}")
    return value


def _pulsar_url(value: str | None) -> str | None:
    try:
        return None if value is None else validate_pulsar_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--pulsar'") from exc


class BrokerKind(StrEnum):
    kafka = "kafka"
    pulsar = "pulsar"
    both = "both"


@app.command()
def broker(
    kind: Annotated[
        BrokerKind,
        typer.Option(
            help="Which broker to run: kafka (Tansu), pulsar (pulsar-lite) or both side by side."
        ),
    ] = BrokerKind.kafka,
    kafka_port: Annotated[
        int | None,
        typer.Option(
            "--kafka-port",
            "--port",
            min=1,
            max=65535,
            show_default=False,
            help=f"Kafka port on 127.0.0.1 (default {DEFAULT_KAFKA_PORT}).",
        ),
    ] = None,
    storage: Annotated[
        str,
        typer.Option(
            help="Tansu storage engine: memory:// (lost on exit) or s3://BUCKET/ "
            "(with AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ... in the environment)."
        ),
    ] = "memory://",
    pulsar_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            show_default=False,
            help=f"Pulsar port on 127.0.0.1 (default {DEFAULT_PULSAR_PORT}).",
        ),
    ] = None,
    pulsar_data: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            show_default=False,
            help="pulsar-lite data directory, kept on exit so a restart finds its topics, "
            "messages and subscriptions (default: a temporary one, removed on exit).",
        ),
    ] = None,
) -> None:
    """Run embedded brokers in the foreground; Ctrl-C or SIGTERM stops them cleanly.

    Prints `Kafka bootstrap: HOST:PORT` and/or `Pulsar service URL: pulsar://HOST:PORT` on
    stdout once each broker serves, for KAFKA_BOOTSTRAP and PULSAR_URL.
    """
    want_kafka = kind in (BrokerKind.kafka, BrokerKind.both)
    want_pulsar = kind in (BrokerKind.pulsar, BrokerKind.both)
    for hint, given, which, started_here in [
        ("'--kafka-port' / '--port'", kafka_port is not None, "Kafka", want_kafka),
        ("'--storage'", storage != "memory://", "Kafka", want_kafka),
        ("'--pulsar-port'", pulsar_port is not None, "Pulsar", want_pulsar),
        ("'--pulsar-data'", pulsar_data is not None, "Pulsar", want_pulsar),
    ]:
        if given and not started_here:
            raise typer.BadParameter(
                f"sets up the {which} broker, which --kind {kind} does not start",
                param_hint=hint,
            )

    started: list[tuple[str, BrokerProcess]] = []
    # Handlers first: a signal while a broker starts still stops the ones already running.
    with _stop_on_signal() as stop:
        try:
            with exits_on(BrokerError):
                if want_kafka:
                    tansu = start_tansu(kafka_port or DEFAULT_KAFKA_PORT, storage)
                    started.append(("Tansu", tansu))
                    print(f"Kafka bootstrap: {tansu.bootstrap}", flush=True)
                    err_console.print(
                        escape(f"Tansu pid {tansu.pid}, storage {storage}, log {tansu.log_path}"),
                        highlight=False,
                    )
                if want_pulsar:
                    from consumers.dev.embedded.pulsar import (
                        start_pulsar_lite,  # loads pulsar-client
                    )

                    lite = start_pulsar_lite(pulsar_port or DEFAULT_PULSAR_PORT, pulsar_data)
                    started.append(("pulsar-lite", lite))
                    print(f"Pulsar service URL: {lite.url}", flush=True)
                    kept = "kept" if pulsar_data is not None else "removed on exit"
                    err_console.print(
                        escape(
                            f"pulsar-lite pid {lite.pid}, data {lite.data_dir} ({kept}), "
                            f"log {lite.log_path}"
                        ),
                        highlight=False,
                    )
                err_console.print("Ctrl-C stops " + " and ".join(name for name, _ in started) + ".")
                while not stop.wait(_LIVENESS_INTERVAL):
                    for name, process in started:
                        # A terminal's Ctrl-C reaches the brokers too: give our handler a moment.
                        if not process.alive() and not stop.wait(_LIVENESS_INTERVAL):
                            print_error(
                                f"{name} exited with status {process.returncode}\n{process.log_tail()}"
                            )
                            raise typer.Exit(1)
        finally:
            for name, process in reversed(started):
                process.stop()
                err_console.print(f"{name} stopped.")


@contextlib.contextmanager
def _stop_on_signal() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while inside; the previous handlers come back after."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} rec/s" if speed else "- rec/s", style="progress.data.speed")


def _progress(transient: bool = False) -> Progress:
    """The progress bar of long commands: count, records per second, time."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=transient,
    )


@app.command()
def produce(
    topic: Annotated[
        str,
        typer.Option(
            help="Topic to write to. With --pulsar: a short name (in public/default) or "
            "persistent://TENANT/NAMESPACE/TOPIC."
        ),
    ],
    count: Annotated[int, typer.Option(min=1, help="Number of records.")],
    keys: Annotated[int, typer.Option(min=1, help="Number of distinct keys k0..k{keys-1}.")],
    rate: Annotated[
        float | None,
        typer.Option(callback=_positive_rate, help="Records per second (default: unlimited)."),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Kafka only: create the topic with this many partitions (kept if it exists).",
        ),
    ] = None,
    bootstrap: Annotated[
        str, typer.Option(envvar="KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")
    ] = DEFAULT_BOOTSTRAP,
    pulsar: Annotated[
        str | None,
        typer.Option(
            "--pulsar",
            metavar="URL",
            callback=_pulsar_url,
            help="Write to the Pulsar service at URL (e.g. pulsar://127.0.0.1:6650) instead of "
            "Kafka. The topic is created on first write, unpartitioned; the key becomes the "
            "message's partition key.",
        ),
    ] = None,
    value_size: Annotated[int, typer.Option(min=0, help="Pad each value to this many bytes.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the key order (same seed, same data).")] = 0,
) -> None:
    """Write keyed JSON sample records {key, seq, ts, pad} with per-key sequence numbers."""
    if pulsar is None:
        topic = _topic_name(topic, "'--topic'")
    else:
        if partitions is not None:
            raise typer.BadParameter(
                "is for Kafka topics; a Pulsar topic is created unpartitioned on first write",
                param_hint="'--partitions'",
            )
        topic = _pulsar_topic(topic, "'--topic'")
    progress = _progress()
    with exits_on(BrokerError), progress:  # the bar stops before the error line
        task = progress.add_task(f"produce {topic}", total=count)

        def report(done: int) -> None:
            progress.update(task, completed=done)

        if pulsar is None:
            summary = produce_sample(
                bootstrap,
                topic,
                count,
                keys,
                rate=rate,
                partitions=partitions,
                progress=report,
                value_size=value_size,
                seed=seed,
            )
        else:
            summary = produce_pulsar_sample(
                pulsar,
                topic,
                count,
                keys,
                rate=rate,
                progress=report,
                value_size=value_size,
                seed=seed,
            )
    print(
        f"produced {summary.records} records over {summary.keys} keys to {summary.topic} "
        f"in {summary.seconds:.2f} s ({summary.per_second:,.0f} rec/s)"
    )


@app.command()
def shop(
    clicks_topic: Annotated[
        str | None, typer.Option(help="Kafka topic for the clickstream (user id as key).")
    ] = None,
    orders_topic: Annotated[
        str | None,
        typer.Option(help="Topic for the orders: on Pulsar with --pulsar, else on Kafka."),
    ] = None,
    rate: Annotated[
        float, typer.Option(callback=_positive_rate, help="Clicks per second, on average.")
    ] = 10.0,
    users: Annotated[int, typer.Option(min=1, max=MAX_USERS, help="Distinct shoppers.")] = 5_000,
    malformed: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of records corrupted on purpose.")
    ] = 0.02,
    seconds: Annotated[
        float | None,
        typer.Option(callback=_positive_rate, help="Stop after this long (default: on Ctrl-C)."),
    ] = None,
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of Kafka topics created here.")
    ] = 4,
    bootstrap: Annotated[
        str, typer.Option(envvar="KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")
    ] = DEFAULT_BOOTSTRAP,
    pulsar: Annotated[
        str | None,
        typer.Option("--pulsar", metavar="URL", callback=_pulsar_url, help="Pulsar service URL."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the shoppers' behaviour.")] = 0,
) -> None:
    """Play the demo shop live: sessions of clicks and orders, stamped with the time sent.

    The records are the ones the Spark assets clean (a share malformed, for the quarantine), so
    a running platform fills today's partition with data worth looking at.
    """
    import time

    from orchestration.demo.live_shop import LiveShop, run_live_shop
    from orchestration.demo.producers import KafkaSink, PulsarSink, RecordSink

    if clicks_topic is None and orders_topic is None:
        raise typer.BadParameter("name --clicks-topic, --orders-topic or both")
    sinks: dict[Stream, RecordSink] = {}
    with exits_on(BrokerError):
        if clicks_topic is not None:
            sinks["clicks"] = KafkaSink(
                bootstrap, _topic_name(clicks_topic, "'--clicks-topic'"), partitions
            )
        if orders_topic is not None and pulsar is not None:
            sinks["orders"] = PulsarSink(pulsar, _pulsar_topic(orders_topic, "'--orders-topic'"))
        elif orders_topic is not None:
            sinks["orders"] = KafkaSink(
                bootstrap, _topic_name(orders_topic, "'--orders-topic'"), partitions
            )
    start = time.time()
    shop = LiveShop(
        clicks_per_second=rate,
        start_ms=int(start * 1000),
        users=users,
        malformed_fraction=malformed,
        seed=seed,
    )
    with _stop_on_signal() as stop:
        if seconds is not None:
            timer = threading.Timer(seconds, stop.set)
            timer.daemon = True
            timer.start()
        with exits_on(BrokerError):
            sent = run_live_shop(shop, sinks, stop)
    print(
        f"sent {sent['clicks']} clicks and {sent['orders']} orders "
        f"({sent['malformed']} malformed) in {time.time() - start:.0f} s"
    )


def _load_or_exit(paths: list[Path]) -> list[WorkloadSpec]:
    """Validate every spec before anything runs; exit 2 naming the file and field."""
    with exits_on(SpecError, code=2):
        return load_specs(paths)


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
        print(f"ok  {spec.name}: {_describe_source(spec)} ({state})")


def _describe_source(spec: WorkloadSpec) -> str:
    """Where the workload reads: kind, topics, broker, and its group or subscription."""
    source = spec.source
    topics = ", ".join(source.topics)
    if isinstance(source, PulsarSourceSpec):
        return (
            f"pulsar {topics} at {source.service_url}, "
            f"{source.subscription_type} subscription {source.subscription}"
        )
    return f"kafka {topics} at {source.bootstrap_servers}, group {source.group}"


def _ip_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::)"
        ) from None
    return value


@app.command()
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
            callback=_ip_address,
            help="Address the metrics server binds (0.0.0.0 to be scraped from other hosts).",
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
        from orchestration.local.replicas import child_args, run_fleet

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


@app.command()
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
) -> None:
    """Embedded Kafka and Pulsar → a shop's clicks and orders over several days → both
    workloads land them → the Spark assets for those days → a reconciliation table per day
    (exit 1 unless everything reconciles)."""
    from consumers.config.loading import state_dir as resolve_state_dir
    from orchestration.demo.runner import run_demo

    with exits_on():
        ok = run_demo(
            err_console,
            state=resolve_state_dir(state_dir),
            days=days,
            users=users,
            sessions=sessions,
            malformed=malformed,
            partitions=partitions,
        )
    raise typer.Exit(0 if ok else 1)


@app.command()
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
    sensor starting a consumer run per workload). Ctrl-C or SIGTERM stops it all, consumer runs
    first (they drain and commit)."""
    from consumers.config.loading import state_dir as default_state_dir
    from orchestration.local.up import UpSettings, run_up

    settings = UpSettings(
        state=default_state_dir(state_dir),
        ui_port=ui_port,
        kafka_port=kafka_port,
        pulsar_port=pulsar_port,
        rate=rate,
    )
    with exits_on():
        run_up(settings, say=lambda text: err_console.print(escape(text), highlight=False))


app.command("backfill")(backfill_command)
app.add_typer(workloads_app)
app.add_typer(permits_app)

# --------------------------------------------------------------------------- dead letters

dead_letters_app = typer.Typer(
    name="dead-letters",
    help="List a Kafka workload's dead letters, or replay them to its source topic.",
    no_args_is_help=True,
)
app.add_typer(dead_letters_app)

_SpecsOption = Annotated[
    Path | None,
    typer.Option(
        "--specs",
        envvar="LANEHOUSE_WORKLOADS",
        show_default=False,
        help="Spec file or directory of *.yaml that defines the workload (default: the "
        "repository's workloads/).",
    ),
]
_WorkloadArgument = Annotated[str, typer.Argument(help="Workload name (its spec's `name`).")]
_SinceOption = Annotated[
    str | None,
    typer.Option(
        help="Only dead letters whose last failure is at/after this: a duration ago "
        "('30m', '2h') or an ISO 8601 time ('2024-05-01T12:00:00Z'; UTC without an offset)."
    ),
]
_KEY_CHARS = 32
_MESSAGE_CHARS = 60


def _dead_letter_workload(
    specs: Path | None, workload: str
) -> tuple[WorkloadSpec, KafkaSourceSpec, str]:
    """The workload's spec, its Kafka source and its dead-letter topic; exit 2 if it reads
    Pulsar or has no dead-letter topic."""
    from orchestration.workloads.names import workloads_dir

    specs = specs if specs is not None else workloads_dir()
    with exits_on(SpecError, code=2):
        loaded = load_specs([specs], import_handler=False)
    by_name = {spec.name: spec for spec in loaded}
    spec = by_name.get(workload)
    if spec is None:
        found = ", ".join(sorted(by_name)) or "no workloads"
        print_error(f"no workload named {workload!r} in {specs} (found: {found})")
        raise typer.Exit(2)
    if not isinstance(spec.source, KafkaSourceSpec):
        where = f" (they are in {spec.dead_letter.topic})" if spec.dead_letter else ""
        print_error(
            f"workload {workload!r} reads Pulsar: the dead-letters commands read Kafka "
            f"dead-letter topics only; read its dead letters with Pulsar tools{where}"
        )
        raise typer.Exit(2)
    if spec.dead_letter is None:
        print_error(
            f"workload {workload!r} has no dead-letter topic: its spec sets no dead_letter "
            "(add `dead_letter: {topic: <name>}`)"
        )
        raise typer.Exit(2)
    return spec, spec.source, spec.dead_letter.topic


def _since_ms(since: str | None) -> int | None:
    from consumers.dead_letters.admin import parse_since

    if since is None:
        return None
    try:
        return parse_since(since)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--since'") from exc


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show_key(key: bytes | None) -> str:
    if key is None:
        return "-"
    try:
        text = key.decode()
    except UnicodeDecodeError:
        text = repr(key)
    else:
        text = text if text.isprintable() else repr(key)
    return _shorten(text, _KEY_CHARS)


def _utc(epoch_ms: int) -> str:
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


@dead_letters_app.command("list")
def dead_letters_list(
    workload: _WorkloadArgument,
    specs: _SpecsOption = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Show at most this many.")] = None,
    since: _SinceOption = None,
) -> None:
    """Show a workload's dead letters (the whole dead-letter topic is read; nothing is committed)."""
    from rich.table import Table

    from consumers.dead_letters.admin import list_dead_letters, replay_client_config

    spec, source, topic = _dead_letter_workload(specs, workload)
    since_ms = _since_ms(since)
    with exits_on():
        entries = list_dead_letters(
            source.bootstrap_servers,
            topic,
            workload,
            limit=limit,
            since_ms=since_ms,
            client_config=replay_client_config(spec),
        )
    console = Console(highlight=False)
    if not entries:
        console.print(Text(f"no dead letters of workload {workload} in {topic}"))
        return
    table = Table(title=Text(f"dead letters of {workload} in {topic}"), title_justify="left")
    for column in ("offset", "key", "source"):
        table.add_column(column, overflow="fold")
    table.add_column("attempts", justify="right")
    table.add_column("replays", justify="right")
    table.add_column("error", overflow="fold")
    table.add_column("message", overflow="fold")
    table.add_column("last failure (UTC)", no_wrap=True)
    for entry in entries:
        info = entry.info
        table.add_row(
            Text(f"[{entry.partition}]@{entry.offset}"),
            Text(_show_key(entry.key)),
            Text(f"{info.source_topic}[{info.source_partition}]@{info.source_offset}"),
            Text(str(info.attempts)),
            Text(str(info.replay_count)),
            Text(info.error_type),
            Text(_shorten(info.error_message, _MESSAGE_CHARS)),
            Text(_utc(info.last_failure_ms)),
        )
    console.print(table)
    console.print(Text(f"{len(entries)} dead letters"))


@dead_letters_app.command("replay")
def dead_letters_replay(
    workload: _WorkloadArgument,
    specs: _SpecsOption = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Handle at most this many of its dead letters.")
    ] = None,
    since: _SinceOption = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Topic to republish to (default: the workload's source topic; with several, "
            "each dead letter's own source topic).",
        ),
    ] = None,
    max_replays: Annotated[
        int,
        typer.Option(
            min=1, help="Dead letters replayed this many times already are not republished."
        ),
    ] = 3,
) -> None:
    """Republish a workload's dead letters that no earlier replay handled.

    Progress is kept in the consumer group lanehouse.<workload>.dlq-replay, so a second run republishes nothing twice. Dead letters passed over (older than --since, already replayed --max-replays times, other workloads') are not looked at again by later replays; `list` still shows them.
    """
    from consumers.dead_letters.admin import replay_client_config, replay_dead_letters

    spec, source, topic = _dead_letter_workload(specs, workload)
    since_ms = _since_ms(since)
    if to is not None:
        _topic_name(to, "'--to'")
        if to == topic:
            raise typer.BadParameter(f"{to!r} is the dead-letter topic itself", param_hint="'--to'")
    target = to if to is not None else (source.topics[0] if len(source.topics) == 1 else None)
    progress = _progress(transient=True)
    with exits_on(), progress:  # the bar stops before the error line
        task = progress.add_task(escape(f"replay {topic}"), total=None)

        def report(scanned: int, total: int | None) -> None:
            progress.update(task, completed=scanned, total=total)

        summary = replay_dead_letters(
            source.bootstrap_servers,
            topic,
            workload,
            target,
            limit=limit,
            since_ms=since_ms,
            max_replays=max_replays,
            client_config=replay_client_config(spec),
            progress=report,
        )
    where = target if target is not None else "each dead letter's source topic"
    print(f"replayed {summary.replayed} dead letters of {workload} from {topic} to {where}")
    if summary.exhausted:
        print(
            f"exhausted {summary.exhausted} (replayed {max_replays} times or more already; "
            "not republished, still listed by `dead-letters list`):"
        )
        for entry in summary.exhausted_entries:
            info = entry.info
            print(
                f"  [{entry.partition}]@{entry.offset} from "
                f"{info.source_topic}[{info.source_partition}]@{info.source_offset} "
                f"replays {info.replay_count}: {info.error_type}: "
                f"{_shorten(info.error_message, _MESSAGE_CHARS)}"
            )
    print(
        f"skipped {summary.skipped_other_workloads} of other workloads, "
        f"{summary.skipped_older} older than --since, {summary.malformed} unreadable"
    )
