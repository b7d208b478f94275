"""A workload's snapshot (``/metrics`` and the Dagster reports) never shows a commit position
past the log end: the client's cached end lags the records it has read, so the snapshot raises
the end to what the client has provably read."""

from __future__ import annotations

import asyncio

import pytest

from consumers import ConsumerApp, Record, RunnerSettings, Workload
from consumers.backends.base import CommitResult, PartitionKey
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.service.metrics import workload_snapshot
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


class CachedEnd(MemoryConsumer):
    """A client whose cached log end is whatever the test says (librdkafka's is refreshed with
    each fetch response and statistics interval, so it trails what was just read)."""

    end = 47  # the test changes it on the instance

    def high_watermark(self, part: PartitionKey) -> int:
        return self.end


def test_committed_never_exceeds_end_when_the_cached_end_is_stale() -> None:
    """Before: the orders page showed ``committed 104, end 103`` (the end cached a moment
    before the last records were read)."""
    broker = MemoryBroker()
    broker.create_topic("events", 1)
    for i in range(50):
        broker.produce("events", b"v", b"k%d" % i)
    handled: list[int] = []

    def handler(record: Record) -> None:
        handled.append(record.offset)

    clients: list[CachedEnd] = []

    def factory(on_commit: CommitResult) -> CachedEnd:
        clients.append(CachedEnd(broker, "g", on_commit))
        return clients[-1]

    app = ConsumerApp([Workload(RunnerSettings(name="w"), handler, ["events"], factory)])

    async def scenario() -> None:
        run = asyncio.ensure_future(app.run())
        await until(lambda: len(handled) == 50, 10, "every record handled")
        [part] = app.runners["w"].partitions()
        await until(lambda: part.tracker.position == 50, 10, "the position at the end")
        # The end was cached before the last three records were read.
        await until(lambda: part.high_watermark == 47, 10, "the cached end")
        [snap] = workload_snapshot(app, "w", app.clock.now()).partitions
        assert (snap.committed, snap.end, snap.lag) == (50, 50, 0)
        clients[0].end = 60  # records the client has not read yet
        await until(lambda: part.high_watermark == 60, 10, "the new cached end")
        [snap] = workload_snapshot(app, "w", app.clock.now()).partitions
        assert (snap.committed, snap.end, snap.lag) == (50, 60, 10)
        app.request_stop()
        await run

    asyncio.run(scenario())


class NoPositionYet(MemoryConsumer):
    """A client with no position before it delivers a record: librdkafka's ``position()`` is
    -1001 until then (checked on Tansu), so an idle partition's never becomes known."""

    def positions(self, parts: list[PartitionKey]) -> dict[PartitionKey, int]:
        return {}


def test_a_partition_with_nothing_delivered_reports_its_lag_from_the_committed_offset() -> None:
    """Before: its lag and committed position stayed unknown (-1 in the run's partition table)
    for as long as nothing new came, on a workload that was fully caught up."""
    broker = MemoryBroker()
    broker.create_topic("events", 2)
    for _ in range(5):
        broker.produce("events", b"v", b"k", partition=0)
        broker.produce("events", b"v", b"k", partition=1)
    broker.alter_offsets("g", [("events", 0, 5), ("events", 1, 3)])  # partition 1: 2 behind
    handled: list[tuple[int, int]] = []
    app = ConsumerApp(
        [
            Workload(
                RunnerSettings(name="w"),
                lambda r: handled.append((r.partition, r.offset)),
                ["events"],
                lambda on_commit: NoPositionYet(broker, "g", on_commit),
            )
        ]
    )

    async def scenario() -> None:
        run = asyncio.ensure_future(app.run())
        await until(lambda: len(handled) == 2, 10, "partition 1's two records handled")
        parts = {p.partition: p for p in app.runners["w"].partitions()}
        await until(lambda: parts[0].high_watermark == 5, 10, "partition 0's end")
        snaps = {p.partition: p for p in workload_snapshot(app, "w", app.clock.now()).partitions}
        assert (snaps[0].committed, snaps[0].end, snaps[0].lag) == (5, 5, 0)
        assert (snaps[1].committed, snaps[1].end, snaps[1].lag) == (5, 5, 0)
        app.request_stop()
        await run

    asyncio.run(scenario())
