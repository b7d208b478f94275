"""Consumer fleet bench: `lanehouse consume --replicas 1` vs `--replicas 2` on one embedded Tansu.

    .venv/bin/python -m bench.fleet [--records N] [--partitions P] [--repeat K] [--out F]

One 8-partition topic with 1,000 keys (``produce_sample``) for the whole run; each run is the
real command line, ``lanehouse consume SPEC --replicas R --until-idle 1``, on a fresh consumer
group, runs interleaved (1 2 1 2 ...), medians reported. The handler (``handle`` below, run in
the consumer processes) parses each record's JSON and checks per-key order within an
assignment; at exit each process writes its counts and timestamps to a file.

Times, all on the system-wide monotonic clock: *spawn* (the command starts), *first* (the first
record handled by any replica), *last* (the last record handled), *committed* (the bench sees,
polling every 20 ms, the group's committed offsets at the log end of every partition; the spec
commits every 100 ms). Rates: ``handled`` = records / (last - first), ``committed`` = records /
(committed - first) (both exclude process start-up and the group join), ``wall`` = records /
(committed - spawn). CPU seconds of the broker and of the consumer processes and the machine's
busy share are measured between *first* (as the bench sees it) and *committed* with psutil.

Every run must handle every record, keep per-key order, commit to the log end and exit 0, and
with 2 replicas both must have handled records; otherwise the bench exits non-zero.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.engine import rate_between, write_report

ROOT = Path(__file__).resolve().parent.parent
KEYS = 1000
STAMP_EVERY = 10_000
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
    lane = (rec._part.generation, data["key"])  # order holds within one assignment
    if data["seq"] <= stats.last.get(lane, -1):
        stats.violations += 1
    stats.last[lane] = data["seq"]
    stats.done += 1
    stats.last_ns = now
    if stats.done % STAMP_EVERY == 0:
        stats.stamps.append((stats.done, now))


# ---------------------------------------------------------------- the bench


def write_spec(path: Path, bootstrap: str, topic: str, group: str) -> Path:
    config = "\n".join(f"    {k}: {v}" for k, v in CLIENT.items())
    path.write_text(
        f"""name: fleet-bench
source:
  kind: kafka
  bootstrap_servers: {bootstrap}
  topics: [{topic}]
  group: {group}
  config:
{config}
handler: bench.fleet:handle
ordering: key
concurrency: 1000
commit_interval: 100ms
"""
    )
    return path


def cpu_seconds(processes: list[Any]) -> float:
    import psutil

    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def run_once(
    replicas: int, broker: Any, topic: str, ends: dict[int, int], records: int, timeout: float
) -> dict[str, Any]:
    import psutil
    from confluent_kafka import Consumer, TopicPartition

    group = f"fleet-{replicas}-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="lanehouse-fleet-"))
    spec = write_spec(work / "spec.yaml", broker.bootstrap, topic, group)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LH_BENCH_DIR": str(work)}
    cmd = [sys.executable, "-m", "orchestration.cli", "consume", str(spec)]
    cmd += ["--replicas", str(replicas), "--until-idle", "1", "--log-level", "WARNING"]
    errors: list[str] = []
    load = os.getloadavg()[0]
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    tps = [TopicPartition(topic, p) for p in ends]
    broker_proc = psutil.Process(broker.pid)
    with open(work / "output.log", "w") as log:
        spawn = time.monotonic_ns()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        fleet = psutil.Process(proc.pid)
        seen_first = committed_at = 0
        cpu0: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        while not committed_at and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
            if not seen_first:
                if not list(work.glob("started-*")):
                    continue
                seen_first = time.monotonic_ns()
                consumers = [fleet, *fleet.children(recursive=True)]
                cpu0 = {
                    "consumers": cpu_seconds(consumers),
                    "broker": cpu_seconds([broker_proc]),
                    "machine": psutil.cpu_times(),
                }
            positions = {tp.partition: tp.offset for tp in probe.committed(tps, timeout=5)}
            if positions == ends:
                committed_at = time.monotonic_ns()
                cpu1 = {
                    "consumers": cpu_seconds(consumers),
                    "broker": cpu_seconds([broker_proc]),
                    "machine": psutil.cpu_times(),
                }
        probe.close()
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    if code != 0:
        errors.append(f"lanehouse consume exited {code} (log: {work / 'output.log'})")
    if not committed_at:
        return {
            "replicas": replicas,
            "errors": [*errors, "committed offsets never reached the end"],
        }
    stats = [json.loads(p.read_text()) for p in sorted(work.glob("replica-*.json"))]
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
        shutil.rmtree(work)  # kept (with the command's output.log) when something failed
    busy = 1 - idle_delta / all_delta if all_delta > 0 else None
    cores = psutil.cpu_count()
    consumers_cores = (cpu1["consumers"] - cpu0["consumers"]) / window
    broker_cores = (cpu1["broker"] - cpu0["broker"]) / window
    return {
        "replicas": replicas,
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
        "cpu_window_s": window,
        "consumers_cores": consumers_cores,
        "broker_cores": broker_cores,
        "machine_busy": busy,
        "loadavg_1m_at_start": load,
        # Everything else on the machine (other jobs, this bench's polling), in cores.
        "other_cores": busy * cores - consumers_cores - broker_cores if busy is not None else None,
        "errors": errors,
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"replicas": runs[0]["replicas"], "runs": len(runs)}
    for key, value in runs[0].items():
        values = [r.get(key) for r in runs]
        if isinstance(value, float) and all(isinstance(v, float) for v in values):
            out[key] = statistics.median(values)
    out["msg_s_committed_each"] = [r.get("msg_s_committed") for r in runs]
    out["errors"] = [e for r in runs for e in r["errors"]]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved pairs; medians")
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    import confluent_kafka

    from consumers.backends.kafka import log_end_offsets
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
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with start_tansu() as broker:
        topic = f"fleet-bench-{uuid.uuid4().hex[:8]}"
        produce_sample(broker.bootstrap, topic, args.records, KEYS, partitions=args.partitions)
        ends = log_end_offsets(broker.bootstrap, topic, args.partitions, timeout=120)
        if sum(ends.values()) != args.records:
            raise SystemExit(f"the topic holds {sum(ends.values())} records, not {args.records}")
        for rep in range(args.repeat):
            for replicas in (1, 2):
                print(f"[{rep + 1}/{args.repeat}] --replicas {replicas}", file=sys.stderr)
                result = run_once(replicas, broker, topic, ends, args.records, args.timeout)
                for error in result["errors"]:
                    print(f"!!! FAILURE with --replicas {replicas}: {error}", file=sys.stderr)
                print(
                    "    "
                    + ", ".join(f"{k} {v:,.2f}" for k, v in result.items() if isinstance(v, float)),
                    file=sys.stderr,
                )
                runs[replicas].append(result)
    one, two = median_of(runs[1]), median_of(runs[2])
    ratios = {
        f"ratio_{kind}": two[f"msg_s_{kind}"] / one[f"msg_s_{kind}"]
        for kind in ("handled", "10_90", "committed", "wall")
        if one.get(f"msg_s_{kind}") and two.get(f"msg_s_{kind}")
    }
    report = {
        "machine": machine,
        "records": args.records,
        "partitions": args.partitions,
        "keys": KEYS,
        "replicas_1": one,
        "replicas_2": two,
        **ratios,
        "runs": runs[1] + runs[2],
    }
    write_report(report, args.out)
    failed = one["errors"] + two["errors"]
    if failed:
        print(f"!!! {len(failed)} FAILURES: see 'errors' in the JSON", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
