"""Test helpers: bounded waits instead of sleeps, and free loopback ports."""

from __future__ import annotations

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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
