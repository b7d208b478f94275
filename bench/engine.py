"""Lanehouse, the raw client, Quix Streams and Arroyo side by side, against one embedded broker.

    .venv/bin/python -m bench.engine [--records N] [--rows a,b] [--repeat K] [--out F] [--profile D]

Per row and run: a fresh 4-partition topic (``produce_sample``: 1,000 keys unless the row says
otherwise), then the contender in its own child process so peak RSS and CPU time are its own:
``--child ROW`` of this module for Lanehouse and the raw client, ``bench/peers/*_child.py`` in
the peer's own venv (``bench/peers/venvs.py``) for Quix Streams and Arroyo. Every contender
reports through ``bench/check.py``. Rates come from the handler's timestamps (first call -> last
completion), so the group join and the idle wait at the end are excluded. Every row checks that
every record was handled and that the committed offset of every partition equals its log end;
per-key order (seq = last + 1, never two records of one key at once) is checked for every
contender and is an error where the contender promises it (not Arroyo's thread strategy). Any
failure makes the bench exit non-zero. ``--repeat`` interleaves the rows (A B C A B C ...) and
reports medians; ``ratios`` and ``goals`` in the JSON compare rows of the same run.

The ``pulsar_*`` rows run the same contenders against an embedded pulsar-lite broker, started
only when one of them is selected: one non-partitioned topic (the engine's partition 0) with the
same keys and values (``produce_pulsar_sample``, a batching producer), one Shared subscription,
the engine acknowledging message by message. ``pulsar_raw_receive`` is a plain ``receive()`` +
``acknowledge()`` loop. Instead of committed offsets they check, after the consumer closed, that
the subscription has nothing unacknowledged (``consumers.backends.pulsar.probe.unacknowledged``; the
raw row too, as it acknowledges). pulsar-client is imported on the Pulsar paths only, so its
~12 MB stay out of the Kafka rows' peak RSS.

Two rows exercise the outcomes machinery: ``retry_1pct`` is the 20 ms row at C=1,000 where the
records at offset % 100 == 7 raise on their first attempt (the lane stays held during the
backoff, so the order check counts each record at its successful attempt; the engine must count
exactly those failures and retries), and ``batch_json`` is the JSON row in batch mode (500
records or 50 ms a call, 4 calls at once), checked per key across batches.

``sleep20_c300_shared_sqlite`` and ``sleep20_c300_shared_pg`` are the 20 ms row at C=300 with its
permits from a shared pool (``consumers.permits.shared``) leased in a fresh SQLite file or a
PostgreSQL server started for the run (``tests/postgres.py``); ``ratios`` in the JSON compares
each with ``sleep20_c300`` (in-process pool) when both ran.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import threading
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

from bench.check import Check, seq_of
from bench.cpu import burn_record
from bench.peers.venvs import peer_python
from consumers import ConsumerApp, LocalPermitPool, Record, RetryPolicy, RunnerSettings, Workload
from consumers.backends.kafka.consumer import (
    CONSUMER_DEFAULTS,
    ENGINE_OWNED,
    kafka_consumer_factory,
)
from consumers.config.pulsar_options import validate_pulsar_topic
from consumers.dev.embedded.child import BrokerProcess
from consumers.dev.embedded.tansu import start_tansu
from consumers.dev.sample import produce_pulsar_sample, produce_sample
from consumers.engine import event_loop
from consumers.execution.executors import Executor

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS, KEYS, SLEEP = 4, 1000, 0.020
CLIENT = {
    **CONSUMER_DEFAULTS,
    "fetch.wait.max.ms": 10,
    "session.timeout.ms": 2000,
    "heartbeat.interval.ms": 500,
}
MEMORY_KEYS = (("1k", 1000), ("10k", 10_000), ("100k", 100_000), ("1m", 1_000_000))
FAIL_EVERY, FAIL_AT = 100, 7  # fail_once rows: offset % 100 == 7 fails its first attempt
RETRY = RetryPolicy(max_attempts=3, backoff=0.02, max_backoff=0.2, jitter=True)
BATCH = {"mode": "batch", "batch_size": 500, "batch_max_wait": 0.05}


@dataclass(frozen=True)
class Row:
    #: raw | noop | json | sleep (async def) | noop_sync | json_sync | sleep_sync (plain def)
    #: | cpu (plain def, ~200 µs of pure Python: bench.check.burn)
    kind: str
    concurrency: int = 1000
    records: int = 200_000
    #: The event loop of an engine row: the engine's default (uvloop) or stdlib asyncio.
    loop: Literal["engine", "asyncio"] = "engine"
    fail_once: bool = False  # 1% of records raise once, with RETRY as the retry policy
    batch: bool = False  # the handler takes a list (BATCH settings)
    backend: Literal["kafka", "pulsar"] = "kafka"
    #: Where the permits come from: the in-process pool, or a shared pool leased in a database.
    permits: Literal["local", "sqlite", "postgresql"] = "local"
    keys: int = KEYS
    #: A peer library run in its own venv (bench/peers) instead of Lanehouse.
    peer: Literal["quix", "arroyo"] | None = None
    #: The Lanehouse rows a peer row is compared with (ratio = Lanehouse / peer msg/s).
    vs: tuple[str, ...] = ()
    #: The workload's ``max_buffered`` (records per partition before a pause); None: default.
    max_buffered: int | None = None
    #: Where a plain def runs (the workload's ``executor``) and, for ``process``, how many.
    executor: Executor = "auto"
    processes: int = 0

    @property
    def ordered(self) -> bool:
        """Whether the contender promises per-key order (a violation is then an error)."""
        return self.peer is None or self.kind in ("noop", "json", "cpu") or self.peer == "quix"

    @property
    def timed(self) -> bool:
        """A 20 ms row: rated against Little's bound and the busiest key."""
        return self.kind in ("sleep", "sleep_sync")


