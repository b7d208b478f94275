"""Host runs at scale under the real Dagster daemon and code server (#32's figures).

    python -m bench.hosts [--idle 200] [--budget 50] [--busy-records 500000]
        [--busy-own] [--idle-fetch-wait 500]

One embedded Tansu, ``dagster dev`` on a fresh instance and LANEHOUSE_HOST_WORKLOADS=budget:

1. ``busy`` alone (4 partitions, the JSON ``enrich`` handler): its host run's RSS, and how
   fast it consumes ``--busy-records`` records produced while it was stopped (first to last
   committed, read from the broker every 0.1 s; it commits every 100 ms).
2. ``--idle`` more workloads (2 partitions each, a trickle of one record per topic every few
   seconds) added to the directory at once: how long until every one has committed a record,
   the RSS of every consumer run (each run worker process, found by the port its run serves),
   the marginal RSS per idle workload, and ``busy``'s throughput again with them beside it.
   Then every workload's latest lag check (passed, failed, missing).
3. A quarter of the idle workloads removed and as many new ones added at once: how long until
   the new ones consume, how many runs were launched meanwhile, and how many of the remaining
   workloads were started again inside their hosts (none and none: hosts follow their members
   at runtime).
4. Every other workload removed and the trickle stopped: ``busy``'s throughput alone again, on
   the warmed-up platform (the first ran while Dagster was still starting), and its ratio to
   the mean of the two.

Prints one JSON object; ``docs/benchmarks.md`` records a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from dagster import AssetCheckKey, DagsterInstance, RunsFilter

from bench.fleet import cpu_seconds
from consumers.dev.embedded.tansu import TEST_CLIENT_CONFIG, create_topic, start_tansu
from consumers.dev.sample import produce_sample
from orchestration.local.instance import prepare_dagster_home
from orchestration.workloads.assets import LAG_CHECK, workload_key
from orchestration.workloads.names import CONSUMER_JOB_NAME, HOST_JOB_NAME
from orchestration.workloads.names import PARTITION_TAG as PARTITION

ROOT = Path(__file__).resolve().parent.parent
TRICKLE_SECONDS = 5.0


#: The idle workloads' client settings: the demo's faster group joins, and ``fetch.wait.max.ms``
#: from ``--idle-fetch-wait`` (librdkafka's default is 500 ms: how long the broker may hold an
#: empty fetch). With the tests' 10 ms fetches (TEST_CLIENT_CONFIG), 20 idle consumers cost
#: Tansu 66% of a core against 4.7% with 500 ms, and 200 of them saturate this machine.
IDLE_CLIENT_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500}


def spec(
    name: str,
    bootstrap: str,
    busy: bool = False,
    own: bool = False,
    fetch_wait: int = 500,
    client: Mapping[str, object] | None = None,
) -> str:
    """``busy``: the tests' client settings and 100 ms commits, so its last commit times its
    last record; ``own``: a run of its own (``run: own``); ``client``: settings over the idle
    workloads' own."""
    settings = (
        TEST_CLIENT_CONFIG
        if busy
        else {**IDLE_CLIENT_CONFIG, "fetch.wait.max.ms": fetch_wait, **(client or {})}
    )
    config = "".join(f"    {k}: {v}\n" for k, v in settings.items())
    return (
        f"name: {name}\nsource:\n  kind: kafka\n  bootstrap_servers: {bootstrap}\n"
        f"  topics: [{name}]\n  group: bench.{name}\n  config:\n{config}"
        f"handler: consumers.dev.examples:enrich\ncommit_interval: {'100ms' if busy else '1s'}\n"
        + ("run: own\n" if own else "")
    )


def committed(bootstrap: str, names: Iterable[str], partitions: int) -> dict[str, int]:
    """Each workload's committed records (sum over its partitions), from the broker."""
    out = {}
    for name in names:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench.{name}"})
        try:
            parts = [TopicPartition(name, p) for p in range(partitions)]
            found = consumer.committed(parts, timeout=10)
            out[name] = sum(max(tp.offset, 0) for tp in found)
        finally:
            consumer.close()
    return out


