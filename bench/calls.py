"""Python calls a record costs on the event loop: counted, not timed, so two commits compare
exactly on a noisy machine (``docs/benchmarks.md``, "Calls a record").

The engine runs one no-op workload over the in-memory broker under ``cProfile``, which sees only
the thread it is enabled on: the loop's. The broker's side of ``consume()`` runs on the source
thread and is not counted, nor is the start (the count begins at the first record). Run it
from the checkout whose engine you want counted::

    python -m bench.calls [--records 100000]

A handler of each kind a user writes: ``async def`` and plain ``def`` (inline once proven fast).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import threading
from typing import Any

from consumers import ConsumerApp, Record, RunnerSettings, Workload
from consumers.backends.memory import MemoryBroker
from consumers.engine import event_loop

KEYS = 1_000
PARTITIONS = 4


class Counted:
    """Turns the profiler on, on the loop's thread, at the first record, so start-up is not
    counted (a plain ``def`` runs its first calls on threads, before it proves fast)."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()
        self.on = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0

    def first(self) -> None:
        if self.on:
            return
        self.on = True
        if threading.get_ident() == self.loop_thread:
            self.profile.enable()
        elif self.loop is not None:
            self.loop.call_soon_threadsafe(self.profile.enable)


def handlers(counted: Counted) -> dict[str, Any]:
    async def noop_async(rec: Record) -> None:
        counted.first()

    def noop_sync(rec: Record) -> None:
        counted.first()

    return {"async def": noop_async, "def": noop_sync}


def count(kind: str, records: int) -> dict[str, Any]:
    broker = MemoryBroker()
    broker.create_topic("t", PARTITIONS)
    for i in range(records):
        broker.produce("t", b'{"seq":%d}' % (i // KEYS), b"k%d" % (i % KEYS))
    counted = Counted()
    settings = RunnerSettings(name="calls", ordering="key", concurrency=100)
    workload = Workload(
        settings,
        handlers(counted)[kind],
        ["t"],
        lambda on_commit: broker.consumer("g", on_commit),
    )

    async def main() -> Any:
        counted.loop, counted.loop_thread = asyncio.get_running_loop(), threading.get_ident()
        summaries = await ConsumerApp([workload], pool_sizes={"default": 100}).run(until_idle=0.2)
        counted.profile.disable()
        await asyncio.sleep(0)
        return summaries

    [summary] = event_loop.run(main())
    by_place: dict[str, int] = {}
    entries = pstats.Stats(counted.profile).stats  # type: ignore[attr-defined]
    for (path, _, _), entry in entries.items():
        place = (
            "C functions"  # builtins and methods of C types are listed under "~"
            if path == "~"
            else "broker messages (in-memory)"
            if "consumers/backends" in path
            else "engine"
            if "consumers/" in path
            else "asyncio, uvloop, handler"
        )
        by_place[place] = by_place.get(place, 0) + entry[1]
    return {
        "handler": kind,
        "records": summary.counters["completed"],
        "calls_per_record": {k: round(v / records, 2) for k, v in sorted(by_place.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    rows = [count(kind, args.records) for kind in ("async def", "def")]
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
