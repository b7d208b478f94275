"""Engine throughput bench against one embedded Tansu broker (and pulsar-lite for Pulsar rows).

    PYTHONPATH=. .venv/bin/python bench/engine.py [--records N] [--rows a,b] [--repeat K] [--out F]

Per row: a fresh 4-partition topic with 1,000 keys (``produce_sample``), then the contender in
its own child process (``--child ROW``) so peak RSS and CPU time are its own. Rates come from
the handler's timestamps (first call -> last completion), so the group join and the idle wait
at the end are excluded. Every engine row checks per-key order (seq = last + 1, never two
records of one key at once), that every record was handled, and that the committed offset of
every partition equals its log end; any failure makes the bench exit non-zero.

The ``pulsar_*`` rows run the same contenders against an embedded pulsar-lite broker, started
only when one of them is selected: one non-partitioned topic (the engine's partition 0) with the
same keys and values (``produce_pulsar_sample``, a batching producer), one Shared subscription,
the engine acknowledging message by message. ``pulsar_raw_receive`` is a plain ``receive()`` +
``acknowledge()`` loop. Instead of committed offsets they check, after the consumer closed, that
the subscription has nothing unacknowledged (``consumers.backends.pulsar.unacknowledged``; the
raw row too, as it acknowledges). pulsar-client is imported on the Pulsar paths only, so its
~12 MB stay out of the Kafka rows' peak RSS.

Two rows exercise the outcomes machinery: ``retry_1pct`` is the 20 ms row at C=1,000 where the
records at offset % 100 == 7 raise on their first attempt (the lane stays held during the
backoff, so the order check counts each record at its successful attempt; the engine must count
exactly those failures and retries), and ``batch_json`` is the JSON row in batch mode (500
records or 50 ms a call, 4 calls at once), checked per key across batches.

``sleep20_c300_shared_sqlite`` and ``sleep20_c300_shared_pg`` are the 20 ms row at C=300 with its
permits from a shared pool (``consumers.shared_permits``) leased in a fresh SQLite file or a
PostgreSQL server started for the run (``tests/postgres.py``); ``ratios`` in the JSON compares
each with ``sleep20_c300`` (in-process pool) when both ran.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import confluent_kafka
from confluent_kafka import Consumer, TopicPartition

from consumers.app import ConsumerApp, Workload
from consumers.backends.kafka import CONSUMER_DEFAULTS, ENGINE_OWNED, kafka_consumer_factory
from consumers.embedded.child import BrokerProcess
from consumers.embedded.tansu import start_tansu
from consumers.permit_store import PermitStore
from consumers.permits import LocalPermitPool
from consumers.pulsar_options import validate_pulsar_topic
from consumers.record import Record
from consumers.resolution import RetryPolicy
from consumers.runner import RunnerSettings
from consumers.sample import produce_pulsar_sample, produce_sample
from consumers.shared_permits import SharedPermitPool

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS, KEYS, SLEEP = 4, 1000, 0.020
CLIENT = {
    **CONSUMER_DEFAULTS,
    "fetch.wait.max.ms": 10,
    "session.timeout.ms": 2000,
    "heartbeat.interval.ms": 500,
}
HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None
FAIL_EVERY, FAIL_AT = 100, 7  # fail_once rows: offset % 100 == 7 fails its first attempt
RETRY = RetryPolicy(max_attempts=3, backoff=0.02, max_backoff=0.2, jitter=True)
BATCH = {"mode": "batch", "batch_size": 500, "batch_max_wait": 0.05}


@dataclass(frozen=True)
class Row:
    kind: str  # raw | noop | sleep | json
    concurrency: int = 1000
    records: int = 200_000
    uvloop: bool = False
    fail_once: bool = False  # 1% of records raise once, with RETRY as the retry policy
    batch: bool = False  # the handler takes a list (BATCH settings)
    backend: Literal["kafka", "pulsar"] = "kafka"
    #: Where the permits come from: the in-process pool, or a shared pool leased in a database.
    permits: Literal["local", "sqlite", "postgresql"] = "local"


ROWS = {
    "raw_consume": Row("raw"),
    "noop_key": Row("noop"),
    "noop_key_uvloop": Row("noop", uvloop=True),
    "sleep20_c300": Row("sleep", 300, 100_000),
    "sleep20_c1000": Row("sleep", 1000, 200_000),
    "json": Row("json"),
    "retry_1pct": Row("sleep", 1000, 200_000, fail_once=True),
    "batch_json": Row("json", 4, batch=True),
    "sleep20_c300_shared_sqlite": Row("sleep", 300, 100_000, permits="sqlite"),
    "sleep20_c300_shared_pg": Row("sleep", 300, 100_000, permits="postgresql"),
    "pulsar_raw_receive": Row("raw", backend="pulsar"),
    "pulsar_noop_key": Row("noop", backend="pulsar"),
    "pulsar_sleep20_c300": Row("sleep", 300, 100_000, backend="pulsar"),
}


# ---------------------------------------------------------------------------- child side


class Check:
    """Counts completions (a timestamp every 1,000 and at the last), per-key order, log ends."""

    def __init__(self, records: int) -> None:
        self.records, self.done, self.stamped = records, 0, 0
        self.stamps: list[tuple[int, float]] = []
        self.t0 = self.t1 = self.cpu0 = self.cpu1 = 0.0
        self.last: dict[bytes | None, int] = {}
        self.active: set[bytes | None] = set()
        self.high: dict[int, int] = {}
        self.violations = 0
        self.injected = 0  # first attempts the fail_once handler failed on purpose
        self.sink: Any = None  # the json row's output, so the transform is not dead code

    def start_clock(self) -> None:
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()

    def tick(self, n: int) -> None:
        self.done += n
        if self.done - self.stamped >= 1000 or self.done >= self.records:
            self.stamped = self.done
            self.stamps.append((self.done, time.perf_counter()))
            if self.done >= self.records:
                self.t1, self.cpu1 = time.perf_counter(), time.process_time()

    def begin(self, rec: Record, seq: int) -> None:
        if not self.t0:
            self.start_clock()
        key = rec.key
        if key in self.active or seq != self.last.get(key, -1) + 1:
            self.violations += 1
        self.active.add(key)
        self.last[key] = seq

    def fail(self, rec: Record, seq: int) -> None:
        """An attempt failed on purpose: its key is free again and ``seq`` is not counted yet
        (its lane is held, so the retry must be the key's next record)."""
        self.active.discard(rec.key)
        self.last[rec.key] = seq - 1
        self.injected += 1

    def end(self, rec: Record) -> None:
        self.active.discard(rec.key)
        if rec.offset >= self.high.get(rec.partition, 0):
            self.high[rec.partition] = rec.offset + 1
        self.tick(1)

    def result(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "stamps": self.stamps,
            "window_s": self.t1 - self.t0,
            "window_cpu_s": self.cpu1 - self.cpu0,
            "high": self.high,
            "violations": self.violations,
            "injected": self.injected,
            "busiest_key": max(self.last.values(), default=-1) + 1,
        }


def seq_of(value: bytes) -> int:
    """``seq`` from a produce_sample value without a full JSON parse."""
    i = value.index(b'"seq":') + 6
    return int(value[i : value.index(b",", i)])


class InjectedFailure(Exception):
    """What the fail_once handler raises on a record's first attempt."""


def make_handler(row: Row, check: Check) -> Any:
    begin, end = check.begin, check.end
    failed: set[tuple[int, int]] = set()

    async def noop(rec: Record) -> None:
        begin(rec, seq_of(rec.value))  # type: ignore[arg-type]
        end(rec)

    async def sleep(rec: Record) -> None:
        begin(rec, seq_of(rec.value))  # type: ignore[arg-type]
        await asyncio.sleep(SLEEP)
        end(rec)

    async def sleep_fail_once(rec: Record) -> None:
        seq = seq_of(rec.value)  # type: ignore[arg-type]
        begin(rec, seq)
        await asyncio.sleep(SLEEP)
        if rec.offset % FAIL_EVERY == FAIL_AT and (rec.partition, rec.offset) not in failed:
            failed.add((rec.partition, rec.offset))
            check.fail(rec, seq)
            raise InjectedFailure(f"first attempt of {rec.partition}@{rec.offset}")
        end(rec)

    def parse(rec: Record) -> int:
        data = json.loads(rec.value)  # type: ignore[arg-type]
        check.sink = {"key": data["key"].upper(), "seq": data["seq"] + 1}
        return int(data["seq"])

    async def transform(rec: Record) -> None:
        begin(rec, parse(rec))
        end(rec)

    async def transform_batch(recs: list[Record]) -> None:
        for rec in recs:  # whole runs of each lane, in lane order
            begin(rec, parse(rec))
            end(rec)

    if row.batch:
        assert row.kind == "json", "only the json handler has a batch form"
        return transform_batch
    if row.fail_once:
        assert row.kind == "sleep", "only the sleep handler has a fail_once form"
        return sleep_fail_once
    return {"noop": noop, "sleep": sleep, "json": transform}[row.kind]


def run_raw(args: argparse.Namespace) -> dict[str, Any]:
    config = {**CLIENT, **ENGINE_OWNED, "bootstrap.servers": args.broker, "group.id": args.group}
    consumer = Consumer(config)
    consumer.subscribe([args.topic])
    check, high = Check(args.records), {}
    deadline = time.monotonic() + args.timeout
    while check.done < args.records and time.monotonic() < deadline:
        messages = consumer.consume(num_messages=5000, timeout=0.1)
        if not messages:
            continue
        if not check.t0:
            check.start_clock()
        n = 0
        for msg in messages:
            if msg.error() is None:
                high[msg.partition()] = msg.offset() + 1  # offsets rise within a partition
                n += 1
        check.tick(n)
    consumer.close()
    check.high = high
    return check.result()


def run_raw_pulsar(args: argparse.Namespace) -> dict[str, Any]:
    import pulsar

    from consumers.backends.pulsar import client_kwargs

    client = pulsar.Client(args.broker, **client_kwargs({}))
    consumer = client.subscribe(  # as the engine's PulsarConsumer subscribes
        args.topic,
        args.group,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    receive, acknowledge = consumer.receive, consumer.acknowledge
    check = Check(args.records)
    deadline = time.monotonic() + args.timeout
    while check.done < args.records and time.monotonic() < deadline:
        try:
            msg = receive(100)
        except pulsar.Timeout:
            continue
        if not check.t0:
            check.start_clock()
        acknowledge(msg)
        check.tick(1)
    consumer.close()  # flushes the grouped acknowledgements
    client.close()
    check.high = {0: check.done}
    return check.result()


def run_engine(row: Row, args: argparse.Namespace) -> dict[str, Any]:
    check = Check(args.records)
    extra: dict[str, Any] = dict(BATCH) if row.batch else {}
    if row.fail_once:
        extra["retry"] = RETRY
        # One warning with a traceback per failed attempt: formatted (a real cost), not shown.
        engine_log = logging.getLogger("lanehouse")
        engine_log.addHandler(logging.FileHandler(os.devnull))
        engine_log.propagate = False
    settings = RunnerSettings(name="bench", ordering="key", concurrency=row.concurrency, **extra)
    if row.backend == "pulsar":
        from consumers.backends.pulsar import PulsarSettings, pulsar_consumer_factory

        factory = pulsar_consumer_factory(PulsarSettings(args.broker, args.group))
    else:
        factory = kafka_consumer_factory(
            {**CLIENT, "bootstrap.servers": args.broker, "group.id": args.group}
        )
    workload = Workload(settings, make_handler(row, check), [args.topic], factory)

    pool_factory: Any = LocalPermitPool
    if row.permits != "local":
        store = PermitStore(args.permits_url)
        store.declare_pools({"default": row.concurrency})
        pool_factory = lambda name, size: SharedPermitPool(name, store)  # noqa: E731

    async def main() -> Any:
        app = ConsumerApp(
            [workload], pool_sizes={"default": row.concurrency}, pool_factory=pool_factory
        )
        return await app.run(until_idle=1.0)

    if row.uvloop:
        import uvloop

        summaries = uvloop.run(main())
    else:
        summaries = asyncio.run(main())
    return {**check.result(), "counters": summaries[0].counters}


def child(args: argparse.Namespace) -> None:
    row = ROWS[args.child]
    if row.kind == "raw":
        result = run_raw_pulsar(args) if row.backend == "pulsar" else run_raw(args)
    else:
        result = run_engine(row, args)
    result["cpu_total_s"] = time.process_time()
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


# ---------------------------------------------------------------------------- parent side


def rate_between(stamps: Sequence[Sequence[float]], lo: float, hi: float) -> float | None:
    """Records per second between the stamps where ``lo`` and ``hi`` records were done."""
    a, b = (next((s for s in stamps if s[0] >= n), None) for n in (lo, hi))
    return (b[0] - a[0]) / (b[1] - a[1]) if a and b and b[1] > a[1] else None


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


def start_broker(backend: str) -> BrokerProcess:
    if backend == "pulsar":
        from consumers.embedded.pulsar import start_pulsar_lite

        return start_pulsar_lite()
    return start_tansu()


def produce(row: Row, broker: str, topic: str, records: int) -> None:
    if row.backend == "pulsar":
        produce_pulsar_sample(broker, topic, records, KEYS)
    else:
        produce_sample(broker, topic, records, KEYS, partitions=PARTITIONS)


def commit_errors(row: Row, broker: str, topic: str, group: str, high: dict[int, int]) -> list[str]:
    """Why the group did not commit (Kafka) or acknowledge (Pulsar) everything; [] if it did."""
    if row.backend == "pulsar":
        from consumers.backends.pulsar import unacknowledged

        left = unacknowledged(broker, group, topic)
        return [f"{len(left)} records unacknowledged, first ids {left[:3]}"] if left else []
    committed = committed_offsets(broker, group, topic)
    if len(high) == PARTITIONS and committed == high:
        return []
    return [f"committed {committed} != log end {high}"]


def run_row(
    name: str, records: int, broker: str, timeout: float, permit_urls: dict[str, str]
) -> dict[str, Any]:
    row = ROWS[name]
    short = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    topic = validate_pulsar_topic(short) if row.backend == "pulsar" else short
    group = f"{short}-group"
    produce(row, broker, topic, records)
    cmd = [sys.executable, "-m", "bench.engine", "--child", name, "--broker", broker]
    cmd += [
        "--topic",
        topic,
        "--group",
        group,
        "--records",
        str(records),
        "--timeout",
        str(timeout),
    ]
    if row.permits != "local":
        cmd += ["--permits-url", permit_urls[row.permits]]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, timeout=timeout + 60)
    if proc.returncode != 0:
        return {"row": name, "records": records, "errors": [f"child exited {proc.returncode}"]}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    high = {int(p): off for p, off in res["high"].items()}
    out: dict[str, Any] = {"row": name, "records": records, "errors": []}
    if res["done"] != records:
        out["errors"].append(f"handled {res['done']} of {records} records")
    window = res["window_s"]
    out["msg_s"] = res["done"] / window if window > 0 else None
    out["msg_s_10_90"] = rate_between(res["stamps"], 0.1 * records, 0.9 * records)
    out["bound"] = out["efficiency"] = None
    if row.kind == "sleep" and res["busiest_key"] > 0:
        out["busiest_key"] = res["busiest_key"]
        out["bound"] = min(row.concurrency / SLEEP, records / (res["busiest_key"] * SLEEP))
        out["efficiency"] = out["msg_s"] / out["bound"] if out["msg_s"] else None
    out["cpu_us_per_record"] = res["window_cpu_s"] / max(res["done"], 1) * 1e6
    out.update(cpu_total_s=res["cpu_total_s"], peak_rss_mb=res["peak_rss_mb"])
    out["order_ok"] = out["committed_ok"] = None
    if row.kind != "raw" or row.backend == "pulsar":  # the raw Pulsar loop acknowledges too
        errors = commit_errors(row, broker, topic, group, high)
        out["committed_ok"] = not errors
        out["errors"] += errors
    if row.kind != "raw":
        out["order_ok"] = res["violations"] == 0
        if not out["order_ok"]:
            out["errors"].append(f"{res['violations']} per-key order violations")
        counters = res["counters"]
        injected = res["injected"]  # 0 except in fail_once rows
        if counters.get("failed") != injected or counters.get("commit_failures"):
            out["errors"].append(f"engine counters: {counters}, {injected} failures injected")
        if row.fail_once:
            expected = sum(len(range(FAIL_AT, end, FAIL_EVERY)) for end in high.values())
            unexpected = {
                k: counters.get(k) for k in ("parked", "dead_lettered") if counters.get(k)
            }
            if injected != expected or counters.get("retries") != injected or unexpected:
                out["errors"].append(
                    f"{injected} failures injected, {expected} expected, "
                    f"{counters.get('retries')} retries, {unexpected or 'nothing'} given up"
                )
            out["injected"] = injected
        out["counters"] = counters
    return out


def permit_databases(kinds: set[str], stack: ExitStack) -> dict[str, str]:
    """A fresh SQLite file and/or a PostgreSQL server for the shared-pool rows."""
    import tempfile

    urls = {}
    if kinds & {"sqlite", "postgresql"}:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-permits-")))
        urls["sqlite"] = f"sqlite:///{tmp / 'permits.db'}"
        if "postgresql" in kinds:
            from tests.postgres import start_postgres

            server = start_postgres(tmp / "postgres")
            stack.callback(server.cleanup)
            urls["postgresql"] = server.sqlalchemy_url
    return urls


def ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each shared-pool row's msg/s against the same row on the in-process pool."""
    rates = {r["row"]: r.get("msg_s") for r in rows}
    out = {}
    for name, rate in rates.items():
        base = rates.get(name.rsplit("_shared_", 1)[0]) if "_shared_" in name else None
        if rate and base:
            out[f"{name}/local"] = rate / base
    return out


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(runs[-1])
    for key, value in runs[0].items():
        values = [r.get(key) for r in runs]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[key] = statistics.median(values)
        elif isinstance(value, bool):
            out[key] = all(values)
    out["errors"] = [e for r in runs for e in r["errors"]]
    if len(runs) > 1:
        out["runs"] = len(runs)
        out["msg_s_each"] = [r.get("msg_s") for r in runs]
    return out


def fmt(value: Any, spec: str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**NO**"
    return "n/a" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("row", "row", "s"), ("records", "records", ","), ("msg/s", "msg_s", ",.0f"),
        ("msg/s 10-90", "msg_s_10_90", ",.0f"), ("bound", "bound", ",.0f"),
        ("efficiency", "efficiency", ".2f"), ("cpu µs/record", "cpu_us_per_record", ".1f"),
        ("peak RSS MB", "peak_rss_mb", ".0f"), ("order ok", "order_ok", ""),
        ("committed ok", "committed_ok", ""),
    ]  # fmt: skip
    lines = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(key), spec) for _, key, spec in cols) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="records per row (default: per row)")
    parser.add_argument("--rows", help=f"comma-separated subset of {','.join(ROWS)}")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs; median reported")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--timeout", type=float, default=300.0, help="per child, seconds")
    parser.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    for internal in ("--broker", "--topic", "--group", "--permits-url"):  # parent -> child only
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    names = args.rows.split(",") if args.rows else list(ROWS)
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {list(ROWS)}")
    names = [n for n in names if HAS_UVLOOP or not ROWS[n].uvloop]
    machine = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": os.getloadavg(),
    }
    backends = {ROWS[n].backend for n in names}
    if "pulsar" in backends:
        machine.update(pulsar_client=version("pulsar-client"), pulsar_lite=version("pulsar-lite"))
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with ExitStack() as stack:  # only the brokers the selected rows need
        brokers = {b: stack.enter_context(start_broker(b)) for b in sorted(backends)}
        permit_urls = permit_databases({ROWS[n].permits for n in names}, stack)
        for rep in range(args.repeat):
            for name in names:
                broker = brokers[ROWS[name].backend]
                if not broker.alive():
                    raise SystemExit(f"{type(broker).__name__} died:\n{broker.log_tail()}")
                records = args.records or ROWS[name].records
                print(f"[{rep + 1}/{args.repeat}] {name}: {records:,} records", file=sys.stderr)
                result = run_row(name, records, broker.address, args.timeout, permit_urls)
                for error in result["errors"]:
                    print(f"!!! CORRECTNESS FAILURE in {name}: {error}", file=sys.stderr)
                runs[name].append(result)
    rows = [median_row(runs[n]) for n in names]
    report = {"machine": machine, "rows": rows, "ratios": ratios(rows)}
    print(table(rows), file=sys.stderr)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    failed = [r["row"] for r in rows if r["errors"]]
    if failed:
        print(f"!!! CORRECTNESS FAILURES in {failed}: see 'errors' in the JSON", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