def wait(predicate: Callable[[], bool], timeout: float, what: str, every: float = 2.0) -> float:
    """Seconds until ``predicate()`` held; raises naming ``what`` after ``timeout``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(every)
    return time.monotonic() - started


class Trickle(threading.Thread):
    """One record to each idle topic every :data:`TRICKLE_SECONDS`."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
        self.topics: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.stopped.wait(TRICKLE_SECONDS):
            for topic in list(self.topics):
                value = json.dumps({"key": "k", "seq": seq}).encode()
                self.producer.produce(topic, value, b"k")
            seq += 1
            self.producer.flush(10)


def run_processes(home: Path) -> dict[int, str]:
    """Each consumer and host run's worker process id, with its run id: the process that
    listens on the port in the run's ``lanehouse/http`` tag."""
    with DagsterInstance.from_config(str(home)) as instance:
        runs = [
            r
            for job in (CONSUMER_JOB_NAME, HOST_JOB_NAME)
            for r in instance.get_runs(RunsFilter(job_name=job))
            if r.status.value == "STARTED" and "lanehouse/http" in r.tags
        ]
    ports = {int(r.tags["lanehouse/http"].rsplit(":", 1)[1]): r.run_id for r in runs}
    found = {}
    for process in psutil.process_iter(["pid"]):
        try:
            for connection in process.net_connections(kind="tcp"):
                if connection.status == "LISTEN" and connection.laddr.port in ports:
                    found[process.pid] = ports[connection.laddr.port]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def run_rss(home: Path) -> dict[str, int]:
    """RSS (bytes) of each consumer and host run's worker process, by run id."""
    rss = {}
    for pid, run_id in run_processes(home).items():
        try:
            rss[run_id] = psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return rss


def cpu_shares(
    runs: dict[int, str], others: dict[str, int], seconds: float = 20.0
) -> dict[str, float]:
    """Cores used over ``seconds`` by the run processes (summed) and each named process with its
    children, and by the whole machine."""
    groups = {"runs": [psutil.Process(pid) for pid in runs]}
    for name, pid in others.items():
        root = psutil.Process(pid)
        groups[name] = [root, *root.children(recursive=True)]
    groups["dagster"] = [p for p in groups["dagster"] if p.pid not in runs]

    def used() -> dict[str, float]:
        return {name: cpu_seconds(processes) for name, processes in groups.items()}

    before, machine = used(), psutil.cpu_times()
    time.sleep(seconds)
    after, ended = used(), psutil.cpu_times()
    busy = (ended.user + ended.system) - (machine.user + machine.system)
    shares = {name: round((after[name] - before[name]) / seconds, 3) for name in groups}
    return {**shares, "machine": round(busy / seconds, 3)}


def launched(home: Path) -> int:
    with DagsterInstance.from_config(str(home)) as instance:
        return sum(
            len(instance.get_runs(RunsFilter(job_name=job)))
            for job in (CONSUMER_JOB_NAME, HOST_JOB_NAME)
        )


def members_of(home: Path) -> dict[str, int]:
    from orchestration.workloads.host_store import read_members

    with DagsterInstance.from_config(str(home)) as instance:
        return {
            f"host.{i}": len(read_members(instance, f"host.{i}") or {})
            for i in range(64)
            if read_members(instance, f"host.{i}")
        }


def lag_checks(home: Path, names: list[str]) -> dict[str, int]:
    """How many workloads' latest ``lag_below_target`` result passed, failed or is missing."""
    keys = [AssetCheckKey(workload_key(name), LAG_CHECK) for name in names]
    with DagsterInstance.from_config(str(home)) as instance:
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    out = {"passed": 0, "failed": 0, "missing": 0}
    for key in keys:
        record = latest.get(key)
        event = record.event.dagster_event if record and record.event else None
        if event is None:
            out["missing"] += 1
        else:
            out["passed" if event.asset_check_evaluation_data.passed else "failed"] += 1
    return out


