"""Test helpers: bounded waits instead of sleeps (one rule for every test), and free loopback
ports."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object],
    timeout: float,
    interval: float = 0.01,
    message: str = "",
) -> None:
    """Poll ``predicate`` every ``interval`` s until it is truthy; fail after ``timeout`` s.

    The predicate is always evaluated once more at the deadline, so a slow machine that wakes
    late does not fail a condition that has become true.
    """
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    if predicate():
        return
    raise AssertionError(f"condition not met within {timeout:.2f} s: {message or predicate!r}")


async def until(
    predicate: Callable[[], object],
    within: float = 20.0,
    what: str = "",
    *,
    in_thread: bool = False,
) -> None:
    """:func:`wait_until` for a test on the event loop: the loop keeps running the engine.

    The predicate runs on the loop (yielding in between: pure-loop progress needs only yields,
    thread completions need real time), or with ``in_thread`` in a worker thread, for a
    predicate that blocks (an HTTP request to a server that itself needs the loop).
    """
    if in_thread:
        await asyncio.to_thread(wait_until, predicate, within, 0.01, what)
        return
    deadline = time.monotonic() + within
    spins = 0
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s: {what or predicate!r}")
        spins += 1
        await asyncio.sleep(0 if spins < 200 else 0.001)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
