"""A handler for tests of several consumer processes (``lanehouse consume --replicas N``,
replica runs): each replica writes its own file; and the checks over what they all handled.

Each handled record becomes one line ``key seq partition offset epoch monotonic_ns pid`` in
``$LH_RECORD_DIR/replica-$LANEHOUSE_REPLICA.txt`` (the supervisor sets ``LANEHOUSE_REPLICA``,
so a missing variable fails the handler). ``epoch`` names the partition assignment within the
process; ``monotonic_ns`` is the system-wide monotonic clock, comparable across processes.
Lines are flushed before the handler returns, so they survive a ``kill -9``. ``$LH_DELAY`` adds
a random latency of up to that many seconds.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from consumers import Record
from tests.support.recording import append_line, handled


def _path() -> Path:
    return Path(os.environ["LH_RECORD_DIR"]) / f"replica-{os.environ['LANEHOUSE_REPLICA']}.txt"


async def record(rec: Record) -> None:
    line = await handled(rec)
    append_line(_path(), f"{line} {time.monotonic_ns()} {os.getpid()}\n")


@dataclass(frozen=True)
class Handled:
    replica: int
    key: str
    seq: int
    partition: int
    offset: int
    epoch: int
    at_ns: int
    pid: int


def read_fleet(directory: Path) -> list[Handled]:
    """Every replica's lines (a torn last line from a kill is ignored)."""
    rows = []
    for path in sorted(directory.glob("replica-*.txt")):
        replica = int(path.stem.removeprefix("replica-"))
        for line in path.read_text().splitlines(keepends=True):
            parts = line.split()
            if len(parts) == 7 and line.endswith("\n"):
                key, *numbers = parts
                seq, partition, offset, epoch, at_ns, pid = map(int, numbers)
                rows.append(Handled(replica, key, seq, partition, offset, epoch, at_ns, pid))
    return rows


def assert_no_two_owners_at_once(rows: list[Handled]) -> None:
    """Per partition, the spans of its assignments (process, epoch) never overlap in time."""
    spans: dict[int, dict[tuple[int, int], list[int]]] = defaultdict(dict)
    for row in rows:
        span = spans[row.partition].setdefault((row.pid, row.epoch), [row.at_ns, row.at_ns])
        span[0], span[1] = min(span[0], row.at_ns), max(span[1], row.at_ns)
    for partition, owners in spans.items():
        ordered = sorted(owners.items(), key=lambda item: item[1][0])
        for (before, (_, end)), (after, (start, _)) in itertools.pairwise(ordered):
            assert end < start, f"partition {partition}: {before} and {after} handled it at once"


def assert_key_order(rows: list[Handled]) -> None:
    """Within one assignment of one process, each key's sequence numbers strictly increase."""
    last: dict[tuple[int, int, str], int] = {}
    for row in rows:
        where = (row.pid, row.epoch, row.key)
        assert row.seq > last.get(where, -1), f"key {row.key} out of order in {where}"
        last[where] = row.seq
