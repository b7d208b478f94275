"""``make demo``: the platform's main job on embedded defaults, end to end and verified.

    embedded Tansu + pulsar-lite ─► a shop's clicks (Kafka) and orders (Pulsar) over the last
    few UTC days, some malformed on purpose (orchestration.demo.events) ─► both example
    workloads (workloads/clickstream.yaml, workloads/orders.yaml) in one process on one permit
    pool, landing into a fresh lake until caught up ─► the Spark assets for those days in one
    Dagster run ─► a reconciliation table per day

It exits non-zero unless everything reconciles: each workload handled every record in per-key
order and committed everything; per day, what was produced landed (or was dead-lettered), and
every landed row is clean, quarantined or a duplicate, in exactly the numbers the generator
says it made valid and malformed records.

Each stage is a function of its own (``demo_data``, ``demo_streams``, ``produce_demo``,
``consume_demo``, ``materialize_demo``, and ``reconciliation_rows`` in
:mod:`orchestration.demo.report` with the tables it prints): ``bench/e2e.py`` times the same
pipeline at scale rather than a copy of it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from rich.console import Console

from consumers import (
    ConsumerApp,
    KafkaSourceSpec,
    LocalPermitPool,
    PulsarSourceSpec,
    SpecError,
    WorkloadSpec,
    WorkloadSummary,
    load_spec,
)
from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.config.platform import default_platform_config
from consumers.dev.embedded.pulsar import start_pulsar_lite
from consumers.dev.embedded.tansu import start_tansu
from consumers.dev.examples import TIME_ORDER
from consumers.engine import event_loop
from consumers.service.launch import build_app
from orchestration.demo.events import DemoRecord, generate
from orchestration.demo.producers import produce_kafka, produce_pulsar
from orchestration.demo.report import (
    Outcome,
    Watched,
    print_reconciliation,
    print_summary,
    reconciliation_rows,
)
from orchestration.shop.backfill import RangeRun

if TYPE_CHECKING:
    from dagster import DagsterInstance

WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"
SPEC = WORKLOADS / "clickstream.yaml"
ORDERS_SPEC = WORKLOADS / "orders.yaml"
_WATCH_INTERVAL: Final = 0.005  # seconds between samples of the permit pools and progress
_Source = TypeVar("_Source", KafkaSourceSpec, PulsarSourceSpec)


def demo_days(days: int, today: date | None = None) -> list[date]:
    """The ``days`` UTC days before today: closed days, as the Spark automation expects."""
    today = today or datetime.now(UTC).date()
    return [today - timedelta(days=n) for n in range(days, 0, -1)]


@contextmanager
def _lake_env(lake: Path) -> Iterator[None]:
    """``LANEHOUSE_LAKE`` for the Spark assets run in this process, restored afterwards."""
    previous = os.environ.get("LANEHOUSE_LAKE")
    os.environ["LANEHOUSE_LAKE"] = str(lake)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("LANEHOUSE_LAKE", None)
        else:
            os.environ["LANEHOUSE_LAKE"] = previous


@dataclass(frozen=True)
class DemoData:
    """What the generator made for the demo's days: the stages and the checks share it."""

    dates: list[date]
    records: list[DemoRecord]
    clicks: list[DemoRecord]  # to Kafka
    orders: list[DemoRecord]  # to Pulsar

    @property
    def malformed(self) -> int:
        return sum(not r.valid for r in self.records)


@dataclass(frozen=True)
class Streams:
    """The two example workloads, pointed at the running brokers, and their topics."""

    bootstrap: str
    pulsar_url: str
    clicks: WorkloadSpec
    kafka: KafkaSourceSpec
    orders: WorkloadSpec
    pulsar: PulsarSourceSpec

    @property
    def topic(self) -> str:
        return self.kafka.topics[0]

    @property
    def orders_topic(self) -> str:
        return self.pulsar.topics[0]

    @property
    def specs(self) -> dict[str, WorkloadSpec]:
        """Per stream of the generator, the workload that lands it."""
        return {"clicks": self.clicks, "orders": self.orders}


