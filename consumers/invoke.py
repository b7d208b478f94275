"""Calling user handlers: ``async def`` on the event loop, plain ``def`` on a thread pool.

A worker's handler call can be cancelled by the timeout watchdog. An async handler is cancelled
for real (``CancelledError`` inside it). A thread cannot be stopped, so a timed-out sync call is
*abandoned*: the record counts as failed at once, but the worker keeps its permit until the
thread returns, so abandoned threads can never push a workload past its concurrency cap.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from consumers.record import Record

#: Called with a Record (single mode) or a list of them (batch and unique modes).
Handler = Callable[[Any], Any]


def is_async_handler(handler: Handler) -> bool:
    """True for ``async def`` functions and objects whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - we need the bound method itself
    return call is not None and inspect.iscoroutinefunction(call)


class SyncInvoker:
    """Runs a sync handler on a bounded thread pool; tracks abandoned (timed-out) calls."""

    def __init__(self, handler: Handler, max_threads: int, name: str) -> None:
        self._handler = handler
        self._executor = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix=name)
        self.abandoned = 0

    def submit(self, subject: Record | list[Record]) -> Future[Any]:
        return self._executor.submit(self._handler, subject)

    async def finish_abandoned(self, pending: Future[Any]) -> None:
        """Wait for a timed-out call's thread to return, holding the caller's permit."""
        self.abandoned += 1
        try:
            await asyncio.wrap_future(pending)
        except Exception:
            pass
        finally:
            self.abandoned -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
