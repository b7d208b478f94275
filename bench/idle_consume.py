"""What idle workloads cost in one ``lanehouse consume`` process, and what they cost the broker,
side by side for the client settings and engine timers that might be what costs.

    python -m bench.idle_consume [--workloads 50] [--rounds 2] [--seconds 30] [--variants ...]

Each variant gets a fresh embedded Tansu, ``--workloads`` topics of 2 partitions with one
record each every few seconds (``bench.hosts``'s trickle), one workload per topic with
``bench.hosts``'s idle client settings, and one ``lanehouse consume`` of them all. Once every
workload has committed a record, the cores used by the process and by Tansu are read over
``--seconds`` (psutil). Variants, run in turn ``--rounds`` times:

* ``as bench.hosts``: a 1.5 s heartbeat, a 6 s session, librdkafka's 500 ms fetch wait;
* ``heartbeat 3 s``: librdkafka's default heartbeat and session (3 s, 45 s);
* ``fetch wait 1000 ms``: the broker may hold an empty fetch twice as long;
* ``topic-id checks off``: no workload asks for its topics' ids every 5 s
  (:mod:`consumers.engine.incarnations`; a variant to measure, not a setting).

Prints one JSON object; ``docs/benchmarks.md`` ("Host runs at scale") records a run.
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

from bench.fleet import cores_over
from bench.hosts import Trickle, committed, spec, wait
from consumers.dev.embedded.tansu import create_topic, start_tansu

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 2
VARIANTS: dict[str, dict[str, object]] = {
    "as bench.hosts": {},
    "heartbeat 3 s": {"heartbeat.interval.ms": 3000, "session.timeout.ms": 45000},
    "fetch wait 1000 ms": {"fetch.wait.max.ms": 1000},
    "topic-id checks off": {},
}


def child(directory: str, topic_checks: bool) -> None:
    """``lanehouse consume DIRECTORY`` in this process, without topic-id checks if asked."""
    if not topic_checks:
        from consumers.engine import incarnations

        incarnations.CHECK_SECONDS = 1e9
        incarnations.IncarnationWatch.__init__.__defaults__ = (1e9,)
    from orchestration.cli import app

    sys.argv = ["lanehouse", "consume", directory, "--log-level", "WARNING"]
    app()


def measure(variant: str, workloads: int, seconds: float) -> dict[str, object]:
    """One variant on a broker of its own: its join time and the cores used at rest."""
    with tempfile.TemporaryDirectory(prefix="lh-idle-") as work:
        specs = Path(work) / "workloads"
        specs.mkdir()
        broker = start_tansu(log_dir=Path(work))
        bootstrap = broker.bootstrap
        names = [f"idle{i:03d}" for i in range(workloads)]
        for name in names:
            create_topic(bootstrap, name, PARTITIONS)
            (specs / f"{name}.yaml").write_text(spec(name, bootstrap, client=VARIANTS[variant]))
        command = [sys.executable, "-m", "bench.idle_consume", "--child", str(specs)]
        if variant == "topic-id checks off":
            command.append("--no-topic-checks")
        engine = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        trickle = Trickle(bootstrap)
        trickle.topics = names
        trickle.start()
        try:
            joined = wait(
                lambda: min(committed(bootstrap, names, PARTITIONS).values()) > 0,
                180,
                "every workload committing",
            )
            time.sleep(5.0)  # the last joins' rebalances settle before the reading starts
            parts = {"engine": psutil.Process(engine.pid), "tansu": psutil.Process(broker.pid)}
            cores = cores_over(parts, seconds)
        finally:
            trickle.stopped.set()
            engine.terminate()
            engine.wait(60)
            broker.stop()
    return {"variant": variant, "consuming_after_s": round(joined, 1), **cores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--no-topic-checks", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, topic_checks=not args.no_topic_checks)
        return
    results = [
        measure(variant, args.workloads, args.seconds)
        for _ in range(args.rounds)
        for variant in args.variants
    ]
    for result in results:
        print(result, file=sys.stderr)
    print(json.dumps({"workloads": args.workloads, "seconds": args.seconds, "runs": results}))


if __name__ == "__main__":
    main()