@dataclass(frozen=True)
class Consumed:
    """What consuming the demo's topics until idle did, per workload."""

    outcomes: list[Outcome]
    dead: dict[str, int]  # records dead-lettered, by workload
    seconds: float  # the engine's whole run: group join, work, idle check, close
    caught_up: float  # from its start until the last record of every workload completed

    def print_summary(self, console: Console) -> bool:
        """The consuming table; True when every check passed."""
        return print_summary(self.outcomes, console)


def demo_data(
    dates: list[date], *, users: int, sessions: float, malformed: float, seed: int = 0
) -> DemoData:
    """Every record of ``dates``, split by the broker it goes to."""
    records = list(
        generate(
            dates,
            users=users,
            sessions_per_user_per_day=sessions,
            malformed_fraction=malformed,
            seed=seed,
        )
    )
    clicks = [r for r in records if r.stream == "clicks"]
    orders = [r for r in records if r.stream == "orders"]
    return DemoData(dates, records, clicks, orders)


def demo_streams(bootstrap: str, pulsar_url: str) -> Streams:
    """Load the example workloads, their default clusters on these brokers."""
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "PULSAR_URL": pulsar_url}
    clicks, kafka_source = _load(SPEC, env, KafkaSourceSpec)
    orders, pulsar_source = _load(ORDERS_SPEC, env, PulsarSourceSpec)
    return Streams(bootstrap, pulsar_url, clicks, kafka_source, orders, pulsar_source)


def produce_demo(streams: Streams, data: DemoData, partitions: int) -> None:
    """Clicks to Kafka (a topic of ``partitions``), orders to Pulsar, all acknowledged."""
    produce_kafka(streams.bootstrap, streams.topic, data.clicks, partitions)
    produce_pulsar(streams.pulsar_url, streams.orders_topic, data.orders)


def consume_demo(streams: Streams, data: DemoData, lake: Path, partitions: int) -> Consumed:
    """Both workloads in one app until caught up and idle for 1 s, landing into ``lake``;
    then what each handled, in what order, and what it committed."""
    TIME_ORDER.reset()
    app = build_app([streams.clicks, streams.orders], lake=lake)
    started = time.monotonic()
    summaries, watched = event_loop.run(_run_watching(app, until_idle=1.0))
    seconds = time.monotonic() - started
    clicks, orders = streams.clicks, streams.orders
    topic, orders_topic = streams.topic, streams.orders_topic
    committed = committed_offsets(streams.bootstrap, streams.kafka.group, topic, partitions)
    ends = log_end_offsets(streams.bootstrap, topic, partitions)
    unacked = pulsar_unacknowledged(streams.pulsar_url, orders_topic, streams.pulsar.subscription)

    completed = {summary.name: summary.counters["completed"] for summary in summaries}
    dead = {summary.name: summary.counters["dead_lettered"] for summary in summaries}
    outcomes = [
        Outcome(
            label=f"{clicks.name} (Kafka)",
            topic=topic,
            produced=len(data.clicks),
            handled=completed.get(clicks.name, 0) + dead.get(clicks.name, 0),
            keys=TIME_ORDER.keys(topic),
            violations=TIME_ORDER.violations[topic],
            committed=f"{sum(committed.values()):,} / {sum(ends.values()):,} (offsets)",
            committed_all=committed == ends,
            watched=watched[clicks.name],
        ),
        Outcome(
            label=f"{orders.name} (Pulsar)",
            topic=orders_topic,
            produced=len(data.orders),
            handled=completed.get(orders.name, 0) + dead.get(orders.name, 0),
            keys=TIME_ORDER.keys(orders_topic),
            violations=TIME_ORDER.violations[orders_topic],
            committed=f"{len(data.orders) - unacked:,} / {len(data.orders):,} (acknowledged)",
            committed_all=unacked == 0,
            watched=watched[orders.name],
        ),
    ]
    last = max((w.last_at for w in watched.values() if w.completed), default=started + seconds)
    return Consumed(outcomes, dead, seconds, caught_up=last - started)


def materialize_demo(
    dates: list[date], lake: Path, instance: DagsterInstance | None = None
) -> RangeRun:
    """The Spark assets for ``dates`` in one Dagster run over ``lake``, on ``instance`` (an
    ephemeral one by default: the caller that passes its own can read the run's events)."""
    from dagster import DagsterInstance

    from orchestration.shop.backfill import materialize_days

    with _lake_env(lake):
        if instance is not None:
            return materialize_days(dates[0], dates[-1], instance=instance, log_level="WARNING")
        with DagsterInstance.ephemeral() as ephemeral:
            return materialize_days(dates[0], dates[-1], instance=ephemeral, log_level="WARNING")


