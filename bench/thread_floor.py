"""What plain Python threads that each call ``time.sleep(0.02)`` in a loop reach, with no
engine, no broker and no hand-off: the floor under the ``sleep20sync_*`` rows of ``make bench``
(``docs/benchmarks.md``, "What bounds the goals left").

Each thread sleeps 20 ms and appends to a deque, forever; the rate over a few seconds against
the bound ``threads / 0.020 s`` says what the interpreter, its GIL and the kernel give a thread
that wakes 50 times a second. ``--processes P`` splits the threads over P processes (how much
spreading threads over processes would give, before any cost of sending records there)::

    python -m bench.thread_floor --threads 1000 --processes 1 2 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import deque

SLEEP = 0.020


def child(threads: int, seconds: float) -> dict[str, float]:
    """Run ``threads`` sleeping threads for ``seconds``; their wake-ups and this process's CPU."""
    done: deque[int] = deque()

    def serve() -> None:
        while True:
            time.sleep(SLEEP)
            done.append(1)

    started, cpu = time.monotonic(), time.process_time()
    for _ in range(threads):
        threading.Thread(target=serve, daemon=True).start()
    time.sleep(seconds)
    wakes, elapsed = len(done), time.monotonic() - started
    return {"wakes": wakes, "seconds": elapsed, "cpu_s": time.process_time() - cpu}


def run(threads: int, processes: int, seconds: float) -> dict[str, float]:
    """``threads`` threads over ``processes`` child processes, started together."""
    each = threads // processes
    cmd = [sys.executable, "-m", "bench.thread_floor", "--child", str(each), str(seconds)]
    children = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    results = [json.loads(c.communicate()[0]) for c in children]
    wakes = sum(r["wakes"] for r in results)
    rate = sum(r["wakes"] / r["seconds"] for r in results)
    bound = each * processes / SLEEP
    cpu = sum(r["cpu_s"] for r in results)
    return {
        "threads": each * processes,
        "processes": processes,
        "msg_s": round(rate),
        "bound": bound,
        "efficiency": round(rate / bound, 2),
        "cpu_us_per_wake": round(cpu / wakes * 1e6, 1),
        "cores": round(cpu / max(r["seconds"] for r in results), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), float(args.child[1]))))
        return
    for _ in range(args.repeat):
        for threads in args.threads:
            for processes in args.processes:
                print(json.dumps(run(threads, processes, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
