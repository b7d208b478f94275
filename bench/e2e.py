"""End-to-end bench: N demo events from produce to clean Spark tables, and where the time goes.

    .venv/bin/python bench/e2e.py [--events N] [--days D] [--partitions P] [--out F]

It runs the pipeline of ``make demo`` (orchestration/demo/runner.py), calling the demo's own stage
functions, at a volume chosen so the generator makes about ``--events`` records (the exact count
is reported): users (at most 10,000) x sessions per user per day x days x ~5.9 records per
session (~5.74 clicks to Kafka, ~0.16 orders to Pulsar). Each stage is timed with
``time.monotonic()``, one after the other in this process:

- generate: the demo generator, every record in memory (the harness, not the platform);
- brokers: starting and stopping embedded Tansu (memory storage) and pulsar-lite;
- produce: clicks to a ``--partitions`` topic on Tansu, orders to pulsar-lite, all acknowledged;
- consume + land: both example workloads in one engine (``consume_demo``), from its start (group
  join included) until the last record of both completed, i.e. was in a durable Parquet file;
- idle check + close: the rest of the engine's run (it stops once nothing was ingested for 1 s
  and nothing is in flight, then commits and closes) and the demo's read-back of committed
  offsets and unacknowledged messages;
- spark: every Spark asset for the days in one Dagster run (``materialize_demo``) on an
  ephemeral instance; its event log splits it into resource start-up (the JVM and the
  SparkSession), each step (asset) and the rest (Dagster loading, planning, its events);
- reconcile: the demo's consuming checks and its per-day reconciliation table.

Shares are of the wall time from the first stage's start to the last one's end. The bench fails
(exit 1) unless everything the demo checks holds: every record handled, per-key order kept,
everything committed or acknowledged, one shared permit pool; the Spark run and its checks
succeeded; per day and stream, produced = landed = clean + quarantined (no duplicates, nothing
unaccounted), in the numbers the generator made valid and malformed, nothing dead-lettered.
The demo's tables and progress go to stderr, the JSON result to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rich.console import Console

from consumers.dev.embedded.pulsar import start_pulsar_lite
from consumers.dev.embedded.tansu import start_tansu
from orchestration.demo.events import MAX_SESSIONS_PER_USER_PER_DAY, MAX_USERS
from orchestration.demo.report import print_reconciliation, reconciliation_rows
from orchestration.demo.runner import (
    consume_demo,
    demo_data,
    demo_days,
    demo_streams,
    materialize_demo,
    produce_demo,
)

if TYPE_CHECKING:
    from dagster import DagsterInstance

#: Records per session of the demo generator: ~5.74 clicks and ~0.16 orders on average.
RECORDS_PER_SESSION: Final = 5.9
#: Sessions per user per day aimed at (the demo's default) until the users run out.
SESSIONS_PER_USER: Final = 2.0
#: The Spark run's resource initialization: starting the JVM and the SparkSession.
STARTUP: Final = "startup (JVM + SparkSession)"


class Stages:
    """Wall time per stage, in the order they ran, reported to stderr as they end."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.console.print(f"[bold]{name}[/bold]...")
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.console.print(f"  {name}: {seconds:.2f} s")


def demo_volume(events: int, days: int) -> tuple[int, float]:
    """Users and sessions per user per day for about ``events`` records over ``days`` days.

    Two sessions per user as in the demo, as long as 10,000 users suffice; then more sessions.
    """
    sessions_per_day = events / (days * RECORDS_PER_SESSION)
    users = max(1, min(MAX_USERS, round(sessions_per_day / SESSIONS_PER_USER)))
    sessions = sessions_per_day / users
    if sessions > MAX_SESSIONS_PER_USER_PER_DAY:
        most = int(MAX_USERS * MAX_SESSIONS_PER_USER_PER_DAY * RECORDS_PER_SESSION * days)
        raise ValueError(f"{events:,} events over {days} days is too many: at most ~{most:,}")
    return users, sessions


def spark_breakdown(instance: DagsterInstance, run_id: str) -> dict[str, float]:
    """Seconds of the run's resource start-up (the JVM and SparkSession) and of each step
    (start to success or failure), from its event log."""
    from dagster import DagsterEventType as Type

    begun: dict[str, float] = {}
    spent: dict[str, float] = {}
    starts = {Type.RESOURCE_INIT_STARTED, Type.STEP_START}
    ends = {Type.RESOURCE_INIT_SUCCESS, Type.RESOURCE_INIT_FAILURE}
    ends |= {Type.STEP_SUCCESS, Type.STEP_FAILURE}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        name = entry.step_key or STARTUP  # resources start outside any step
        if event.event_type in starts:
            begun[name] = entry.timestamp
        elif event.event_type in ends and name in begun:
            spent[name] = spent.get(name, 0.0) + entry.timestamp - begun.pop(name)
    return spent


