"""A handler for shared-permit tests: holds its permit ``$LH_HOLD`` seconds and writes one line
``workload start end`` (wall-clock seconds, one clock for every process on this machine) to
``$LH_RECORD_FILE``. Line-buffered, so lines survive a ``kill -9``."""

from __future__ import annotations

import asyncio
import os
import time

from consumers import Record
from tests.support.recording import append_line


async def timed(rec: Record) -> None:
    start = time.time()
    await asyncio.sleep(float(os.environ["LH_HOLD"]))
    line = f"{os.environ['LH_WORKLOAD']} {start:.6f} {time.time():.6f}\n"
    append_line(os.environ["LH_RECORD_FILE"], line)


Interval = tuple[str, float, float]


def read_intervals(path: str) -> list[Interval]:
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and line.endswith("\n"):
                rows.append((parts[0], float(parts[1]), float(parts[2])))
    return rows


def max_concurrency(intervals: list[Interval]) -> int:
    """The most handlers running at once (an end at the same instant as a start comes first)."""
    events = sorted([(s, 1) for _, s, _ in intervals] + [(e, -1) for _, _, e in intervals])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def mean_concurrency(intervals: list[Interval], since: float, until: float) -> float:
    """Handler-seconds inside the window divided by its length."""
    busy = sum(max(0.0, min(e, until) - max(s, since)) for _, s, e in intervals)
    return busy / (until - since)
