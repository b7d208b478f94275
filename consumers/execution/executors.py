"""Where a handler runs: ``async def`` on the event loop; a plain ``def`` inline, on threads or
in worker processes, as the workload's ``executor`` says.

- ``auto`` (the default): a plain ``def`` runs on threads until it has proven fast, then inline
  on the loop, and back on threads when it stops being fast (:mod:`consumers.execution.inline`).
- ``thread``: always on threads (:mod:`consumers.execution.threads`), for a handler that must never run on
  the loop's thread, however fast it is.
- ``process``: in worker processes (:mod:`consumers.execution.processes`), for CPU-bound work.

A timed-out ``async def`` is cancelled; a timed-out thread cannot be stopped, so its call is
*abandoned* (the record fails at once, its permit is held until the thread returns); a timed-out
process call kills and replaces its worker.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

#: Called with a Record (single mode) or a list of them (batch and unique modes).
Handler = Callable[[Any], Any]

Executor = Literal["auto", "thread", "process"]

#: ``max_handoff_bytes`` default: keys, values and headers of one call sent to a worker process.
MAX_HANDOFF_BYTES = 64 * 1024 * 1024


class PendingCall(Protocol):
    """One call handed to a pool; ``future`` resolves on the loop with the handler's result."""

    future: asyncio.Future[Any]
    #: False while it waits behind other calls (its timeout should not run yet).
    running: bool
    #: Called when it starts running, if it was not running when submitted.
    on_start: Callable[[], None] | None


class CallPool(Protocol):
    """Threads or worker processes running one workload's plain ``def`` handler."""

    abandoned: int

    def submit(self, subject: Any) -> PendingCall: ...

    def collect(self) -> None:
        """Resolve now the futures of calls whose results have come back: the watchdog asks
        before it times a call out, so a call that has returned is never a timeout."""
        ...

    async def abandon(self, call: Any, grace: Callable[[], Awaitable[object]]) -> None:
        """A call timed out: end it, or wait for it at most until ``grace()`` finishes."""
        ...

    def close(self) -> None: ...


def is_async_handler(handler: Handler) -> bool:
    """True for ``async def`` functions and objects whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - we need the bound method itself
    return call is not None and inspect.iscoroutinefunction(call)


def call_problem(handler: Handler) -> str | None:
    """Why ``handler`` cannot handle records, or None. The engine calls it with one positional
    argument (a record; a list of them in batch and unique modes) and awaits an ``async def``'s
    result; a generator's result is neither an outcome nor awaitable, so no record would run."""
    for target in (handler, getattr(handler, "__call__", None)):  # noqa: B004 - the bound method
        if inspect.isasyncgenfunction(target):
            return (
                "is an async generator function (it yields): use async def and return the outcome"
            )
        if inspect.isgeneratorfunction(target):
            return "is a generator function (it yields): return the outcome instead"
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return None  # some builtins have no signature: they cannot be checked, so they pass
    try:
        signature.bind(None)
    except TypeError as exc:
        return (
            "cannot be called with one positional argument (a record; a list of them in batch "
            f"and unique modes): its signature is {signature} ({exc})"
        )
    return None


def check_executor(handler: Handler, executor: Executor) -> str | None:
    """Why ``handler`` cannot run on ``executor``, or None."""
    if executor != "auto" and is_async_handler(handler):
        return (
            f"executor: {executor} runs plain def handlers; this handler is async def and "
            "runs on the event loop (leave executor at auto)"
        )
    return None


def process_problem(handler: Handler) -> str | None:
    """Why worker processes could not receive ``handler`` (it is pickled by reference), or None."""
    try:
        pickle.dumps(handler)
    except Exception as exc:
        name = getattr(handler, "__qualname__", None) or type(handler).__name__
        return (
            "executor: process needs a handler that worker processes can import by name (a "
            f"module-level function, or an instance of a module-level class), but {name!r} "
            f"cannot be pickled: {exc}"
        )
    return None
