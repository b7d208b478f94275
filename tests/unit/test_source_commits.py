"""The source thread never sends a commit planned for an earlier assignment of a partition.

A fast rebalance can revoke a partition and assign it back within one poll while another member
consumed and committed further in between. An asynchronous commit the runner queued before the
revoke is then stale: sent after the re-assignment, it would move the group's position back
(records handled again after the next restart, and every lag monitor reading a jump back)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from consumers import (
    BrokerError,
    ConsumerApp,
    FinalCommitFailed,
    MessageLike,
    Record,
    RunnerSettings,
    Workload,
)
from consumers.backends.base import (
    NO_OFFSET,
    CommitOffset,
    CommitResult,
    PartitionKey,
    PlainMessage,
    Rebalance,
)
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.engine.commands import PlannedCommit, SourceCommands
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]

PART = ("events", 0)
RECORDS = 10
#: Where the other member left the group's position while the partition was away.
FURTHER = 50


class ReassignedAtOnce:
    """One member of a group with one partition: it hands out ``RECORDS`` records; the poll
    during which the engine queues a commit of them revokes the partition and assigns it back,
    with the other member's further commit in between. Every commit is logged in order."""

    def __init__(self, commit_queued: threading.Event) -> None:
        self.commit_queued = commit_queued
        self.position = NO_OFFSET
        self.log: list[tuple[int, str]] = []  # (offset, "sync" | "async")
        self.reassigned = threading.Event()
        #: The thread is inside a poll after the first: a command queued now waits behind it.
        self.polling = threading.Event()
        self._callbacks: dict[str, Rebalance] = {}
        self._polls = 0

    def subscribe(
        self,
        topics: list[str],
        *,
        on_assign: Rebalance,
        on_revoke: Rebalance,
        on_lost: Rebalance,
    ) -> None:
        self._callbacks = {"assign": on_assign, "revoke": on_revoke}

    def consume(self, num_messages: int, timeout: float) -> Sequence[MessageLike]:
        self._polls += 1
        if self._polls == 1:
            self._callbacks["assign"]([PART])
            return [
                PlainMessage(*PART, offset, b"k%d" % offset, b"v", None, 1000 + offset)
                for offset in range(RECORDS)
            ]
        self.polling.set()
        # Long enough for the runner to queue its commit while this poll is under way (it cannot
        # be sent before the revoke then); a commit never queued fails the test below.
        if not self.reassigned.is_set() and self.commit_queued.wait(10):
            self._callbacks["revoke"]([PART])
            self.position = FURTHER  # another member's commit while this one rejoins
            self._callbacks["assign"]([PART])
            self.reassigned.set()
            return []
        time.sleep(timeout)
        return []

    def commit(self, offsets: list[CommitOffset], asynchronous: bool) -> None:
        for _, _, offset, _ in offsets:
            self.position = offset
            self.log.append((offset, "async" if asynchronous else "sync"))

    def committed(self, parts: list[PartitionKey], timeout: float) -> list[CommitOffset]:
        return [(*PART, self.position, "")]

    def pause(self, parts: list[PartitionKey]) -> None:
        pass

    def resume(self, parts: list[PartitionKey]) -> None:
        pass

    def seek(self, part: PartitionKey, offset: int) -> None:
        pass

    def high_watermark(self, part: PartitionKey) -> int:
        return FURTHER

    def low_watermark(self, part: PartitionKey) -> int:
        return -1  # unknown (nothing is set back here)

    def positions(self, parts: list[PartitionKey]) -> dict[PartitionKey, int]:
        return {}

    def close(self) -> None:
        pass


def test_a_commit_queued_before_a_fast_reassignment_never_moves_the_position_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commit_queued = threading.Event()
    queue_commit = SourceCommands.commit

    def queued(self: SourceCommands, planned: list[PlannedCommit], asynchronous: bool) -> None:
        queue_commit(self, planned, asynchronous)
        if any(offset == RECORDS for (_, _, offset, _), _ in planned):
            commit_queued.set()

    monkeypatch.setattr(SourceCommands, "commit", queued)
    consumer = ReassignedAtOnce(commit_queued)

    def factory(on_commit: CommitResult) -> ReassignedAtOnce:
        return consumer

    async def handler(record: Record) -> None:
        # Completed (and so planned for a commit) only once the thread waits in a poll.
        await asyncio.get_running_loop().run_in_executor(None, consumer.polling.wait)

    settings = RunnerSettings(name="reassigned", commit_interval=0.02, drain_timeout=5.0)
    app = ConsumerApp([Workload(settings, handler, ["events"], factory)])

    async def scenario() -> None:
        run = asyncio.ensure_future(app.run())
        await until(consumer.reassigned.is_set, 10, "revoked and assigned back")
        polls = consumer._polls
        await until(lambda: consumer._polls >= polls + 3, 10, "later polls")
        app.request_stop()
        await run

    asyncio.run(scenario())
    assert consumer.reassigned.is_set(), "no commit was queued during the poll"
    # The revoke's commit came first: the queued one was never sent before it.
    assert consumer.log[0] == (RECORDS, "sync"), consumer.log
    after = consumer.log[consumer.log.index((RECORDS, "sync")) + 1 :]
    assert consumer.position == FURTHER, f"the position went back: commits {consumer.log}"
    assert after == [], f"commits sent after the revoke's: {after}"


