"""An idle client is polled for one record at a time, with a longer wait.

librdkafka's batch poll waits its whole timeout unless the batch fills, so polling an idle
workload in 50 ms batches woke it 20 times a second and held its first record for 50 ms: 200
idle workloads of a host cost 0.92 of this machine's 2 cores. Polled for one record, the client
returns as soon as it has one; the next poll is a batch poll again."""

from __future__ import annotations

import asyncio

import pytest

from consumers import ConsumerApp, Record, RunnerSettings, Workload
from consumers.backends.base import CommitResult, PlainMessage
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from consumers.engine.liveness import IDLE_POLL_SECONDS
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


def test_an_idle_client_is_polled_for_one_record_and_delivers_it_at_once() -> None:
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
        broker.produce("events", b"v", b"k")
        await until(lambda: handled == [0], 10, "the record handled")
        await until(lambda: idle_polls() >= 3, 10, "idle again")
        app.request_stop()
        await run

    asyncio.run(scenario())
    delivering = [(asked, timeout) for asked, timeout, offsets in polls if offsets]
    assert delivering == [IDLE], f"the record came from a batch poll: {polls}"
    after = polls[next(i for i, p in enumerate(polls) if p[2]) + 1]
    assert after[:2] != IDLE, f"the poll after a record was not a batch poll: {polls}"
    batch = [(asked, timeout) for asked, timeout, _ in polls if (asked, timeout) != IDLE]
    assert batch and all(asked > 1 for asked, _ in batch), polls
