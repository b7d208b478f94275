"""While the loop cannot take another batch, the source still reads its partitions' ends.

Before: the source thread skipped the watermark refresh while its handoff was full. A slow
handler keeps it full for as long as a backlog lasts, so the runner kept the ends of its first
polls until the backlog drained, and its reports and lag checks judged by them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial

import pytest

from consumers import ConsumerApp, RunnerSettings, Workload
from consumers.backends.base import CommitResult, PartitionKey, PlainMessage
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.engine.source import MAX_HANDOFF_BATCHES, WATERMARK_REFRESH_SECONDS
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "events"


class Logged(MemoryConsumer):
    """Logs the records each poll delivered and each end it was asked for, from its thread."""

    delivered: list[int]
    ends: list[tuple[PartitionKey, int]]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[PlainMessage]:
        out = super().consume(num_messages, timeout)
        if out:
            self.delivered.append(len(out))
        return out

    def high_watermark(self, part: PartitionKey) -> int:
        end = super().high_watermark(part)
        self.ends.append((part, end))
        return end


def blocking_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait on ``condition`` without yielding to the loop (the loop is what is held here)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


async def test_a_held_handoff_still_reads_the_partitions_ends() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, 2)
    delivered: list[int] = []
    ends: list[tuple[PartitionKey, int]] = []

    def factory(on_commit: CommitResult) -> Logged:
        consumer = Logged(broker, "g", on_commit)
        consumer.delivered, consumer.ends = delivered, ends
        return consumer

    app = ConsumerApp(
        [Workload(RunnerSettings(name="held", drain_timeout=5.0), lambda r: None, [TOPIC], factory)]
    )
    run = asyncio.ensure_future(app.run())
    await until(lambda: "held" in app.sources and bool(app.sources["held"].assigned), 10)

    # The loop is held from here: each poll's batch waits for it, until the handoff is full.
    for n in range(1, MAX_HANDOFF_BATCHES + 1):
        broker.produce(TOPIC, b"v", b"k", partition=0)
        blocking_until(partial(lambda n: len(delivered) >= n, n), 10, f"batch {n} polled")
    broker.produce(TOPIC, b"v", b"k", partition=1)  # not polled: the source cannot post it
    asked = len(ends)
    blocking_until(
        lambda: ((TOPIC, 1), 1) in ends[asked:],
        WATERMARK_REFRESH_SECONDS * 5,
        "the new end of partition 1 read while the handoff was full",
    )
    assert len(delivered) == MAX_HANDOFF_BATCHES, f"polled while held: {delivered}"

    app.request_stop()
    await run