def run_demo(
    console: Console,
    *,
    state: Path,
    days: int = 3,
    users: int = 200,
    sessions: float = 2.0,
    malformed: float = 0.02,
    partitions: int = 4,
) -> bool:
    """Run the demo; print the tables; True when everything reconciled.

    The lake is ``<state>/demo/lake``, emptied first, so every run starts from nothing.
    """
    data = demo_data(demo_days(days), users=users, sessions=sessions, malformed=malformed)
    dates = data.dates
    root = state / "demo"
    shutil.rmtree(root, ignore_errors=True)
    lake = (root / "lake").resolve()
    with start_tansu() as kafka, start_pulsar_lite() as pulsar:
        console.print(f"Embedded Kafka (Tansu) at {kafka.bootstrap}")
        console.print(f"Embedded Pulsar (pulsar-lite) at {pulsar.url}")
        streams = demo_streams(kafka.bootstrap, pulsar.url)
        produce_demo(streams, data, partitions)
        console.print(
            f"Produced {len(data.clicks):,} clicks to {streams.topic} and {len(data.orders):,} "
            f"orders to {streams.orders_topic}, {dates[0]} to {dates[-1]}, "
            f"{data.malformed:,} malformed on purpose"
        )
        consumed = consume_demo(streams, data, lake, partitions)
    console.print(
        f"Consumed and landed in {consumed.seconds:.1f} s (incl. group join, 1 s idle check)"
    )
    consumed_ok = consumed.print_summary(console)

    console.print(f"Materializing the Spark assets for {dates[0]} to {dates[-1]} (one run)...")
    started = time.monotonic()
    run = materialize_demo(dates, lake)
    console.print(
        f"Spark run {run.run_id}: {'succeeded' if run.success else 'FAILED'} "
        f"in {time.monotonic() - started:.1f} s"
    )
    rows = reconciliation_rows(data.records, run, streams.specs)
    reconciled = print_reconciliation(rows, consumed.dead, console)
    console.print(f"Lake: {lake}")
    return consumed_ok and run.success and run.checks_passed and reconciled


def _load(path: Path, env: dict[str, str], kind: type[_Source]) -> tuple[WorkloadSpec, _Source]:
    """The spec and its source, which must be of ``kind`` (someone may have edited the file)."""
    spec = load_spec(path, env=env, platform=default_platform_config(env))
    if not isinstance(spec.source, kind):
        raise SpecError(str(path), "source.kind", f"the demo needs {kind.__name__} here")
    return spec, spec.source


async def _run_watching(
    app: ConsumerApp, until_idle: float
) -> tuple[list[WorkloadSummary], dict[str, Watched]]:
    """Run the app until idle, sampling its permit pools and progress on the same loop."""
    watched = {workload.settings.name: Watched() for workload in app.workloads}

    async def watch() -> None:
        previous = time.monotonic()
        while True:
            now = time.monotonic()
            for pool_name, pool in app.pools.items():
                for client in pool.clients if isinstance(pool, LocalPermitPool) else ():
                    seen = watched[client.name]
                    seen.pool = pool_name
                    seen.peak_permits = max(seen.peak_permits, client.held)
            for name, runner in list(app.runners.items()):
                seen, completed = watched[name], runner.counters.snapshot()["completed"]
                if completed > seen.completed:
                    if seen.first_at is None:
                        seen.first_at = previous
                    seen.completed, seen.last_at = completed, now
            previous = now
            await asyncio.sleep(_WATCH_INTERVAL)

    watcher = asyncio.create_task(watch())
    try:
        summaries = await app.run(until_idle=until_idle, install_signal_handlers=True)
    finally:
        watcher.cancel()
    return summaries, watched


def pulsar_unacknowledged(service_url: str, topic: str, subscription: str) -> int:
    """How many messages of ``topic`` ``subscription`` would redeliver (see
    :func:`consumers.backends.pulsar.probe.unacknowledged`)."""
    from consumers.backends.pulsar.probe import unacknowledged

    return len(unacknowledged(service_url, subscription, topic))