def tree_size(path: Path) -> tuple[int, int]:
    """Files and bytes under ``path``."""
    sizes = [p.stat().st_size for p in path.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


def run(args: argparse.Namespace, work: Path, console: Console) -> dict[str, Any]:
    """The pipeline, stage by stage; the report with ``ok`` saying whether all checks held."""
    from dagster import DagsterInstance

    users, sessions = demo_volume(args.events, args.days)
    lake = (work / "e2e" / "lake").resolve()
    shutil.rmtree(lake, ignore_errors=True)  # every run starts from an empty lake
    stages = Stages(console)
    started = time.monotonic()
    with stages.stage("generate"):
        data = demo_data(
            demo_days(args.days), users=users, sessions=sessions, malformed=args.malformed
        )
    console.print(
        f"  {len(data.records):,} records: {len(data.clicks):,} clicks, "
        f"{len(data.orders):,} orders, {data.malformed:,} malformed "
        f"({users:,} users x {sessions:.3f} sessions a day x {args.days} days)"
    )
    with ExitStack() as brokers:
        with stages.stage("brokers"):
            kafka = brokers.enter_context(start_tansu())
            pulsar = brokers.enter_context(start_pulsar_lite())
        with stages.stage("produce"):
            streams = demo_streams(kafka.bootstrap, pulsar.url)
            produce_demo(streams, data, args.partitions)
        consume_started = time.monotonic()
        consumed = consume_demo(streams, data, lake, args.partitions)
        consume_seconds = time.monotonic() - consume_started
        stages.add("consume + land", consumed.caught_up)
        stages.add("idle check + close", consume_seconds - consumed.caught_up)
        stop_started = time.monotonic()
    stages.add("brokers", time.monotonic() - stop_started)

    with stages.stage("spark"), DagsterInstance.ephemeral() as instance:
        spark = materialize_demo(data.dates, lake, instance)
        steps = spark_breakdown(instance, spark.run_id)
    with stages.stage("reconcile"):
        consumed_ok = consumed.print_summary(console)
        rows = reconciliation_rows(data.records, spark, streams.specs)
        reconciled = print_reconciliation(rows, consumed.dead, console)
    total = time.monotonic() - started
    landed_files, landed_bytes = tree_size(lake / "landed")

    steps["dagster (outside steps)"] = stages.seconds["spark"] - sum(steps.values())
    produce_to_tables = sum(
        stages.seconds[s] for s in ("produce", "consume + land", "idle check + close", "spark")
    )
    checks = {
        "consumed": consumed_ok,
        "spark_run_succeeded": spark.success,
        "spark_checks_passed": spark.checks_passed,
        "reconciled": reconciled,
    }
    return {
        "events": len(data.records),
        "clicks": len(data.clicks),
        "orders": len(data.orders),
        "malformed": data.malformed,
        "days": [d.isoformat() for d in data.dates],
        "volume": {
            "users": users,
            "sessions_per_user_per_day": round(sessions, 4),
            "malformed_fraction": args.malformed,
            "partitions": args.partitions,
            "seed": 0,
        },
        "stages": {
            name: {"seconds": round(s, 3), "share": round(s / total, 4)}
            for name, s in stages.seconds.items()
        },
        "spark_breakdown": {name: round(s, 3) for name, s in steps.items()},
        "engine": {
            "run_seconds": round(consumed.seconds, 3),
            "msg_s_first_to_last": {
                o.label: round(o.watched.per_second) for o in consumed.outcomes
            },
        },
        "landed": {"files": landed_files, "bytes": landed_bytes},
        "total_seconds": round(total, 3),
        "events_per_s": round(len(data.records) / total),
        "produce_to_tables_seconds": round(produce_to_tables, 3),
        "events_per_s_produce_to_tables": round(len(data.records) / produce_to_tables),
        "spark_run_id": spark.run_id,
        "checks": checks,
        "ok": all(checks.values()),
    }


def table(report: dict[str, Any]) -> str:
    """The stages as a Markdown table, as docs/benchmarks.md shows them."""
    lines = ["| stage | seconds | share |", "|---|---|---|"]
    for name, stage in report["stages"].items():
        lines.append(f"| {name} | {stage['seconds']:,.1f} | {stage['share']:.1%} |")
    lines.append(f"| **total** | **{report['total_seconds']:,.1f}** | 100% |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="about this many records")
    parser.add_argument("--days", type=int, default=3, help="closed UTC days before today")
    parser.add_argument("--partitions", type=int, default=4, help="of the Kafka topic")
    parser.add_argument("--malformed", type=float, default=0.02, help="fraction, as the demo")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--state", type=Path, help="keep the lake in <STATE>/e2e/lake (default: a temporary dir)"
    )
    args = parser.parse_args()
    if args.events < 1 or args.days < 1 or args.partitions < 1:
        parser.error("--events, --days and --partitions must be positive")
    try:
        demo_volume(args.events, args.days)
    except ValueError as exc:
        parser.error(str(exc))
    console = Console(stderr=True)
    machine = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "dagster": version("dagster"),
        "confluent_kafka": version("confluent-kafka"),
        "pulsar_client": version("pulsar-client"),
        "pulsar_lite": version("pulsar-lite"),
        "spark_driver_memory": os.environ.get("SPARK_DRIVER_MEMORY", "default (1g)"),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": os.getloadavg(),
    }
    with ExitStack() as stack:
        if args.state is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lanehouse-e2e-")))
        else:
            work = args.state
            work.mkdir(parents=True, exist_ok=True)
        result = run(args, work, console)
    machine["loadavg_at_end"] = os.getloadavg()
    machine["peak_rss_mb_python"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    report = {"machine": machine, **result}
    console.print(table(report), markup=False, highlight=False)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if not report["ok"]:
        failed = [name for name, ok in report["checks"].items() if not ok]
        print(f"!!! CORRECTNESS FAILURES: {failed} (see the tables above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