class GoneAtTheEnd(MemoryConsumer):
    """A member whose broker goes away before the stop's synchronous commit (a terminal's
    Ctrl-C that reached the broker too): asynchronous commits work, the last one is refused."""

    def commit(self, offsets: list[CommitOffset], asynchronous: bool = True) -> None:
        if not asynchronous:
            raise BrokerError("commit failed: KafkaError{code=_WAIT_COORD}")
        super().commit(offsets, asynchronous)


def test_a_stop_whose_final_commit_fails_is_a_failure_not_a_clean_stop() -> None:
    """Before: the stop returned its summaries as a clean one ("drained and committed") and the
    run under Dagster ended SUCCESS, with one failed commit hidden in a counter."""
    broker = MemoryBroker()
    broker.create_topic("events", 2)
    for i in range(200):
        broker.produce("events", b"v", b"k%d" % (i % 10))
    handled: list[int] = []

    def handler(record: Record) -> None:
        handled.append(record.offset)

    def factory(on_commit: CommitResult) -> GoneAtTheEnd:
        return GoneAtTheEnd(broker, "g", on_commit)

    settings = RunnerSettings(name="gone", commit_interval=0.02, drain_timeout=5.0)
    app = ConsumerApp([Workload(settings, handler, ["events"], factory)])

    async def scenario() -> None:
        run = asyncio.ensure_future(app.run())
        await until(lambda: len(handled) == 200, 10, "every record handled")
        app.request_stop()
        with pytest.raises(FinalCommitFailed) as failed:
            await run
        assert failed.value.workload == "gone"
        assert "_WAIT_COORD" in str(failed.value) and "none lost" in str(failed.value)

    asyncio.run(scenario())


class FirstCommitsFail(MemoryConsumer):
    """A member whose asynchronous commits fail until ``healthy`` is set (a coordinator that
    moved): each failure reaches ``on_commit`` at the next poll, as the client reports it."""

    def __init__(self, broker: MemoryBroker, on_commit: CommitResult) -> None:
        super().__init__(broker, "g", on_commit)
        self.healthy = threading.Event()
        self.failures = 0
        self._failed_now = False

    def commit(self, offsets: list[CommitOffset], asynchronous: bool = True) -> None:
        if asynchronous and not self.healthy.is_set():
            self.failures += 1
            self._failed_now = True
            return
        super().commit(offsets, asynchronous)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[PlainMessage]:
        if self._failed_now:
            self._failed_now = False
            assert self._on_commit is not None
            self._on_commit("commit failed: KafkaError{code=NOT_COORDINATOR}")
        return super().consume(num_messages, timeout)


def test_a_failed_commit_is_sent_again_though_nothing_new_arrives() -> None:
    """Before: the planner remembered a position as sent when it planned it, so a failed
    asynchronous commit of an idle partition was never sent again: the group's position stayed
    behind (lag that never drains, records handled again after a restart) until new records
    moved the position."""
    broker = MemoryBroker()
    broker.create_topic("events", 1)
    for i in range(50):
        broker.produce("events", b"v", b"k%d" % (i % 5))
    handled: list[Record] = []
    consumers: list[FirstCommitsFail] = []

    def factory(on_commit: CommitResult) -> FirstCommitsFail:
        consumers.append(FirstCommitsFail(broker, on_commit))
        return consumers[-1]

    settings = RunnerSettings(name="retried", commit_interval=0.02, drain_timeout=5.0)
    app = ConsumerApp([Workload(settings, handled.append, ["events"], factory)])

    def position() -> int:
        [(_, _, offset, _)] = consumers[0].committed([("events", 0)])
        return offset

    async def scenario() -> None:
        run = asyncio.ensure_future(app.run())
        await until(lambda: len(handled) == 50, 10, "every record handled")
        await until(lambda: consumers[0].failures >= 1, 10, "a commit failed")
        consumers[0].healthy.set()  # the coordinator is back; no record arrives any more
        await until(lambda: position() == 50, 10, f"position {position()} reaches 50")
        app.request_stop()
        await run

    asyncio.run(scenario())
