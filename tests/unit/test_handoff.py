"""``consumers/engine/handoff.py``: outcomes across the source thread and the event loop.

A revoke's drain runs on the loop while the source thread waits on a plain future; the source
thread's end reaches the loop as a failed future. Whatever the outcome, the waiting side sees it
once, and a ``SystemExit`` from a handler on the thread never re-raises inside the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from consumers import BrokerError
from consumers.engine.handoff import chain, set_exception, set_result


async def _copied(outcome: str) -> concurrent.futures.Future[object]:
    result: concurrent.futures.Future[object] = concurrent.futures.Future()

    async def drain() -> object:
        await asyncio.sleep(0)
        if outcome == "raise":
            raise KeyError("partition gone")
        if outcome == "cancel":
            raise asyncio.CancelledError
        return 42

    task = asyncio.ensure_future(drain())
    chain(task, result)
    await asyncio.wait([task])
    return result


async def test_a_drain_result_reaches_the_waiting_thread() -> None:
    assert (await _copied("return")).result(timeout=0) == 42


async def test_a_drain_failure_reaches_it_as_the_same_exception() -> None:
    with pytest.raises(KeyError, match="partition gone"):
        (await _copied("raise")).result(timeout=0)


async def test_a_cancelled_drain_cancels_the_wait_instead_of_hanging_it() -> None:
    result = await _copied("cancel")
    assert result.cancelled()


async def test_the_source_threads_end_is_told_once() -> None:
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    set_exception(ended, RuntimeError("client closed"))
    set_exception(ended, RuntimeError("later"))  # the first outcome stays
    set_result(ended)
    with pytest.raises(RuntimeError, match="client closed"):
        ended.result()


async def test_a_system_exit_on_the_thread_becomes_a_broker_error_on_the_loop() -> None:
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    set_exception(ended, SystemExit(3))
    error = ended.exception()
    assert isinstance(error, BrokerError) and "SystemExit(3)" in str(error)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    set_result(done)
    set_result(done)  # once: a second call does not raise InvalidStateError
    assert done.result() is None
