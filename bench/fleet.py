"""Consumer fleet bench: two replicas against one, as ``lanehouse consume --replicas R`` and as R
Dagster consumer runs, on one embedded Tansu.

    .venv/bin/python -m bench.fleet [--records N] [--partitions P] [--repeat K]
                                    [--modes cli,runs] [--out F]

One 8-partition topic with 1,000 keys (``produce_sample``) for the whole invocation. Per mode,
R = 1 and 2; all four configurations run in each repeat (cli-1 cli-2 runs-1 runs-2 ...), so a
slow spell of the machine hits every one alike; medians reported.

- *cli*: the real command line, ``lanehouse consume SPEC --replicas R --until-idle 1`` (R = 1
  in the command's own process, R = 2 a supervisor and two replicas); it stops once idle
  (:mod:`bench.fleet_cli`).
- *runs*: R ``consume_workload`` runs of one workload, each a process of its own as a run worker
  executes it, on one SQLite Dagster instance for the whole invocation
  (:mod:`bench.fleet_runs`); once all is committed the bench marks the runs CANCELING, as the
  discovery sensor stops a run.

Every run has a fresh workload name = consumer group (= partition in runs mode) and the same
spec and handler: ``handle`` below, run in the consumer processes, parses each record's JSON
and checks per-key order within an assignment; at exit each process writes its counts and
timestamps to its own file, named after ``LANEHOUSE_REPLICA``.

Times, all on the system-wide monotonic clock: *spawn* (the processes start), *first* (the
first record handled by any replica), *last* (the last record handled), *committed* (the bench
sees, polling every 20 ms, the group's committed offsets at the log end of every partition; the
spec commits every 100 ms), *stopped* (every process exited: cli, the idle second; runs, the
status poll, the drain and the run's end). Rates: ``handled`` = records / (last - first),
``committed`` = records / (committed - first) (both exclude process start-up and the group
join), ``wall`` = records / (committed - spawn). CPU seconds of the broker and of the consumer
processes (summed) and the machine's busy share are measured between *first* (as the bench sees
it) and *committed* with psutil.

Every run must handle every record, keep per-key order, commit to the log end and exit 0 (runs:
and end SUCCESS), and with 2 replicas both must have handled records; otherwise the bench exits
non-zero. The JSON report goes to stdout (and ``--out``), a table with each mode's 2/1 ratios to
stderr.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bench.engine import rate_between, write_report
from bench.fleet_report import GOAL_RATIO, mode_report, table

if TYPE_CHECKING:  # imported where used: the consumer processes import this module too
    import psutil

    from bench.fleet_runs import RunsHome

ROOT = Path(__file__).resolve().parent.parent
KEYS = 1000
STAMP_EVERY = 10_000
MODES = ("cli", "runs")
#: Seconds the bench waits for the processes to exit once it stopped them.
STOP_TIMEOUT = 120.0
CLIENT = {  # as in bench/engine.py and TEST_CLIENT_CONFIG: quick group joins on Tansu
    "session.timeout.ms": 2000,
    "heartbeat.interval.ms": 500,
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}

# ---------------------------------------------------------------- in the consumer processes


class _Stats:
    """What one consumer process handled; written as JSON when the process exits."""

    def __init__(self) -> None:
        self.first_ns = self.last_ns = 0
        self.done = self.violations = 0
        self.stamps: list[tuple[int, int]] = []  # (done, ns) every STAMP_EVERY records
        self.last: dict[tuple[int, str], int] = {}
        self.out = Path(os.environ["LH_BENCH_DIR"])
        self.replica = os.environ.get("LANEHOUSE_REPLICA", "0")  # unset with --replicas 1
        (self.out / f"started-{self.replica}").touch()
        atexit.register(self.write)

    def write(self) -> None:
        data = {
            "replica": int(self.replica),
            "pid": os.getpid(),
            "done": self.done,
            "violations": self.violations,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "stamps": [*self.stamps, (self.done, self.last_ns)],
        }
        (self.out / f"replica-{self.replica}.json").write_text(json.dumps(data))


_stats: _Stats | None = None


async def handle(rec: Any) -> None:
    """A CPU-light handler: parse the JSON value, check the key's sequence, count."""
    global _stats
    stats = _stats if _stats is not None else (_stats := _Stats())
    now = time.monotonic_ns()
    if not stats.first_ns:
        stats.first_ns = now
    data = json.loads(rec.value)
    lane = (rec.part.generation, data["key"])  # order holds within one assignment
    if data["seq"] <= stats.last.get(lane, -1):
        stats.violations += 1
    stats.last[lane] = data["seq"]
    stats.done += 1
    stats.last_ns = now
    if stats.done % STAMP_EVERY == 0:
        stats.stamps.append((stats.done, now))


# ---------------------------------------------------------------- the bench


