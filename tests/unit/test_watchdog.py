"""The timeout watchdog (``consumers/engine/workers.py``): a call whose thread or worker process
has returned is never timed out, even when the loop has not yet run the callback that hands its
result over.

A starved loop can wake the watchdog before that callback. Cancelling there discarded a result
the handler had already produced, and the record ran again: a clean-clone run's poison test saw
29 records of the thread executor handled twice that way. These tests set that moment up
without running the loop between the call's return and the check.
"""

from __future__ import annotations

import asyncio
import json
import select
import threading
from typing import Any, cast

import pytest

from consumers import Record
from consumers.engine.tracked import TrackedRecord
from consumers.engine.workers import Worker, time_out
from consumers.execution.executors import CallPool, PendingCall
from consumers.execution.processes import ProcessExecutor
from consumers.execution.threads import ThreadExecutor
from tests import executor_handlers as h
from tests.helpers import wait_until

LIMIT = 1.0


async def _result(call: PendingCall) -> Any:
    return await call.future


def running(pool: CallPool, subject: object) -> tuple[Worker, asyncio.Task[Any]]:
    """A worker awaiting ``pool``'s call on ``subject``, started long enough ago to be late,
    and its task."""
    worker = Worker()
    worker.record = cast(TrackedRecord, subject)
    worker.call = pool.submit(subject)
    task = asyncio.ensure_future(_result(worker.call))
    worker.task = cast("asyncio.Task[None]", task)
    worker.started = 0.0
    return worker, task


def returned(pool: ThreadExecutor) -> bool:
    """The thread has queued its result; the loop has not delivered it (it has not run)."""
    return bool(pool._done)


async def test_without_collecting_a_returned_thread_call_would_be_timed_out() -> None:
    """The race itself, as it was: the check cancels a call whose result is already back."""
    pool = ThreadExecutor(lambda n: n * 2, 2, "feed")
    try:
        worker, task = running(pool, 21)
        wait_until(lambda: returned(pool), timeout=10, message="the thread returned")
        assert time_out([worker], LIMIT * 5, LIMIT, lambda: None) == 1
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        pool.close()


async def test_a_thread_call_that_returned_keeps_its_result() -> None:
    pool = ThreadExecutor(lambda n: n * 2, 2, "feed")
    try:
        worker, task = running(pool, 21)
        wait_until(lambda: returned(pool), timeout=10, message="the thread returned")
        assert time_out([worker], LIMIT * 5, LIMIT, pool.collect) == 0
        assert not worker.timed_out
        assert await task == 42
    finally:
        pool.close()


@pytest.mark.parametrize("late", [True, False], ids=["past-its-limit", "within-it"])
async def test_a_thread_call_still_running_is_timed_out_only_past_its_limit(late: bool) -> None:
    release = threading.Event()
    pool = ThreadExecutor(lambda n: release.wait(10), 2, "feed")
    try:
        worker, task = running(pool, 1)
        now = LIMIT * 5 if late else LIMIT / 2
        assert time_out([worker], now, LIMIT, pool.collect) == int(late)
        assert worker.timed_out is late
        release.set()
        if late:
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            assert await task is True
    finally:
        release.set()
        pool.close()


@pytest.mark.timeout(60)  # a reader that blocked on the emptied socket would hang here
async def test_a_worker_process_reply_already_on_its_socket_is_not_timed_out() -> None:
    """The same for ``executor: process``; and a reader the loop woke before the watchdog
    emptied the socket finds nothing to read, not a dead worker."""
    pool = ProcessExecutor(h.work, 1, "feed", 1 << 20)
    try:
        record = Record("t", 0, 0, b"k", json.dumps({"n": 1}).encode())
        worker, task = running(pool, record)
        sock = pool._workers[0].sock
        wait_until(lambda: select.select([sock], [], [], 0)[0], timeout=30, message="replied")
        assert time_out([worker], LIMIT * 5, LIMIT, pool.collect) == 0
        pool._readable(pool._workers[0])  # what that woken reader runs: nothing to read
        assert await task is None
        _, again = running(pool, Record("t", 0, 1, b"k", json.dumps({"n": 2}).encode()))
        assert await asyncio.wait_for(again, 30) is None
        assert [w.process.poll() for w in pool._workers] == [None]
    finally:
        pool.close()