def starts(home: Path, names: list[str]) -> dict[str, tuple[str, float]]:
    """Each hosted workload's host run and the time its host last wrote its state: a restart
    inside the host writes it again."""
    from orchestration.workloads.host_store import read_statuses

    with DagsterInstance.from_config(str(home)) as instance:
        return {n: (s.run_id, s.at) for n, s in read_statuses(instance, names).items()}


def throughput(home: Path, bootstrap: str, records: int, own: bool) -> float:
    """``busy``'s records/s over ``records`` produced while it was stopped (``stop_workload``'s
    mark, so its host drains it), from its first commit after ``start_workload`` to its last."""
    from orchestration.workloads.host_store import read_statuses, write_stopped

    with DagsterInstance.from_config(str(home)) as instance:
        write_stopped(instance, "busy", True, "bench")

        def stopped() -> bool:
            if own:  # its run ended
                runs = instance.get_runs(RunsFilter(job_name=CONSUMER_JOB_NAME))
                return all(run.is_finished for run in runs if run.tags.get(PARTITION) == "busy")
            status = read_statuses(instance, ["busy"]).get("busy")
            return status is not None and status.state == "stopped"

        wait(stopped, 120, "busy stopped", 0.5)
        before = committed(bootstrap, ["busy"], 4)["busy"]
        produce_sample(bootstrap, "busy", records, keys=1000)
        write_stopped(instance, "busy", False, "bench")
    target = before + records
    wait(lambda: committed(bootstrap, ["busy"], 4)["busy"] > before, 300, "busy starts", 0.1)
    start = time.monotonic()
    wait(lambda: committed(bootstrap, ["busy"], 4)["busy"] >= target, 900, "busy done", 0.1)
    return records / (time.monotonic() - start)