def write_spec(path: Path, bootstrap: str, topic: str, name: str, replicas: int) -> Path:
    """The one spec of a measured run; its ``name`` is its consumer group too."""
    config = "\n".join(f"    {k}: {v}" for k, v in CLIENT.items())
    path.write_text(
        f"""name: {name}
source:
  kind: kafka
  bootstrap_servers: {bootstrap}
  topics: [{topic}]
  group: {name}
  config:
{config}
handler: bench.fleet:handle
ordering: key
concurrency: 1000
commit_interval: 100ms
replicas: {replicas}
"""
    )
    return path


def cpu_seconds(processes: list[psutil.Process]) -> float:
    import psutil

    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def cores_over(processes: dict[str, psutil.Process], seconds: float) -> dict[str, float]:
    """Cores each named process used over the next ``seconds`` (sleeps that long)."""
    before = {name: cpu_seconds([proc]) for name, proc in processes.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {
        name: round((cpu_seconds([proc]) - before[name]) / elapsed, 3)
        for name, proc in processes.items()
    }


def cpu_sample(consumers: list[psutil.Process], broker: psutil.Process) -> dict[str, Any]:
    import psutil

    return {
        "consumers": cpu_seconds(consumers),
        "broker": cpu_seconds([broker]),
        "machine": psutil.cpu_times(),
    }


class Fleet(Protocol):
    """One configuration's consumer processes: ``start`` at *spawn*, ``stop`` once committed =
    log end (or on timeout), then ``wait`` for them to exit and say what went wrong."""

    def start(self) -> None: ...
    def processes(self) -> list[psutil.Process]: ...
    def alive(self) -> bool: ...
    def stop(self) -> None: ...
    def wait(self, timeout: float) -> list[str]: ...
    def describe(self) -> dict[str, Any]: ...


def run_once(
    mode: str,
    replicas: int,
    broker: Any,
    topic: str,
    ends: dict[int, int],
    records: int,
    timeout: float,
    home: RunsHome | None,
) -> dict[str, Any]:
    """One measured run of one configuration (``home``: the Dagster instance of runs mode)."""
    import psutil
    from confluent_kafka import Consumer, TopicPartition

    from bench.fleet_cli import CliFleet

    name = f"fleet-{mode}-{replicas}-{uuid.uuid4().hex[:8]}"  # workload, group (and partition)
    work = Path(tempfile.mkdtemp(prefix="lanehouse-fleet-"))
    (work / "workloads").mkdir()
    spec = write_spec(work / "workloads" / "fleet.yaml", broker.bootstrap, topic, name, replicas)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LH_BENCH_DIR": str(work)}
    fleet: Fleet = (
        CliFleet(spec, replicas, env, work)
        if home is None
        else home.fleet(name, replicas, spec.parent, env, work)
    )
    load = os.getloadavg()[0]
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name})
    tps = [TopicPartition(topic, p) for p in ends]
    broker_proc = psutil.Process(broker.pid)
    consumers: list[psutil.Process] = []
    seen_first = committed_at = 0
    cpu0: dict[str, Any] = {}
    cpu1: dict[str, Any] = {}
    spawn = time.monotonic_ns()
    fleet.start()
    try:
        deadline = time.monotonic() + timeout
        while not committed_at and fleet.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
            if not seen_first:
                if not list(work.glob("started-*")):
                    continue
                seen_first = time.monotonic_ns()
                consumers = fleet.processes()
                cpu0 = cpu_sample(consumers, broker_proc)
            positions = {tp.partition: tp.offset for tp in probe.committed(tps, timeout=5)}
            if positions == ends:
                committed_at = time.monotonic_ns()
                cpu1 = cpu_sample(consumers, broker_proc)
    finally:  # never leave consumer processes (or runs) behind
        probe.close()
        fleet.stop()
        errors = fleet.wait(STOP_TIMEOUT)
    stopped = time.monotonic_ns()
    stats = [json.loads(p.read_text()) for p in sorted(work.glob("replica-*.json"))]
    head = {"mode": mode, "replicas": replicas, **fleet.describe()}
    if not committed_at:
        return {**head, "errors": [*errors, f"committed offsets never reached the end ({work})"]}
    if not any(s["done"] for s in stats):
        return {**head, "errors": [*errors, f"no replica wrote its stats ({work})"]}
    done = sum(s["done"] for s in stats)
    if len(stats) != replicas or any(s["done"] == 0 for s in stats):
        errors.append(f"records per replica {[s['done'] for s in stats]}: not every replica worked")
    if done < records:
        errors.append(f"handled {done} of {records} records")
    if any(s["violations"] for s in stats):
        errors.append(f"per-key order violations: {[s['violations'] for s in stats]}")
    first = min(s["first_ns"] for s in stats if s["done"])
    last = max(s["last_ns"] for s in stats)
    merged = sorted(
        (ns, n - prev)
        for s in stats
        for (n, ns), (prev, _) in zip(s["stamps"], [(0, 0), *s["stamps"]], strict=False)
    )
    cumulative: list[tuple[int, float]] = []
    total = 0
    for ns, n in merged:
        total += n
        cumulative.append((total, ns / 1e9))
    window = (committed_at - seen_first) / 1e9
    machine0, machine1 = cpu0["machine"], cpu1["machine"]
    all_delta = sum(machine1) - sum(machine0)
    idle_delta = (machine1.idle + machine1.iowait) - (machine0.idle + machine0.iowait)
    if not errors:
        shutil.rmtree(work)  # kept (with the processes' logs) when something failed
    busy = 1 - idle_delta / all_delta if all_delta > 0 else None
    cores = psutil.cpu_count()
    consumers_cores = (cpu1["consumers"] - cpu0["consumers"]) / window
    broker_cores = (cpu1["broker"] - cpu0["broker"]) / window
    return {
        **head,
        "records": records,
        "handled": done,
        "per_replica": [s["done"] for s in stats],
        "msg_s_handled": records / ((last - first) / 1e9),
        "msg_s_10_90": rate_between(cumulative, 0.1 * records, 0.9 * records),
        "msg_s_committed": records / ((committed_at - first) / 1e9),
        "msg_s_wall": records / ((committed_at - spawn) / 1e9),
        "startup_s": (first - spawn) / 1e9,
        "first_skew_s": (max(s["first_ns"] for s in stats) - first) / 1e9,
        "commit_lag_s": (committed_at - last) / 1e9,
        "stop_s": (stopped - committed_at) / 1e9,
        "cpu_window_s": window,
        "consumers_cores": consumers_cores,
        "broker_cores": broker_cores,
        "machine_busy": busy,
        "loadavg_1m_at_start": load,
        # Everything else on the machine (other jobs, this bench's polling), in cores.
        "other_cores": busy * cores - consumers_cores - broker_cores if busy is not None else None,
        "errors": errors,
    }