def _sweep(keys: int) -> Row:
    """The 20 ms row at C=1,000 over ``keys`` keys: 100 records a key (at most 100,000)."""
    return Row("sleep", 1000, min(100 * keys, 100_000), keys=keys)


ROWS = {
    # The client's ceiling: consume() and a plain Python loop over the messages.
    "raw_consume": Row("raw"),
    "noop_key": Row("noop"),
    "noop_key_sync": Row("noop_sync", 100),
    # The same plain def kept on threads (executor: thread): what the inline path saves.
    "noop_key_thread": Row("noop_sync", 100, executor="thread"),
    "quix_noop": Row("noop", 1, peer="quix", vs=("noop_key_sync", "noop_key")),
    "arroyo_noop": Row("noop", 1, peer="arroyo", vs=("noop_key_sync", "noop_key")),
    "noop_key_asyncio": Row("noop", loop="asyncio"),
    "json": Row("json"),
    "json_sync": Row("json_sync", 100),
    "quix_json": Row("json", 1, peer="quix", vs=("json_sync", "json")),
    "arroyo_json": Row("json", 1, peer="arroyo", vs=("json_sync", "json")),
    "batch_json": Row("json", 4, batch=True),
    "sleep20_c100": Row("sleep", 100, 40_000),
    "sleep20_c300": Row("sleep", 300, 100_000),
    "sleep20_c300_asyncio": Row("sleep", 300, 100_000, loop="asyncio"),
    "sleep20_c1000": Row("sleep", 1000, 200_000),
    # The buffer of earlier releases (10,000 a partition) at C=1,000: pauses, refetch stalls.
    "sleep20_c1000_buf10k": Row("sleep", 1000, 200_000, max_buffered=10_000),
    "sleep20sync_c100": Row("sleep_sync", 100, 40_000),
    "sleep20sync_c300": Row("sleep_sync", 300, 60_000),
    "sleep20sync_c1000": Row("sleep_sync", 1000, 200_000),
    "quix_sleep20": Row("sleep_sync", 1, 500, peer="quix", vs=("sleep20sync_c100",)),
    "arroyo_sleep20_c100": Row("sleep_sync", 100, 20_000, peer="arroyo", vs=("sleep20sync_c100",)),
    "arroyo_sleep20_c300": Row("sleep_sync", 300, 40_000, peer="arroyo", vs=("sleep20sync_c300",)),
    "arroyo_sleep20_c1000": Row(
        "sleep_sync", 1000, 40_000, peer="arroyo", vs=("sleep20sync_c1000",)
    ),
    # ~200 µs of pure Python a record: one interpreter (auto: inline once proven fast) against
    # two worker processes, and the peers' own answers on the same two cores.
    "cpu_thread": Row("cpu", 100, 20_000),
    "cpu_process": Row("cpu", 100, 20_000, executor="process", processes=2),
    "quix_cpu": Row("cpu", 1, 10_000, peer="quix", vs=("cpu_process",)),
    "arroyo_cpu": Row("cpu", 2, 20_000, peer="arroyo", vs=("cpu_process",)),
    "retry_1pct": Row("sleep", 1000, 200_000, fail_once=True),
    **{f"keys_{n}": _sweep(n) for n in (1, 10, 100, 1000, 10_000)},
    # Memory against key cardinality: the no-op row over 1M records, 1k to 1M distinct keys.
    **{f"mem_keys_{label}": Row("noop", records=1_000_000, keys=n) for label, n in MEMORY_KEYS},
    "sleep20_c300_shared_sqlite": Row("sleep", 300, 100_000, permits="sqlite"),
    "sleep20_c300_shared_pg": Row("sleep", 300, 100_000, permits="postgresql"),
    "pulsar_raw_receive": Row("raw", backend="pulsar"),
    "pulsar_noop_key": Row("noop", backend="pulsar"),
    "pulsar_sleep20_c300": Row("sleep", 300, 100_000, backend="pulsar"),
}


