"""``lanehouse broker``, ``produce`` and ``shop``: embedded brokers in the foreground, and
records into their topics (sample records, or the demo shop played live)."""

from __future__ import annotations

import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from consumers import BrokerError
from consumers.dev.embedded.child import BrokerProcess
from consumers.dev.embedded.tansu import start_tansu
from consumers.dev.sample import produce_pulsar_sample, produce_sample
from orchestration.cli.params import positive_rate, pulsar_topic, pulsar_url, topic_name
from orchestration.cli.terminal import progress_bar, stop_on_signal
from orchestration.console import err_console, exits_on, print_error
from orchestration.demo.events import MAX_USERS, Stream
from orchestration.demo.live_shop import LiveShop, run_live_shop
from orchestration.demo.producers import KafkaSink, PulsarSink, RecordSink

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_KAFKA_PORT = 9092
DEFAULT_PULSAR_PORT = 6650
_LIVENESS_INTERVAL = 0.2  # seconds between checks that the foreground broker still runs


class BrokerKind(StrEnum):
    kafka = "kafka"
    pulsar = "pulsar"
    both = "both"


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
    with stop_on_signal() as stop:
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
        typer.Option(callback=positive_rate, help="Records per second (default: unlimited)."),
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
            callback=pulsar_url,
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
        topic = topic_name(topic, "'--topic'")
    else:
        if partitions is not None:
            raise typer.BadParameter(
                "is for Kafka topics; a Pulsar topic is created unpartitioned on first write",
                param_hint="'--partitions'",
            )
        topic = pulsar_topic(topic, "'--topic'")
    progress = progress_bar()
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


def shop(
    clicks_topic: Annotated[
        str | None, typer.Option(help="Kafka topic for the clickstream (user id as key).")
    ] = None,
    orders_topic: Annotated[
        str | None,
        typer.Option(help="Topic for the orders: on Pulsar with --pulsar, else on Kafka."),
    ] = None,
    rate: Annotated[
        float, typer.Option(callback=positive_rate, help="Clicks per second, on average.")
    ] = 10.0,
    users: Annotated[int, typer.Option(min=1, max=MAX_USERS, help="Distinct shoppers.")] = 5_000,
    malformed: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of records corrupted on purpose.")
    ] = 0.02,
    seconds: Annotated[
        float | None,
        typer.Option(callback=positive_rate, help="Stop after this long (default: on Ctrl-C)."),
    ] = None,
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of Kafka topics created here.")
    ] = 4,
    bootstrap: Annotated[
        str, typer.Option(envvar="KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")
    ] = DEFAULT_BOOTSTRAP,
    pulsar: Annotated[
        str | None,
        typer.Option("--pulsar", metavar="URL", callback=pulsar_url, help="Pulsar service URL."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the shoppers' behaviour.")] = 0,
) -> None:
    """Play the demo shop live: sessions of clicks and orders, stamped with the time sent.

    The records are the ones the Spark assets clean (a share malformed, for the quarantine), so
    a running platform fills today's partition with data worth looking at.
    """

    if clicks_topic is None and orders_topic is None:
        raise typer.BadParameter("name --clicks-topic, --orders-topic or both")
    sinks: dict[Stream, RecordSink] = {}
    with exits_on(BrokerError):
        if clicks_topic is not None:
            sinks["clicks"] = KafkaSink(
                bootstrap, topic_name(clicks_topic, "'--clicks-topic'"), partitions
            )
        if orders_topic is not None and pulsar is not None:
            sinks["orders"] = PulsarSink(pulsar, pulsar_topic(orders_topic, "'--orders-topic'"))
        elif orders_topic is not None:
            sinks["orders"] = KafkaSink(
                bootstrap, topic_name(orders_topic, "'--orders-topic'"), partitions
            )
    start = time.time()
    shop = LiveShop(
        clicks_per_second=rate,
        start_ms=int(start * 1000),
        users=users,
        malformed_fraction=malformed,
        seed=seed,
    )
    with stop_on_signal() as stop:
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
