"""A handler for ``lanehouse consume --replicas N`` tests: each replica writes its own file.

Each handled record becomes one line ``key seq partition offset epoch monotonic_ns pid`` in
``$LH_RECORD_DIR/replica-$LANEHOUSE_REPLICA.txt`` (the supervisor sets ``LANEHOUSE_REPLICA``,
so a missing variable fails the handler). ``epoch`` names the partition assignment within the
process; ``monotonic_ns`` is the system-wide monotonic clock, comparable across processes.
Lines are flushed before the handler returns, so they survive a ``kill -9``. ``$LH_DELAY`` adds
a random latency of up to that many seconds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from consumers.record import Record
from tests.integration.recording import append_line, handled


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
