"""Futures across the source thread and the event loop: the loop's outcome copied into a future
the source thread waits on (a revoke's drain), and the source thread's end told to the loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from consumers.errors import BrokerError


def chain(task: asyncio.Future[Any], result: concurrent.futures.Future[Any]) -> None:
    """Copy an asyncio task's outcome into a future the source thread waits on."""

    def copy(done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            result.cancel()
        elif done.exception() is not None:
            result.set_exception(done.exception())
        else:
            result.set_result(done.result())

    task.add_done_callback(copy)


def set_result(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def set_exception(future: asyncio.Future[None], exc: BaseException) -> None:
    """Fail ``future`` once; a ``BaseException`` from the thread becomes a
    :class:`~consumers.errors.BrokerError` (the loop must not re-raise a ``SystemExit``)."""
    if not future.done():
        if not isinstance(exc, Exception):
            exc = BrokerError(f"source thread stopped: {exc!r}")
        future.set_exception(exc)
