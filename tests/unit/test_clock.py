"""``first_of``: the first awaitable to finish ends the wait, and a failure is not a finish."""

from __future__ import annotations

import asyncio

import pytest

from consumers.clock import first_of

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


async def test_the_first_to_finish_ends_the_wait_and_the_others_are_cancelled() -> None:
    slow = asyncio.ensure_future(asyncio.sleep(60))  # watched: someone else's future
    started: list[str] = []

    async def forever() -> None:
        started.append("forever")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            started.append("cancelled")
            raise

    await first_of(asyncio.sleep(0.01), forever(), slow)
    await asyncio.sleep(0)  # the cancelled coroutine runs to its end
    assert started == ["forever", "cancelled"]
    assert not slow.done(), "a future passed in belongs to its owner: never cancelled"
    slow.cancel()


async def test_a_coroutine_that_fails_raises_its_error() -> None:
    """Before, the wait returned as if the coroutine had finished: the app's ``until_idle``
    then stopped the run on its own error (an empty app's ``max()`` of nothing)."""

    async def broken() -> None:
        raise ZeroDivisionError("the watch failed")

    with pytest.raises(ZeroDivisionError, match="the watch failed"):
        await first_of(broken(), asyncio.sleep(60))


async def test_a_watched_future_that_fails_is_left_to_its_owner() -> None:
    failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    failed.set_exception(RuntimeError("the owner's to read"))
    await first_of(failed, asyncio.sleep(60))
    assert isinstance(failed.exception(), RuntimeError)