# ---------------------------------------------------------------------------- child side


class InjectedFailure(Exception):
    """What the fail_once handler raises on a record's first attempt."""


def make_handler(row: Row, check: Check) -> Any:
    check_begin, check_end = check.begin, check.end
    failed: set[tuple[int, int]] = set()

    def begin(rec: Record, seq: int) -> None:
        check_begin(rec.key, seq)  # type: ignore[arg-type]

    def end(rec: Record) -> None:
        check_end(rec.key, rec.partition, rec.offset)  # type: ignore[arg-type]

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
            check.fail(rec.key, seq)  # type: ignore[arg-type]
            raise InjectedFailure(f"first attempt of {rec.partition}@{rec.offset}")
        end(rec)

    lock = threading.Lock()  # the sync handler runs on the engine's threads; Check is not safe

    def sleep_sync(rec: Record) -> None:
        with lock:
            begin(rec, seq_of(rec.value))  # type: ignore[arg-type]
        time.sleep(SLEEP)
        with lock:
            end(rec)

    def noop_sync(rec: Record) -> None:
        begin(rec, seq_of(rec.value))  # type: ignore[arg-type]
        end(rec)

    def parse(rec: Record) -> int:
        data = json.loads(rec.value)  # type: ignore[arg-type]
        check.sink = {"key": data["key"].upper(), "seq": data["seq"] + 1}
        return int(data["seq"])

    async def transform(rec: Record) -> None:
        begin(rec, parse(rec))
        end(rec)

    def transform_sync(rec: Record) -> None:
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
    if row.kind == "cpu":
        return burn_record  # checked by OrderCheck around the call: it may run in a process
    handlers = {"noop": noop, "noop_sync": noop_sync, "json": transform}
    handlers.update(json_sync=transform_sync, sleep=sleep, sleep_sync=sleep_sync)
    return handlers[row.kind]


class CheckAround:
    """``Check.begin``/``end`` as an interceptor, on the loop around the call, wherever the
    handler runs (a worker process cannot reach the parent's Check)."""

    def __init__(self, check: Check) -> None:
        self._check = check

    def before(self, rec: Record) -> None:
        self._check.begin(rec.key, seq_of(rec.value))  # type: ignore[arg-type]

    def after(self, rec: Record, outcome: object, error: object) -> None:
        self._check.end(rec.key, rec.partition, rec.offset)  # type: ignore[arg-type]


