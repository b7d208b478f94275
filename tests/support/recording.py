"""Handlers for consumer processes started by the integration tests.

Each handled record becomes one line ``key seq partition offset epoch`` in ``$LH_RECORD_FILE``,
where ``epoch`` names the partition assignment the record was handled under (records completed
above a commit position are legitimately replayed after a rebalance, so key order is checked
per assignment). The
file is line-buffered, so every line reaches the kernel before the handler returns and survives
a ``kill -9`` of the process. ``$LH_DELAY`` adds a random latency of up to that many seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import TextIO

from consumers import Forward, OutputRecord, Record
from consumers.engine.tracked import TrackedRecord

_files: dict[str, TextIO] = {}


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` to ``path`` (kept open, line-buffered: the line reaches the kernel before
    this returns, so it survives a ``kill -9`` of the process)."""
    key = os.fspath(path)
    out = _files.get(key)
    if out is None:
        out = _files[key] = open(key, "a", buffering=1)  # noqa: SIM115 - process-long
    out.write(line)


def _write(line: str) -> None:
    append_line(os.environ["LH_RECORD_FILE"], line)


async def handled(rec: Record) -> str:
    """After a random ``$LH_DELAY``: the record as ``key seq partition offset epoch``."""
    delay = float(os.environ.get("LH_DELAY", "0"))
    if delay:
        await asyncio.sleep(random.random() * delay)
    value = rec.json()
    assert isinstance(rec, TrackedRecord)  # what the engine hands a handler
    epoch = rec.part.generation  # unique per assignment (an id() could be reused)
    return f"{value['key']} {value['seq']} {rec.partition} {rec.offset} {epoch}"


async def record(rec: Record) -> None:
    _write(f"{await handled(rec)}\n")


Row = tuple[str, int, int, int, int]


def read_run(path: str) -> list[Row]:
    """The lines one run wrote (a torn last line from a kill is ignored)."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5 and line.endswith("\n") and parts[0] != "POISON":
                key, seq, partition, offset, epoch = parts
                rows.append((key, int(seq), int(partition), int(offset), int(epoch)))
    return rows


def order_violations(rows: list[Row]) -> list[tuple[str, int, int]]:
    """Within one assignment, each key's sequence numbers must strictly increase."""
    last: dict[tuple[str, int], int] = {}
    bad = []
    for key, seq, _, _, epoch in rows:
        previous = last.get((key, epoch), -1)
        if seq <= previous:
            bad.append((key, previous, seq))
        last[(key, epoch)] = seq
    return bad


async def poison(rec: Record) -> None:
    """Like :func:`record`, but key ``k0``'s first record always fails (and says so)."""
    value = rec.json()
    if value["key"] == "k0" and value["seq"] == 0:
        _write(f"POISON {rec.partition} {rec.offset} attempt\n")
        raise RuntimeError("poison pill")
    await record(rec)


async def hang_from(rec: Record) -> None:
    """Like :func:`record`, but a record at or above offset ``$LH_HANG_FROM`` (when set) never
    returns: its partition's position stays there while the intake fills up and pauses."""
    hang = os.environ.get("LH_HANG_FROM")
    if hang is not None and rec.offset >= int(hang):
        await asyncio.Event().wait()
    await record(rec)


#: The first record of each of these keys misbehaves (:func:`_bad`).
_BAD_KEYS = {"k0": "poison", "k1": "hang", "k2": "exit"}


def _bad(rec: Record) -> str | None:
    """``poison`` for key ``k0``'s first record (it always fails), ``hang`` for ``k1``'s (it
    never returns), ``exit`` for ``k2``'s (it raises ``SystemExit``), else None."""
    value = rec.json()
    return _BAD_KEYS.get(value["key"]) if value["seq"] == 0 else None


async def poison_or_hang(rec: Record) -> None:
    """Like :func:`record`, but a poison record (:func:`_bad`) raises (``RuntimeError``, or
    ``SystemExit``) and a hanging one awaits forever: the workload's timeout, retries and dead
    letter must settle all three."""
    bad = _bad(rec)
    if bad == "poison":
        raise RuntimeError("poison pill")
    if bad == "exit":
        raise SystemExit(3)
    if bad == "hang":
        await asyncio.Event().wait()
    await record(rec)


def poison_or_hang_sync(rec: Record) -> None:
    """A plain ``def`` :func:`poison_or_hang`: the hanging record sleeps an hour (its thread is
    abandoned, or its worker process replaced, after the timeout)."""
    bad = _bad(rec)
    if bad == "poison":
        raise RuntimeError("poison pill")
    if bad == "exit":
        raise SystemExit(3)
    if bad == "hang":
        time.sleep(3600)
    record_sync(rec)


def record_blocking(rec: Record) -> None:
    """A plain ``def`` :func:`record` that blocks (``time.sleep``, as on I/O) for up to
    ``$LH_DELAY`` seconds; on threads or inline it knows its assignment, so ``epoch`` is real."""
    time.sleep(random.random() * float(os.environ.get("LH_DELAY", "0")))
    value = rec.json()
    assert isinstance(rec, TrackedRecord)  # what the engine hands a handler
    line = f"{value['key']} {value['seq']} {rec.partition} {rec.offset} {rec.part.generation}"
    _write(line + "\n")


#: The exit status of a process :func:`exit_on_poison` ended.
POISON_EXIT = 41


def exit_on_poison(rec: Record) -> None:
    """A plain ``def`` :func:`record`, except that key ``k0``'s fourth record ends the process
    at once (``os._exit``: no exception, no log line, no drain)."""
    value = rec.json()
    if value["key"] == "k0" and value["seq"] == 3:
        os._exit(POISON_EXIT)
    record_sync(rec)


async def forward(rec: Record) -> Forward:
    """Like :func:`record`, then forwards ``{"p": partition, "o": offset}`` to the output topic."""
    await record(rec)
    return Forward(OutputRecord(json.dumps({"p": rec.partition, "o": rec.offset}).encode()))


def record_sync(rec: Record) -> None:
    """A plain ``def`` :func:`record` for every executor, after ``$LH_DELAY`` seconds of busy
    work. On threads or inline ``epoch`` is the record's assignment, so a rebalance inside a run
    (a session timeout on a loaded machine) is no order violation; a worker process has no
    assignment, so there it is 0: the tests using it run one member per run."""
    delay = float(os.environ.get("LH_DELAY", "0"))
    until = time.perf_counter() + random.random() * delay
    while time.perf_counter() < until:
        pass
    value = rec.json()
    epoch = rec.part.generation if isinstance(rec, TrackedRecord) else 0
    _write(f"{value['key']} {value['seq']} {rec.partition} {rec.offset} {epoch}\n")
