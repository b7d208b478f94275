"""``make demo``: the platform's main job on embedded defaults, verified end to end.

Starts Tansu and pulsar-lite, writes a keyed clickstream to Kafka and a stream of orders keyed
by customer to Pulsar, then runs both example workloads (``workloads/clickstream.yaml`` and
``workloads/orders.yaml``) in one process, drawing on one permit pool, until both streams are
drained. Then it checks what matters, per workload: every record handled, per-key order never
violated, and everything committed (Kafka: committed offsets equal to the log end; Pulsar: no
message left unacknowledged on the subscription).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from rich.console import Console
from rich.table import Table

from consumers.app import ConsumerApp, WorkloadSummary
from consumers.backends.kafka import committed_offsets, log_end_offsets
from consumers.embedded.pulsar import start_pulsar_lite
from consumers.embedded.tansu import start_tansu
from consumers.errors import SpecError
from consumers.examples import ORDER
from consumers.permits import LocalPermitPool
from consumers.run import build_app
from consumers.sample import produce_pulsar_sample, produce_sample
from consumers.spec import KafkaSourceSpec, PulsarSourceSpec, WorkloadSpec, load_spec

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
SPEC = WORKLOADS / "clickstream.yaml"
ORDERS_SPEC = WORKLOADS / "orders.yaml"
#: Key prefixes of the two streams: both workloads run the same order-checking handler, so
#: their keys must differ (``user-7`` and ``customer-7`` are two keys).
USER_PREFIX: Final = "user-"
CUSTOMER_PREFIX: Final = "customer-"
_WATCH_INTERVAL: Final = 0.005  # seconds between samples of the permit pools and progress
_Source = TypeVar("_Source", KafkaSourceSpec, PulsarSourceSpec)


@dataclass
class Watched:
    """What sampling one workload during the run saw (every few milliseconds)."""

    pool: str | None = None  # the permit pool it drew from
    peak_permits: int = 0
    completed: int = 0
    first_at: float | None = None  # the last sample before its first completed record
    last_at: float = 0.0  # the first sample that saw its last completed record

    @property
    def per_second(self) -> float:
        if self.first_at is None or self.last_at <= self.first_at:
            return 0.0
        return self.completed / (self.last_at - self.first_at)


@dataclass(frozen=True)
class Outcome:
    """What the demo measured of one workload."""

    label: str
    topic: str
    produced: int
    handled: int
    keys: int
    violations: int
    committed: str  # "<done> / <all> (<what>)"
    committed_all: bool
    watched: Watched


def run_demo(
    records: int,
    keys: int,
    partitions: int,
    console: Console,
    *,
    orders: int = 50_000,
    customers: int = 500,
) -> bool:
    """Run the demo; print a summary table; True when every check passed."""
    with start_tansu() as kafka, start_pulsar_lite() as pulsar:
        console.print(f"Embedded Kafka (Tansu) at {kafka.bootstrap}")
        console.print(f"Embedded Pulsar (pulsar-lite) at {pulsar.url}")
        env = {**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap, "PULSAR_URL": pulsar.url}
        clicks, kafka_source = _load(SPEC, env, KafkaSourceSpec)
        order_spec, pulsar_source = _load(ORDERS_SPEC, env, PulsarSourceSpec)
        topic = kafka_source.topics[0]
        produce_sample(
            kafka.bootstrap, topic, records, keys, partitions=partitions, key_prefix=USER_PREFIX
        )
        console.print(f"Produced {records:,} click events over {keys:,} users to {topic}")
        orders_topic = produce_pulsar_sample(
            pulsar.url, pulsar_source.topics[0], orders, customers, key_prefix=CUSTOMER_PREFIX
        ).topic
        console.print(f"Produced {orders:,} orders over {customers:,} customers to {orders_topic}")

        ORDER.reset()
        app = build_app([clicks, order_spec])
        started = time.monotonic()
        summaries, watched = asyncio.run(_run_watching(app, until_idle=1.0))
        seconds = time.monotonic() - started
        committed = committed_offsets(kafka.bootstrap, kafka_source.group, topic, partitions)
        ends = log_end_offsets(kafka.bootstrap, topic, partitions)
        unacked = pulsar_unacknowledged(pulsar.url, orders_topic, pulsar_source.subscription)

    completed = {summary.name: summary.counters["completed"] for summary in summaries}
    outcomes = [
        Outcome(
            label=f"{clicks.name} (Kafka)",
            topic=topic,
            produced=records,
            handled=completed.get(clicks.name, 0),
            keys=_keys(USER_PREFIX),
            violations=_violations(USER_PREFIX),
            committed=f"{sum(committed.values()):,} / {sum(ends.values()):,} (offsets)",
            committed_all=committed == ends,
            watched=watched[clicks.name],
        ),
        Outcome(
            label=f"{order_spec.name} (Pulsar)",
            topic=orders_topic,
            produced=orders,
            handled=completed.get(order_spec.name, 0),
            keys=_keys(CUSTOMER_PREFIX),
            violations=_violations(CUSTOMER_PREFIX),
            committed=f"{orders - unacked:,} / {orders:,} (acknowledged)",
            committed_all=unacked == 0,
            watched=watched[order_spec.name],
        ),
    ]
    ok = _print_summary(outcomes, console)
    console.print(f"Wall time incl. group join and 1 s idle check: {seconds:.1f} s")
    return ok


def _print_summary(outcomes: list[Outcome], console: Console) -> bool:
    """One column per workload, checks last; True when every check passed."""
    pools = {outcome.watched.pool for outcome in outcomes}
    shared = len(pools) == 1 and None not in pools
    table = Table(title="Lanehouse demo: two workloads, one process, one permit pool")
    table.add_column("measure")
    for outcome in outcomes:
        table.add_column(outcome.label, justify="right", overflow="fold")
    rows: dict[str, Callable[[Outcome], str]] = {
        "topic": lambda o: o.topic,
        "records produced": lambda o: f"{o.produced:,}",
        "records handled": lambda o: f"{o.handled:,}",
        "keys": lambda o: f"{o.keys:,}",
        "order violations": lambda o: str(o.violations),
        "throughput (first to last record)": lambda o: f"{o.watched.per_second:,.0f} msg/s",
        "committed": lambda o: o.committed,
        "permit pool (peak permits held)": lambda o: (
            f"{o.watched.pool} ({o.watched.peak_permits:,})"
        ),
    }
    checks: dict[str, Callable[[Outcome], bool]] = {
        "every record handled": lambda o: o.handled == o.produced,
        "per-key order kept": lambda o: o.violations == 0,
        "everything committed": lambda o: o.committed_all,
        # Every handled record held a permit of its workload's pool (an engine invariant).
        "drew on the shared pool": lambda o: shared and o.handled > 0,
    }
    for name, show in rows.items():
        table.add_row(name, *(show(outcome) for outcome in outcomes))
    for name, check in checks.items():
        table.add_row(name, *(_yes(check(outcome)) for outcome in outcomes))
    console.print(table)
    return all(check(outcome) for check in checks.values() for outcome in outcomes)


def _keys(prefix: str) -> int:
    return sum(1 for key in ORDER.last if key is not None and key.startswith(prefix.encode()))


def _violations(prefix: str) -> int:
    marker = prefix.encode()
    return sum(1 for key, _, _ in ORDER.violations if key is not None and key.startswith(marker))


def _yes(ok: bool) -> str:
    return "[green]yes[/green]" if ok else "[red]NO[/red]"


def _load(path: Path, env: dict[str, str], kind: type[_Source]) -> tuple[WorkloadSpec, _Source]:
    """The spec and its source, which must be of ``kind`` (someone may have edited the file)."""
    spec = load_spec(path, env=env)
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
    :func:`consumers.backends.pulsar.unacknowledged`)."""
    from consumers.backends.pulsar import unacknowledged

    return len(unacknowledged(service_url, subscription, topic))