def parse_modes(text: str) -> tuple[str, ...]:
    """``cli,runs`` -> the modes, in the bench's order."""
    asked = {m.strip() for m in text.split(",") if m.strip()}
    if not asked or asked - set(MODES):
        raise argparse.ArgumentTypeError(f"modes: a comma-separated subset of {','.join(MODES)}")
    return tuple(m for m in MODES if m in asked)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds; medians")
    parser.add_argument("--modes", type=parse_modes, default=MODES, help="default: cli,runs")
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    import confluent_kafka

    from consumers.backends.kafka.consumer import log_end_offsets
    from consumers.dev.embedded.tansu import start_tansu
    from consumers.dev.sample import produce_sample

    machine = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "confluent_kafka": version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": os.getloadavg(),
    }
    configs = [(mode, replicas) for mode in args.modes for replicas in (1, 2)]
    results: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in configs}
    each: list[dict[str, Any]] = []
    with ExitStack() as stack:
        home: RunsHome | None = None
        if "runs" in args.modes:
            from bench.fleet_runs import RunsHome

            home = stack.enter_context(RunsHome())
        broker = stack.enter_context(start_tansu())
        topic = f"fleet-bench-{uuid.uuid4().hex[:8]}"
        produce_sample(broker.bootstrap, topic, args.records, KEYS, partitions=args.partitions)
        ends = log_end_offsets(broker.bootstrap, topic, args.partitions, timeout=120)
        if sum(ends.values()) != args.records:
            raise SystemExit(f"the topic holds {sum(ends.values())} records, not {args.records}")
        for rep in range(args.repeat):
            for mode, replicas in configs:
                print(f"[{rep + 1}/{args.repeat}] {mode}-{replicas}", file=sys.stderr)
                runs_home = home if mode == "runs" else None
                result = run_once(
                    mode, replicas, broker, topic, ends, args.records, args.timeout, runs_home
                )
                for error in result["errors"]:
                    print(f"!!! FAILURE with {mode}-{replicas}: {error}", file=sys.stderr)
                print(
                    "    "
                    + ", ".join(f"{k} {v:,.2f}" for k, v in result.items() if isinstance(v, float)),
                    file=sys.stderr,
                )
                results[mode, replicas].append(result)
                each.append(result)
    report: dict[str, Any] = {
        "machine": machine,
        "records": args.records,
        "partitions": args.partitions,
        "keys": KEYS,
        "modes": list(args.modes),
        "goal_ratio": GOAL_RATIO,
        **{mode: mode_report(results[mode, 1], results[mode, 2]) for mode in args.modes},
        "each": each,
    }
    write_report(report, args.out)
    print(table(report), file=sys.stderr)
    failed = [e for r in each for e in r["errors"]]
    if failed:
        print(f"!!! {len(failed)} FAILURES: see 'errors' in the JSON", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
