"""The thread pool of plain ``def`` handlers (``consumers/execution/threads.py``): it tells the
user, once, when it runs so many threads that one interpreter stops scaling."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from consumers.execution.threads import CROWDED, ThreadExecutor


def crowded(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "stop scaling" in r.getMessage()]


async def test_the_pool_says_once_when_it_runs_a_crowd_of_threads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    pool = ThreadExecutor(lambda subject: release.wait(10), CROWDED + 20, "feed")
    calls = []
    try:
        with caplog.at_level(logging.WARNING, logger="lanehouse.engine"):
            calls += [pool.submit(n) for n in range(CROWDED - 1)]  # each blocks: a thread each
            assert crowded(caplog) == []
            calls += [pool.submit(n) for n in range(21)]
        release.set()
        await asyncio.gather(*(call.future for call in calls))
    finally:
        release.set()
        pool.close()
    [said] = crowded(caplog)
    assert said.startswith(f"workload feed: {CROWDED} threads run its plain def handler")
    assert "async def" in said and "replicas" in said
