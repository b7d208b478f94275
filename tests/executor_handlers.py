"""Plain ``def`` handlers for the executor contract: module-level, so worker processes import
them by name, and deciding only from the record, so they behave alike in a thread, inline on
the loop and in another process. Order and outcomes are checked in the consumer, around them
(:class:`OrderCheck`)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

#: ``work`` fails the first attempt of every record at offset % FAIL_EVERY == FAIL_AT.
FAIL_EVERY, FAIL_AT = 7, 3
POISON = b"poison"
SLOW_OFFSET, SLOW_SECONDS = 5, 1.5


def work(rec: Any) -> None:
    """Parse the value; fail the first attempt of some records."""
    json.loads(rec.value)
    if rec.offset % FAIL_EVERY == FAIL_AT and rec.attempts == 0:
        raise RuntimeError(f"first attempt of {rec.partition}@{rec.offset}")


def poison(rec: Any) -> None:
    """Every record of the poison key fails, with its own exception type."""
    if rec.key == POISON:
        raise ValueError("poison pill")


def exits(rec: Any) -> None:
    """The poison key's records raise what ends a process: ``SystemExit`` for its first,
    ``KeyboardInterrupt`` for its second."""
    if rec.key == POISON:
        raise SystemExit(3) if json.loads(rec.value)["seq"] == 0 else KeyboardInterrupt()


async def exits_async(rec: Any) -> None:
    """:func:`exits` as ``async def``."""
    exits(rec)


def slow_once(rec: Any) -> None:
    """The first attempt of one record runs far past the workload's timeout."""
    if rec.offset == SLOW_OFFSET and rec.attempts == 0:
        time.sleep(SLOW_SECONDS)


def paced(rec: Any) -> None:
    """A few milliseconds a record, so a stop finds records in flight."""
    time.sleep(0.003)


class OrderCheck:
    """An interceptor: a key's records start in ``seq`` order, one at a time, and a failed
    attempt is followed by the same record again, unless it was the last of ``max_attempts``
    (dead-lettered). Runs in the consumer around every call."""

    def __init__(self, max_attempts: int = 3) -> None:
        self.max_attempts = max_attempts
        self.last: dict[bytes | None, int] = {}
        self.active: set[bytes | None] = set()
        self.violations: list[tuple[bytes | None, int, int]] = []
        self.completed: list[bytes] = []

    def before(self, rec: Any) -> None:
        seq = json.loads(rec.value)["seq"]
        expected = self.last.get(rec.key, -1) + 1
        if rec.key in self.active or seq != expected:
            self.violations.append((rec.key, expected, seq))
        self.active.add(rec.key)

    def after(self, rec: Any, outcome: Any, error: Any) -> None:
        self.active.discard(rec.key)
        if error is None or rec.attempts + 1 >= self.max_attempts:
            self.last[rec.key] = json.loads(rec.value)["seq"]
        if error is None:
            self.completed.append(rec.value)


CRASH_OFFSET = 11


def crash_once(rec: Any) -> None:
    """The first attempt of one record kills the process running it (as a segfault or the OOM
    killer would); every other record is parsed."""
    json.loads(rec.value)
    if rec.offset == CRASH_OFFSET and rec.attempts == 0:
        os._exit(3)


def crash_poison(rec: Any) -> None:
    """Every record of the poison key kills the process running it."""
    if rec.key == POISON:
        os._exit(3)


class NeedsTwo(Exception):
    """Pickles as ``NeedsTwo(a)`` (its ``args``), so loading it back fails: a classic of user
    code, here as a handler's return value."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(a)
        self.b = b


def unreadable_poison(rec: Any) -> object:
    """The poison key's records return a value the consumer cannot unpickle; the others parse."""
    if rec.key == POISON:
        return NeedsTwo(1, 2)
    json.loads(rec.value)
    return None
