"""How the engine's process runs: its event loop (uvloop where installed) and its garbage collector.

Why uvloop: a worker waiting in ``asyncio.sleep`` or on I/O is woken by a timer. asyncio's
default loop rounds every timer up to epoll's millisecond and walks a heap of Python timer
objects, so a 20 ms wait takes about 21.7 ms (0.92 of Little's bound with nothing else running);
uvloop's timers (libuv, in C) wake on time (0.97). ``LANEHOUSE_EVENT_LOOP=asyncio`` opts out,
for a handler library that insists on the default loop.

Why the collector is tuned: records stream through by the hundred thousand a second, and every
allocation counts towards CPython's next generation-0 collection (every 700), which also walks
the thousands of buffered records. Measured on the no-op path, collections took about half the
engine's CPU. So :func:`run` collects once, freezes what start-up created (imports, settings:
never garbage, never walked again) and collects generation 0 every 50,000 allocations. Records
hold no reference cycles, so reference counting still frees each one at once.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

T = TypeVar("T")

#: The environment variable that picks the loop: ``uvloop`` (default when installed) or ``asyncio``.
ENV = "LANEHOUSE_EVENT_LOOP"
#: ``gc.set_threshold`` while the engine runs (CPython's default is 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 10)


def loop_kind() -> Literal["uvloop", "asyncio"]:
    """Which loop :func:`run` uses; a clear error for an unknown or missing choice."""
    wanted = os.environ.get(ENV, "").strip().lower()
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    if wanted in ("", "uvloop"):
        if has_uvloop:
            return "uvloop"
        if wanted:
            raise RuntimeError(f"{ENV}=uvloop, but uvloop is not installed (pip install uvloop)")
        return "asyncio"
    if wanted == "asyncio":
        return "asyncio"
    raise RuntimeError(f"{ENV} must be 'uvloop' or 'asyncio', not {wanted!r}")


@contextmanager
def tuned_gc() -> Iterator[None]:
    """Freeze start-up's objects and collect less often (see the module docstring); restore
    the collector afterwards, for a process that goes on (tests, ``lanehouse demo``)."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the loop :func:`loop_kind` picks, inside :func:`tuned_gc`."""
    kind = loop_kind()
    with tuned_gc():
        if kind == "uvloop":
            import uvloop

            return uvloop.run(main)
        return asyncio.run(main)
