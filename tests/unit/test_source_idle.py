"""An idle client is polled for one record at a time, with a longer wait.

librdkafka's batch poll waits its whole timeout unless the batch fills, so polling an idle
workload in 50 ms batches woke it 20 times a second and held its first record for 50 ms: 200
idle workloads in host runs cost 0.92 of this machine's 2 cores. Polled for one record, the
client returns as soon as it has one, and a batch poll follows at once: the two are posted as
one batch, so a first batch holds what arrives with it (records posted one by one ended a
crash's suspect window early, when windows still ended as their lane emptied, and the suite's
crash faults died six times instead of four)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from consumers import ConsumerApp, MessageLike, Record, RunnerSettings, Workload
from consumers.backends.base import CommitResult, PartitionKey, PlainMessage
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.engine.liveness import IDLE_AFTER_SECONDS, IDLE_POLL_SECONDS, QuietPolls
from consumers.engine.runner import WorkloadRunner
from tests.helpers import until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

IDLE = (1, IDLE_POLL_SECONDS)


class Logged(MemoryConsumer):
    """Logs each poll as (messages asked, timeout, offsets delivered)."""

    polls: list[tuple[int, float, list[int]]]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[PlainMessage]:
        out = super().consume(num_messages, timeout)
        self.polls.append((num_messages, timeout, [m.offset() for m in out]))
        return out


def test_an_idle_client_is_polled_for_one_record_and_posts_it_with_what_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ingested: list[list[int | None]] = []
    ingest = WorkloadRunner.ingest

    def logged(self: WorkloadRunner, messages: list[MessageLike]) -> None:
        ingested.append([m.offset() for m in messages])
        ingest(self, messages)

    monkeypatch.setattr(WorkloadRunner, "ingest", logged)
    broker = MemoryBroker()
    broker.create_topic("events", 1)
    polls: list[tuple[int, float, list[int]]] = []
    handled: list[int] = []

    def factory(on_commit: CommitResult) -> Logged:
        consumer = Logged(broker, "g", on_commit)
        consumer.polls = polls
        return consumer

    def handler(record: Record) -> None:
        handled.append(record.offset)

    settings = RunnerSettings(name="idle", commit_interval=0.02, drain_timeout=5.0)
    app = ConsumerApp([Workload(settings, handler, ["events"], factory)])

    def idle_polls() -> int:
        return sum(1 for asked, timeout, _ in polls if (asked, timeout) == IDLE)

    async def scenario() -> None:
        run = asyncio.ensure_future(app.run())
        await until(lambda: idle_polls() >= 1, 10, "a poll of an idle client")
        with broker._lock:  # the three arrive at once (a reentrant lock the client waits on)
            for _ in range(3):
                broker.produce("events", b"v", b"k")
        await until(lambda: handled == [0, 1, 2], 10, "the records handled")
        await until(lambda: idle_polls() >= 3, 10, "idle again")
        app.request_stop()
        await run

    asyncio.run(scenario())
    woke = next(i for i, p in enumerate(polls) if p[2])
    assert polls[woke][:2] == IDLE, f"the first record came from a batch poll: {polls}"
    assert polls[woke + 1][:2] != IDLE, f"no batch poll followed the idle one: {polls}"
    assert ingested == [[0, 1, 2]], f"the records were not posted as one batch: {ingested}"
    batch = [(asked, timeout) for asked, timeout, _ in polls if (asked, timeout) != IDLE]
    assert batch and all(asked > 1 for asked, _ in batch), polls


class Rebalanced:
    """Delivers one record to the idle poll; the batch poll after it runs ``during`` (the
    rebalance callbacks librdkafka serves inside a poll) and delivers ``rest``."""

    def __init__(self, during: Callable[[], None], rest: list[PlainMessage]) -> None:
        self.during, self.rest = during, rest
        self.first = PlainMessage("events", 0, 7, b"k", b"v", None, 1000)

    def consume(self, num_messages: int, timeout: float) -> list[PlainMessage]:
        if num_messages == 1:
            return [self.first]
        self.during()
        return self.rest


@pytest.mark.parametrize("reassigned", [False, True])
def test_a_woken_record_whose_assignment_ended_in_the_next_poll_is_not_posted(
    reassigned: bool,
) -> None:
    """Its revoke was posted inside that poll, before it: posted after, it would reach the
    next assignment of its partition (which reads it again from the committed position)."""
    quiet = QuietPolls()
    quiet.polled(0.0, IDLE_AFTER_SECONDS, empty=True)
    assigned: dict[PartitionKey, object] = {("events", 0): object()}
    later = PlainMessage("events", 0, 3, b"k", b"v", None, 1000)

    def rebalance() -> None:
        if reassigned:
            assigned[("events", 0)] = object()  # revoked and assigned back: a new state

    consumer = Rebalanced(rebalance, [later])
    polled = quiet.poll(consumer, 500, 0.05, assigned)  # type: ignore[arg-type]
    offsets = [m.offset() for m in polled]
    assert offsets == ([3] if reassigned else [7, 3]), offsets
