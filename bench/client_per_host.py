"""What idle workloads' broker clients cost with a client each, against one client for all of
them: the lever left for #32 ("busy within 10% of running alone"), measured before it is built.

    python -m bench.client_per_host [--workloads 200] [--rounds 2] [--seconds 30]

Each variant gets a fresh embedded Tansu and ``--workloads`` topics of 2 partitions with
``bench.hosts``'s trickle (one record per topic every 5 s). A child process reads them with
plain confluent-kafka clients, so the figures are the clients' and the broker's, not the
engine's:

* ``a client each``: what a host run does today. One consumer per workload, in its own group
  with ``bench.hosts``'s idle settings (1.5 s heartbeat, 6 s session, 500 ms fetch wait),
  polled as the engine polls an idle client (one record, a 0.5 s wait), and an asynchronous
  commit after each record.
* ``one client``: one consumer assigned every workload's partitions, with no group membership,
  polled as the engine polls an idle client (one record in 0.5 s, then a 50 ms batch: a
  batch poll waits out its timeout); each record is committed for its workload's group
  through ``AdminClient.alter_consumer_group_offsets`` (what a shared client would do; that
  request works on a group without members). Again with a 100 ms fetch wait: one client can
  fetch five times as often for less than 200 clients cost. And with a 5 s fetch wait: the
  broker answers a fetch as soon as a record comes, so a longer wait only means fewer empty
  fetches.
* ``no reader``: the trickle alone, the broker's floor.

Once every client is assigned its partitions, the cores of the child
and of Tansu are read over ``--seconds`` (psutil), and the child reports each record's latency
from its producer's timestamp. Prints one JSON object; ``docs/benchmarks.md`` records a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import psutil
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from bench.fleet import cores_over
from bench.hosts import IDLE_CLIENT_CONFIG, Trickle, wait
from consumers.dev.embedded.tansu import create_topic, start_tansu

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 2
#: Each variant's reader, and its fetch wait in ms.
VARIANTS: dict[str, tuple[str, int]] = {
    "a client each": ("client_each", 500),
    "one client": ("one_client", 500),
    "one client, 100 ms fetch wait": ("one_client", 100),
    "one client, 5 s fetch wait": ("one_client", 5000),
    "no reader": ("no_reader", 500),
}
CLIENT = {
    **IDLE_CLIENT_CONFIG,
    "enable.auto.commit": False,
    "auto.offset.reset": "latest",
}


#: Seconds for every client to be assigned its partitions before the child gives up.
JOIN_TIMEOUT = 300.0


def _latency(message: Message, out: list[float]) -> None:
    _, stamp = message.timestamp()
    out.append(time.time() - stamp / 1000)


def client_each(config: dict[str, object], topics: list[str], stop: threading.Event) -> list[float]:
    """A consumer per topic, each in a thread of its own; returns the records' latencies."""
    latencies: list[float] = []
    ready = threading.Barrier(len(topics) + 1)

    def read(topic: str) -> None:
        consumer = Consumer({**config, "group.id": f"g.{topic}"})
        consumer.subscribe([topic])
        while not consumer.assignment():
            consumer.consume(1, 0.5)
        ready.wait(JOIN_TIMEOUT)
        while not stop.is_set():
            for message in consumer.consume(1, 0.5):
                _latency(message, latencies)
                consumer.commit(message=message, asynchronous=True)
        consumer.close()

    threads = [threading.Thread(target=read, args=(t,), daemon=True) for t in topics]
    for thread in threads:
        thread.start()
    ready.wait(JOIN_TIMEOUT)
    print("ready", flush=True)
    for thread in threads:
        thread.join()
    return latencies


def one_client(config: dict[str, object], topics: list[str], stop: threading.Event) -> list[float]:
    """One consumer assigned every partition; commits per group through the admin client
    (a failed commit fails the run)."""
    latencies: list[float] = []
    failures: list[BaseException] = []

    def check(future: Future[object]) -> None:
        if (error := future.exception()) is not None:
            failures.append(error)

    consumer = Consumer({**config, "group.id": "g.shared"})
    admin = AdminClient({"bootstrap.servers": str(config["bootstrap.servers"])})
    consumer.assign([TopicPartition(t, p, OFFSET_END) for t in topics for p in range(PARTITIONS)])
    print("ready", flush=True)
    while not stop.is_set():
        woken = consumer.consume(1, 0.5)  # a batch poll waits out its timeout: one first
        rest = consumer.consume(499, 0.05) if woken else []
        for message in woken + rest:
            _latency(message, latencies)
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            position = TopicPartition(topic, partition, offset + 1)
            group = ConsumerGroupTopicPartitions(f"g.{topic}", [position])
            for future in admin.alter_consumer_group_offsets([group]).values():
                future.add_done_callback(check)
    consumer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} commits failed, the first: {failures[0]}")
    return latencies


def no_reader(config: dict[str, object], topics: list[str], stop: threading.Event) -> list[float]:
    """Nothing reads: what the trickle alone costs the broker."""
    print("ready", flush=True)
    stop.wait()
    return []


def child(variant: str, bootstrap: str, topics: list[str]) -> None:
    """Read until stdin closes, then print the latencies' summary as JSON."""
    stop = threading.Event()

    def until_closed() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_closed, daemon=True).start()
    reader, fetch_wait = VARIANTS[variant]
    config = {**CLIENT, "bootstrap.servers": bootstrap, "fetch.wait.max.ms": fetch_wait}
    latencies = sorted(globals()[reader](config, topics, stop))
    summary: dict[str, object] = {"records": len(latencies)}
    if latencies:
        summary |= {
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_max_ms": round(latencies[-1] * 1000, 1),
        }
    print(json.dumps(summary), flush=True)


def measure(variant: str, workloads: int, seconds: float) -> dict[str, object]:
    """One variant on a broker of its own: the cores of its clients and of Tansu at rest."""
    with tempfile.TemporaryDirectory(prefix="lh-clients-") as work:
        broker = start_tansu(log_dir=Path(work))
        topics = [f"idle{i:03d}" for i in range(workloads)]
        for topic in topics:
            create_topic(broker.bootstrap, topic, PARTITIONS)
        command = [sys.executable, "-m", "bench.client_per_host", "--child", variant]
        command += [broker.bootstrap, *topics]
        clients = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        trickle = Trickle(broker.bootstrap)
        try:
            assert clients.stdout is not None and clients.stdin is not None
            started = time.monotonic()
            if clients.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{variant}: the clients ended before reading")
            joined = time.monotonic() - started
            trickle.topics = topics
            trickle.start()
            time.sleep(10.0)  # two trickle rounds before the reading starts
            parts = {"clients": psutil.Process(clients.pid), "tansu": psutil.Process(broker.pid)}
            cores = cores_over(parts, seconds)
            clients.stdin.close()
            summary = json.loads(clients.stdout.readline())
            wait(lambda: clients.poll() is not None, 60, "the clients' exit", every=0.2)
        finally:
            trickle.stopped.set()
            if clients.poll() is None:
                clients.kill()
            broker.stop()
    return {"variant": variant, "reading_after_s": round(joined, 1), **cores, **summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, bootstrap, *topics = args.child
        child(variant, bootstrap, topics)
        return
    results = [
        measure(variant, args.workloads, args.seconds)
        for _ in range(args.rounds)
        for variant in VARIANTS
    ]
    for result in results:
        print(result, file=sys.stderr)
    print(json.dumps({"workloads": args.workloads, "seconds": args.seconds, "runs": results}))


if __name__ == "__main__":
    main()