def run_raw(args: argparse.Namespace) -> dict[str, Any]:
    config = {**CLIENT, **ENGINE_OWNED, "bootstrap.servers": args.broker, "group.id": args.group}
    consumer = Consumer(config)
    consumer.subscribe([args.topic])
    check, high = Check(args.records, args.keys), {}
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

    from consumers.backends.pulsar.client import client_kwargs

    client = pulsar.Client(args.broker, **client_kwargs({}))
    consumer = client.subscribe(  # as the engine's PulsarConsumer subscribes
        args.topic,
        args.group,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    receive, acknowledge = consumer.receive, consumer.acknowledge
    check = Check(args.records, args.keys)
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
    check = Check(args.records, args.keys)
    extra: dict[str, Any] = dict(BATCH) if row.batch else {}
    if row.fail_once:
        extra["retry"] = RETRY
        # One warning with a traceback per failed attempt: formatted (a real cost), not shown.
        engine_log = logging.getLogger("lanehouse")
        engine_log.addHandler(logging.FileHandler(os.devnull))
        engine_log.propagate = False
    if row.max_buffered:
        extra["max_buffered"] = row.max_buffered
    settings = RunnerSettings(
        name="bench",
        ordering="key",
        concurrency=row.concurrency,
        executor=row.executor,
        processes=row.processes,
        **extra,
    )
    if row.backend == "pulsar":
        from consumers.backends.pulsar.client import PulsarSettings
        from consumers.backends.pulsar.consumer import pulsar_consumer_factory

        factory = pulsar_consumer_factory(PulsarSettings(args.broker, args.group))
    else:
        factory = kafka_consumer_factory(
            {**CLIENT, "bootstrap.servers": args.broker, "group.id": args.group}
        )
    around = (CheckAround(check),) if row.kind == "cpu" else ()
    workload = Workload(
        settings, make_handler(row, check), [args.topic], factory, interceptors=around
    )

    pool_factory: Any = LocalPermitPool
    if row.permits != "local":  # imported only here, so SQLAlchemy is not in other rows' RSS
        from consumers.permits.shared import SharedPermitPool
        from consumers.permits.store import PermitStore

        store = PermitStore(args.permits_url)
        store.declare_pools({"default": row.concurrency})
        pool_factory = lambda name, size: SharedPermitPool(name, store)  # noqa: E731

    async def main() -> Any:
        app = ConsumerApp(
            [workload], pool_sizes={"default": row.concurrency}, pool_factory=pool_factory
        )
        return await app.run(until_idle=1.0)

    if row.loop == "asyncio":
        os.environ[event_loop.ENV] = "asyncio"
    summaries = event_loop.run(main())
    return {**check.result(), "counters": summaries[0].counters}


def child(args: argparse.Namespace) -> None:
    row = ROWS[args.child]
    if row.kind == "raw":
        result = run_raw_pulsar(args) if row.backend == "pulsar" else run_raw(args)
    else:
        result = run_engine(row, args)
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
        from consumers.dev.embedded.pulsar import start_pulsar_lite

        return start_pulsar_lite()
    return start_tansu()


def produce(row: Row, broker: str, topic: str, records: int) -> None:
    if row.backend == "pulsar":
        produce_pulsar_sample(broker, topic, records, row.keys)
    else:
        produce_sample(broker, topic, records, row.keys, partitions=PARTITIONS)


def commit_errors(row: Row, broker: str, topic: str, group: str, high: dict[int, int]) -> list[str]:
    """Why the group did not commit (Kafka) or acknowledge (Pulsar) everything; [] if it did."""
    if row.backend == "pulsar":
        from consumers.backends.pulsar.probe import unacknowledged

        left = unacknowledged(broker, group, topic)
        return [f"{len(left)} records unacknowledged, first ids {left[:3]}"] if left else []
    # A partition no record went to (a row with few keys) has nothing to commit.
    committed = {p: max(o, 0) for p, o in committed_offsets(broker, group, topic).items()}
    ends = {p: high.get(p, 0) for p in range(PARTITIONS)}
    if committed == ends:
        return []
    return [f"committed {committed} != log end {ends}"]


def run_row(
    name: str,
    records: int,
    broker: str,
    timeout: float,
    permit_urls: dict[str, str],
    profile: Path | None = None,
) -> dict[str, Any]:
    row = ROWS[name]
    short = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    topic = validate_pulsar_topic(short) if row.backend == "pulsar" else short
    group = f"{short}-group"
    produce(row, broker, topic, records)
    common = ["--broker", broker, "--topic", topic, "--group", group, "--records", str(records)]
    common += ["--timeout", str(timeout), "--keys", str(row.keys)]
    if row.peer is not None:
        kind = row.kind.removesuffix("_sync")  # the peers' handlers are all plain functions
        script = ROOT / "bench" / "peers" / f"{row.peer}_child.py"
        cmd = [str(peer_python(row.peer)), str(script), *common, "--kind", kind]
        cmd += ["--concurrency", str(row.concurrency)]
    else:
        cmd = [sys.executable, "-m", "bench.engine", "--child", name, *common]
    if row.permits != "local":
        cmd += ["--permits-url", permit_urls[row.permits]]
    if profile is not None:  # py-spy samples the child, its threads and native frames included
        profile.mkdir(parents=True, exist_ok=True)
        out_file = profile / f"{name}-{uuid.uuid4().hex[:6]}.txt"
        spy = Path(sys.executable).with_name("py-spy")  # a dev dependency, in the venv
        cmd = [str(spy), "record", "--format", "raw", "--threads", "-o", str(out_file), "--", *cmd]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, timeout=timeout + 60)
    if proc.returncode != 0:
        return {"row": name, "records": records, "errors": [f"child exited {proc.returncode}"]}
    # The last JSON line: a profiler may print its own lines around the child's.
    res = json.loads(next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")))
    high = {int(p): off for p, off in res["high"].items()}
    out: dict[str, Any] = {"row": name, "records": records, "errors": []}
    if res["done"] != records:
        out["errors"].append(f"handled {res['done']} of {records} records")
    window = res["window_s"]
    out["msg_s"] = res["done"] / window if window > 0 else None
    out["msg_s_10_90"] = rate_between(res["stamps"], 0.1 * records, 0.9 * records)
    out["bound"] = out["efficiency"] = None
    if row.timed and res["busiest_key"] > 0:
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
            out["order_violations"] = res["violations"]
            if row.ordered:  # a peer that never promised per-key order is reported, not failed
                out["errors"].append(f"{res['violations']} per-key order violations")
    if row.kind != "raw" and row.peer is None:
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


#: Pairs compared in every run that has both rows: (numerator, denominator).
PAIRS = (
    ("noop_key_sync", "noop_key_thread"),
    ("noop_key_sync", "noop_key"),
    ("json_sync", "json"),
    ("sleep20_c1000", "sleep20_c1000_buf10k"),
    ("cpu_process", "cpu_thread"),
    ("pulsar_noop_key", "noop_key"),
)


def ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """msg/s side by side from the same run: Lanehouse over each peer, each shared-pool row
    over the in-process pool, the engine's loop over stdlib asyncio, and :data:`PAIRS`."""
    rates = {r["row"]: r.get("msg_s") for r in rows}
    pairs = list(PAIRS)
    for name in rates:
        row = ROWS[name]
        pairs += [(ours, name) for ours in row.vs]
        if "_shared_" in name:
            pairs.append((name, name.rsplit("_shared_", 1)[0]))
        elif row.loop == "asyncio":
            pairs.append((name.removesuffix("_asyncio"), name))
    out = {}
    for top, bottom in pairs:
        if rates.get(top) and rates.get(bottom):
            out[f"{top}/{bottom}"] = rates[top] / rates[bottom]
    return out


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The handler issue's targets (and issue 8's that still stand), for the rows that ran."""
    by = {r["row"]: r for r in rows}
    rate = ratios(rows)
    out: list[dict[str, Any]] = []

    def goal(text: str, value: float | None, target: float, at_most: bool = False) -> None:
        met = value is not None and (value <= target if at_most else value >= target)
        out.append({"goal": text, "value": value, "target": target, "met": met})

    for text, pair, target in (
        ("no-op, plain def: Lanehouse / Quix", "noop_key_sync/quix_noop", 2.0),
        ("JSON, plain def: Lanehouse / Quix", "json_sync/quix_json", 2.0),
        ("no-op, async def: Lanehouse / Quix", "noop_key/quix_noop", 2.5),
        ("JSON, async def: Lanehouse / Quix", "json/quix_json", 2.5),
        ("CPU 200 µs: 2 processes / one interpreter", "cpu_process/cpu_thread", 1.5),
        ("Pulsar no-op / Kafka no-op", "pulsar_noop_key/noop_key", 0.5),
    ):
        if pair in rate:
            goal(text, rate[pair], target)
    if "noop_key" in by:
        goal("async no-op: CPU µs a record", by["noop_key"].get("cpu_us_per_record"), 3.5, True)
    for name in ("sleep20sync_c300", "sleep20sync_c1000", "sleep20_c1000"):
        if name in by:
            goal(f"{name}: efficiency (whole run)", by[name].get("efficiency"), 0.90)
    if "sleep20_c1000" in by:
        goal("20 ms, C=1,000: peak RSS MB", by["sleep20_c1000"].get("peak_rss_mb"), 200, True)
    memory = [by[f"mem_keys_{label}"] for label, _ in MEMORY_KEYS if f"mem_keys_{label}" in by]
    if len(memory) == len(MEMORY_KEYS):
        first = memory[0]["peak_rss_mb"]
        spread = max(abs(r["peak_rss_mb"] / first - 1) for r in memory)
        goal("memory 1k -> 1M keys: largest change from 1k", spread, 0.10, at_most=True)
        goal("memory at 1M keys, MB", memory[-1]["peak_rss_mb"], 200, at_most=True)
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


def write_report(report: dict[str, Any], out: Path | None) -> None:
    """The report as JSON on stdout, and in ``out`` when given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")


