"""How much of ``busy``'s throughput 200 idle workloads leave it on this machine at best: the
bound on #32's last goal ("busy within 10% of running alone"), whatever reads the idle ones.

    python -m bench.floor [--idle 200] [--records 500000] [--rounds 2] [--sides ...]

One fresh embedded Tansu holds ``busy`` (4 partitions) and ``--idle`` topics of 2 partitions
with ``bench.hosts``'s trickle (one record per topic every 5 s, on all the time). ``busy`` is a
``lanehouse consume`` of ``bench.hosts``'s busy spec, started on ``--records`` records produced
while nothing read them, timed from its first commit to its last (read every 0.1 s), and
stopped. It runs, in turn:

* ``alone``: nothing reads the idle topics;
* ``one client``: ``bench.client_per_host``'s cheapest reader of them, one confluent-kafka
  client assigned all their partitions with commits per group through the admin client and
  no engine at all: the floor of any way of hosting idle workloads;
* ``one client, 5 s fetch wait``: the same with fewer empty fetches (the broker answers a
  fetch as soon as a record comes);
* ``engine``: a ``lanehouse consume`` of the idle workloads (a client each, as a host run
  holds them, without Dagster), and ``engine, 5 s fetch wait`` with that in their specs.

A first run of ``busy`` on a fifth of the records (``warmup_per_s``) warms the broker up.
Then rounds of ``alone`` and the ``--sides`` (by default all the others), and ``alone`` once
more at the end; each beside-ratio is to the mean of the ``alone`` before and after it. Before
``busy`` starts beside a reader, the cores of the reader and of Tansu are read over 20 s. There
is no Dagster here: under the platform it is beside ``busy`` as well and takes its own share,
so these ratios bound what a host run keeps.
Prints one JSON object; ``docs/benchmarks.md`` records a run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, TopicPartition

from bench.fleet import cores_over
from bench.hosts import Trickle, committed, spec, wait
from consumers.dev.embedded.tansu import create_topic, start_tansu
from consumers.dev.sample import produce_sample

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("alone", "one client", "one client, 5 s fetch wait", "engine", "engine, 5 s fetch wait")
#: Each engine side's idle specs directory and ``fetch.wait.max.ms``.
ENGINES = {"engine": ("idle", 500), "engine, 5 s fetch wait": ("idle-5s", 5000)}


class Commits:
    """``busy``'s committed records, read every 0.1 s through one client (a client made for
    each read costs this machine more than what it reads)."""

    def __init__(self, bootstrap: str) -> None:
        self._client = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench.busy"})
        self._parts = [TopicPartition("busy", p) for p in range(4)]

    def __call__(self) -> int:
        return sum(max(tp.offset, 0) for tp in self._client.committed(self._parts, timeout=10))

    def close(self) -> None:
        self._client.close()


def busy_rate(work: Path, bootstrap: str, records: int) -> float:
    """``busy``'s records/s over ``records`` produced before its process starts."""
    commits = Commits(bootstrap)
    before = commits()
    produce_sample(bootstrap, "busy", records, keys=1000)
    command = [sys.executable, "-m", "orchestration.cli", "consume", str(work / "busy")]
    process = subprocess.Popen(
        [*command, "--log-level", "WARNING"], cwd=ROOT, stdout=subprocess.DEVNULL
    )
    try:
        wait(lambda: commits() > before, 120, "busy starts", 0.1)
        start = time.monotonic()
        wait(lambda: commits() >= before + records, 600, "busy done", 0.1)
        return records / (time.monotonic() - start)
    finally:
        process.terminate()
        process.wait(60)
        commits.close()


def start_side(side: str, work: Path, bootstrap: str, idle: list[str]) -> subprocess.Popen[str]:
    """The idle workloads' reader, once it reads all of them."""
    if side.startswith("one client"):
        command = [sys.executable, "-m", "bench.client_per_host", "--child", side, bootstrap]
        reader = subprocess.Popen(
            [*command, *idle], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the one client ended before reading")
        return reader
    before = committed(bootstrap, idle, 2)
    command = [sys.executable, "-m", "bench.idle_consume", "--child", str(work / ENGINES[side][0])]
    reader = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, text=True)
    wait(
        lambda: all(n > before[t] for t, n in committed(bootstrap, idle, 2).items()),
        300,
        "every idle workload committing",
        5.0,
    )
    return reader


def stop_side(reader: subprocess.Popen[str]) -> dict[str, object]:
    """Stop the reader; the one client's summary of what it read (records, latency)."""
    summary: dict[str, object] = {}
    if reader.stdin is not None and reader.stdout is not None:  # reads until stdin closes
        reader.stdin.close()
        summary = json.loads(reader.stdout.readline() or "{}")
    else:
        reader.terminate()
    try:
        reader.wait(60)
    except subprocess.TimeoutExpired:
        reader.kill()
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sides", nargs="+", choices=SIDES[1:], default=list(SIDES[1:]))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lh-floor-"))
    broker = start_tansu(log_dir=work)
    bootstrap = broker.bootstrap
    (work / "busy").mkdir()
    for directory, _ in ENGINES.values():
        (work / directory).mkdir()
    create_topic(bootstrap, "busy", 4)
    (work / "busy" / "busy.yaml").write_text(spec("busy", bootstrap, busy=True))
    idle = [f"idle-{i:03d}" for i in range(args.idle)]
    for name in idle:
        create_topic(bootstrap, name, 2)
        for directory, fetch_wait in ENGINES.values():
            text = spec(name, bootstrap, fetch_wait=fetch_wait)
            (work / directory / f"{name}.yaml").write_text(text)
    trickle = Trickle(bootstrap)
    trickle.topics = idle
    trickle.start()
    runs: list[dict[str, object]] = []
    rates: list[float] = []
    try:
        # The broker's and the page cache's first large batch is slower: not a side's cost.
        warmup = round(busy_rate(work, bootstrap, args.records // 5))
        for side in [*(["alone", *args.sides] * args.rounds), "alone"]:
            run: dict[str, object] = {"side": side}
            reader = None if side == "alone" else start_side(side, work, bootstrap, idle)
            try:
                if reader is not None:
                    time.sleep(10.0)  # two trickle rounds before the reading starts
                    parts = {"reader": psutil.Process(reader.pid)}
                    tansu = psutil.Process(broker.pid)
                    run["cores_at_rest"] = cores_over({**parts, "tansu": tansu}, 20.0)
                rates.append(busy_rate(work, bootstrap, args.records))
            finally:
                if reader is not None:
                    run |= stop_side(reader)
            run["busy_per_s"] = round(rates[-1])
            print(run, file=sys.stderr)
            runs.append(run)
    finally:
        trickle.stopped.set()
        broker.stop()
    alone = [i for i, run in enumerate(runs) if run["side"] == "alone"]
    for i, run in enumerate(runs):
        if run["side"] != "alone":
            before, after = max(a for a in alone if a < i), min(a for a in alone if a > i)
            run["ratio_to_alone"] = round(rates[i] / ((rates[before] + rates[after]) / 2), 3)
    result = {"idle": args.idle, "records": args.records, "warmup_per_s": warmup, "runs": runs}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
