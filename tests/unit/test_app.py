"""The app's ``until_idle``: it stops only on its clients' evidence that nothing is left.

Before: idleness was time without a record. Under the full suite's load a Pulsar kill test's
final run stopped with 4,752 records unread (committed short of the end, so read by the next
run, but the run called itself done), and a landing test stopped after 100 of 3,100: a source
thread that has not polled, starved of CPU or not yet back from a resume, delivers nothing
for a while with records waiting.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from consumers import ConsumerApp, RunnerSettings, Workload
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.engine.liveness import QuietPolls
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "events"
IDLE = 0.3


class GatedConsumer:
    """A memory consumer whose polls can be held at their start, as a starved thread's are."""

    def __init__(self, inner: MemoryConsumer) -> None:
        self._inner = inner
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        if self.hold.is_set():
            self.held.set()
            self.release.wait()
        return self._inner.consume(num_messages, timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def produce(broker: MemoryBroker, start: int, count: int) -> None:
    for i in range(start, start + count):
        broker.produce(TOPIC, str(i).encode(), f"k{i % 10}".encode())


async def test_a_source_that_cannot_poll_is_not_idle() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, 1)
    produce(broker, 0, 100)
    made: list[GatedConsumer] = []

    def factory(on_commit: Any) -> GatedConsumer:
        made.append(GatedConsumer(broker.consumer("g", on_commit)))
        return made[-1]

    handled: list[bytes] = []
    settings = RunnerSettings(name="idle", commit_interval=0.05, drain_timeout=2.0)
    app = ConsumerApp([Workload(settings, lambda r: handled.append(r.value), [TOPIC], factory)])
    run = asyncio.ensure_future(app.run(until_idle=IDLE))
    await until(lambda: len(handled) == 100, what="the first 100 records handled")

    client = made[0]
    client.hold.set()
    await until(client.held.is_set, what="the source thread held at a poll")
    produce(broker, 100, 100)
    # Well past the idle time with no record and no work: only the client's silence is missing.
    # (A stop that began would hang on the held thread, so ask whether one began.)
    done, _ = await asyncio.wait({run}, timeout=IDLE * 5)
    assert not done and app._running, "the app called itself idle while its source was held"

    client.hold.clear()
    client.release.set()
    await run
    assert len(handled) == 200
    assert broker.committed_offsets("g", TOPIC) == [200]


def test_only_consecutive_empty_polls_count_as_quiet() -> None:
    quiet = QuietPolls()
    assert quiet.quiet_for(0.0) == 0.0
    quiet.polled(1.0, 1.5, empty=True)
    quiet.polled(1.5, 2.0, empty=True)
    assert quiet.quiet_for(0.0) == 1.0
    assert quiet.quiet_for(1.75) == 0.25  # counted from the last busy moment
    assert quiet.quiet_for(3.0) == 0.0  # nothing polled since
    quiet.polled(2.0, 2.1, empty=False)  # a record, or a partition paused at the client
    assert quiet.quiet_for(0.0) == 0.0
    quiet.polled(2.1, 2.2, empty=True)
    assert quiet.quiet_for(0.0) == pytest.approx(0.1)


async def test_an_app_with_no_workload_left_is_idle_at_once() -> None:
    """Every workload removed (or retired): nothing can be waiting, so ``until_idle`` ends the
    run. Before, its own ``max()`` over no runner raised."""
    summaries = await asyncio.wait_for(ConsumerApp([]).run(until_idle=IDLE), timeout=IDLE * 20)
    assert summaries == []