def alone_again(
    home: Path, bootstrap: str, specs: Path, trickle: Trickle, records: int, own: bool
) -> float:
    """``busy``'s throughput once every other workload is gone (files removed, their hosts
    stopped) and the trickle stopped: alone again, on a warmed-up platform."""
    trickle.stopped.set()
    for path in specs.glob("*.yaml"):
        if path.stem != "busy":
            path.unlink()
    wait(lambda: len(run_processes(home)) == 1, 600, "only busy's run left", 5.0)
    return throughput(home, bootstrap, records, own)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--busy-records", type=int, default=500_000)
    parser.add_argument("--port", type=int, default=3399)
    parser.add_argument("--busy-own", action="store_true", help="busy gets a run of its own")
    parser.add_argument(
        "--idle-fetch-wait", type=int, default=500, help="the idle workloads' fetch.wait.max.ms"
    )
    args = parser.parse_args()
    wait_ms = args.idle_fetch_wait
    work = Path(tempfile.mkdtemp(prefix="lh-hosts-"))
    specs = work / "workloads"
    specs.mkdir()
    home = prepare_dagster_home(work)
    broker = start_tansu(log_dir=work)
    bootstrap = broker.bootstrap
    trickle = Trickle(bootstrap)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LANEHOUSE_WORKLOADS": str(specs),
        "LANEHOUSE_LAKE": str(work / "lake"),
        "LANEHOUSE_HOST_WORKLOADS": str(args.budget),
        "LANEHOUSE_SENSOR_SECONDS": "5",
        "LANEHOUSE_DAGSTER_URL": f"http://127.0.0.1:{args.port}",
    }
    result: dict[str, object] = {
        "idle": args.idle,
        "budget": args.budget,
        "busy_own": args.busy_own,
        "idle_fetch_wait_ms": args.idle_fetch_wait,
    }
    create_topic(bootstrap, "busy", 4)
    (specs / "busy.yaml").write_text(spec("busy", bootstrap, busy=True, own=args.busy_own))
    command = [sys.executable, "-m", "dagster", "dev", "-w", str(ROOT / "workspace.yaml")]
    dev = subprocess.Popen(
        [*command, "-h", "127.0.0.1", "-p", str(args.port)],
        cwd=ROOT,
        env=env,
        stdout=(work / "dagster.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started = time.monotonic()
    try:
        produce_sample(bootstrap, "busy", 100, keys=10)
        result["busy_consuming_s"] = round(
            wait(lambda: committed(bootstrap, ["busy"], 4)["busy"] >= 100, 300, "busy"), 1
        )
        alone = run_rss(home)
        result["rss_busy_alone_mb"] = round(sum(alone.values()) / 2**20, 1)
        alone_per_s = throughput(home, bootstrap, args.busy_records, args.busy_own)
        result["busy_alone_per_s"] = round(alone_per_s)

        idle = [f"idle-{i:03d}" for i in range(args.idle)]
        for name in idle:
            create_topic(bootstrap, name, 2)
        trickle.topics = list(idle)
        trickle.start()
        for name in idle:
            (specs / f"{name}.yaml").write_text(spec(name, bootstrap, fetch_wait=wait_ms))

        def all_consuming(names: list[str]) -> bool:
            return all(n > 0 for n in committed(bootstrap, names, 2).values())

        result["idle_all_consuming_s"] = round(
            wait(lambda: all_consuming(idle), 1200, "every idle workload", 5.0), 1
        )
        rss = run_rss(home)
        result["runs"] = len(rss)
        result["members"] = members_of(home)
        result["rss_total_mb"] = round(sum(rss.values()) / 2**20, 1)
        result["rss_per_run_mb"] = sorted(round(v / 2**20, 1) for v in rss.values())
        extra = sum(rss.values()) - len(rss) * sum(alone.values())
        result["rss_per_idle_workload_mb"] = round(extra / args.idle / 2**20, 2)
        everyone = ["busy", *idle]
        wait(lambda: lag_checks(home, everyone)["missing"] == 0, 300, "a lag check each", 5.0)
        with contextlib.suppress(TimeoutError):  # busy's may still be red from its backlog
            wait(lambda: lag_checks(home, everyone)["failed"] == 0, 120, "lag checks green", 5.0)
        result["lag_checks"] = lag_checks(home, everyone)
        others = {"dagster": dev.pid, "tansu": broker.pid}
        result["cores_idle_state"] = cpu_shares(run_processes(home), others)
        with_idle_per_s = throughput(home, bootstrap, args.busy_records, args.busy_own)
        result["busy_with_idle_per_s"] = round(with_idle_per_s)
        result["busy_ratio"] = round(with_idle_per_s / alone_per_s, 3)

        runs_before = launched(home)
        quarter = args.idle // 4
        survivors = idle[quarter:]
        before = starts(home, survivors)
        gone, new = idle[:quarter], [f"new-{i:03d}" for i in range(quarter)]
        for name in new:
            create_topic(bootstrap, name, 2)
        trickle.topics = idle[quarter:] + new
        for name in gone:
            (specs / f"{name}.yaml").unlink()
        for name in new:
            (specs / f"{name}.yaml").write_text(spec(name, bootstrap, fetch_wait=wait_ms))
        result["swap"] = quarter
        result["new_consuming_s"] = round(
            wait(lambda: all_consuming(new), 600, "every new workload", 5.0), 1
        )
        result["runs_launched_by_the_swap"] = launched(home) - runs_before
        after = starts(home, survivors)
        result["neighbours_restarted_by_the_swap"] = sum(
            after.get(n) != before.get(n) for n in survivors
        )
        # The first "alone" ran while the platform was starting: measure it again, warmed up.
        after_per_s = alone_again(home, bootstrap, specs, trickle, args.busy_records, args.busy_own)
        result["busy_alone_after_per_s"] = round(after_per_s)
        mean_alone = (alone_per_s + after_per_s) / 2
        result["busy_ratio_to_mean_alone"] = round(with_idle_per_s / mean_alone, 3)
        result["total_s"] = round(time.monotonic() - started, 1)
    except Exception as exc:  # what was measured before the failure still counts
        result["failed"] = f"{type(exc).__name__}: {exc}"
    finally:
        trickle.stopped.set()
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
        broker.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
