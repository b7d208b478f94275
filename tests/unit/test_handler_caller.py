"""Where ``HandlerCaller`` runs a plain ``def`` under ``executor: auto``: on threads until the
handler has proven fast, then inline on the loop's thread, and back on threads after a slow call
(the decisions themselves are tested in test_inline_gate.py; here, that the caller follows them)."""

from __future__ import annotations

import threading
import time

import pytest

from consumers import Record
from consumers.clock import RealClock
from consumers.engine.caller import HandlerCaller
from consumers.engine.counters import WorkloadCounters
from consumers.engine.workers import Worker
from consumers.execution.inline import LIMIT, PROVE_CALLS

pytestmark = pytest.mark.unit


class Recorder:
    """A plain def handler that notes the thread each call ran on; ``slow`` offsets block."""

    def __init__(self, slow: set[int]) -> None:
        self.threads: list[str] = []
        self.slow = slow

    def __call__(self, rec: Record) -> int:
        self.threads.append(threading.current_thread().name)
        if rec.offset in self.slow:
            time.sleep(LIMIT * 1.5)
        return rec.offset


async def test_a_fast_handler_moves_inline_and_a_slow_call_sends_it_back_to_threads() -> None:
    slow_at = PROVE_CALLS * 3  # room for a streak reset by a stray pause on a busy machine
    handler = Recorder({slow_at})
    caller = HandlerCaller("w", handler, 4, 5.0, (), WorkloadCounters(), RealClock())
    loop_thread = threading.current_thread().name
    try:
        for offset in range(slow_at + 5):
            # (result, error): the Recorder's offset passes through, not a typed outcome
            got: tuple[object, object] = await caller.call(
                Worker(), Record("t", 0, offset, b"k", b"v")
            )
            assert got == (offset, None)
    finally:
        caller.close()

    where = ["loop" if name == loop_thread else "thread" for name in handler.threads]
    promoted = where.index("loop")
    assert set(where[:promoted]) == {"thread"} and promoted >= PROVE_CALLS  # proving itself
    assert set(where[promoted : slow_at + 1]) == {"loop"}  # inline, the slow call included
    assert set(where[slow_at + 1 :]) == {"thread"}  # demoted, on probation
    assert caller.gate is not None and caller.gate.demotions == 1


async def test_executor_thread_keeps_every_call_off_the_loop() -> None:
    handler = Recorder(set())
    caller = HandlerCaller("w", handler, 4, 5.0, (), WorkloadCounters(), RealClock(), "thread")
    try:
        for offset in range(PROVE_CALLS * 2):
            await caller.call(Worker(), Record("t", 0, offset, b"k", b"v"))
    finally:
        caller.close()
    assert caller.gate is None
    assert threading.current_thread().name not in handler.threads