def peer_versions(peer: str) -> dict[str, str]:
    """The peer's library and client versions, from its venv (built here if missing)."""
    dist = {"quix": "quixstreams", "arroyo": "sentry-arroyo"}[peer]
    code = (
        "import json, confluent_kafka as c; from importlib.metadata import version as v; "
        f"print(json.dumps({{'{dist}': v('{dist}'), 'confluent_kafka': c.__version__, "
        "'librdkafka': c.libversion()[0]}))"
    )
    proc = subprocess.run([str(peer_python(peer)), "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {peer} venv does not work:\n{proc.stderr}")
    return dict(json.loads(proc.stdout))


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
    parser.add_argument(
        "--profile", type=Path, help="run each child under py-spy; collapsed stacks go here"
    )
    parser.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    parser.add_argument("--keys", type=int, default=KEYS, help=argparse.SUPPRESS)
    for internal in ("--broker", "--topic", "--group", "--permits-url"):  # parent -> child only
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    names = list(dict.fromkeys(args.rows.split(","))) if args.rows else list(ROWS)
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {list(ROWS)}")
    machine = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": os.getloadavg(),
    }
    for peer in sorted({p for n in names if (p := ROWS[n].peer)}):  # built before timing
        machine[peer] = peer_versions(peer)
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
                result = run_row(
                    name, records, broker.address, args.timeout, permit_urls, args.profile
                )
                for error in result["errors"]:
                    print(f"!!! CORRECTNESS FAILURE in {name}: {error}", file=sys.stderr)
                runs[name].append(result)
    rows = [median_row(runs[n]) for n in names]
    report: dict[str, Any] = {
        "machine": machine,
        "rows": rows,
        "ratios": ratios(rows),
        "goals": goals(rows),
    }
    print(table(rows), file=sys.stderr)
    for pair, value in report["ratios"].items():
        print(f"ratio {pair}: {value:.2f}", file=sys.stderr)
    for g in report["goals"]:
        verdict = "met" if g["met"] else "NOT MET"
        print(
            f"goal {g['goal']}: {fmt(g['value'], ',.2f')} (target {g['target']:,}) {verdict}",
            file=sys.stderr,
        )
    write_report(report, args.out)
    failed = [r["row"] for r in rows if r["errors"]]
    if failed:
        print(f"!!! CORRECTNESS FAILURES in {failed}: see 'errors' in the JSON", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
