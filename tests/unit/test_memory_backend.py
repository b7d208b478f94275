"""The in-memory broker keeps the Kafka contract the engine relies on: offsets, holes, commits
with metadata, range assignment with eager rebalances, pause/resume."""

from __future__ import annotations

import threading
import time

import pytest

from consumers import BrokerError, MessageLike
from consumers.backends.base import NO_OFFSET, CommitOffset, PartitionKey
from consumers.backends.memory import MemoryBroker, MemoryConsumer
from tests.helpers import wait_until

pytestmark = pytest.mark.unit

TOPIC = "events"


class Member:
    """A group member that records its rebalance callbacks in a shared, ordered log."""

    def __init__(self, broker: MemoryBroker, name: str, log: list[tuple[str, str, list[int]]]):
        self.name = name
        self.log = log
        self.consumer: MemoryConsumer = broker.consumer("g")

    def subscribe(self) -> None:
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, parts: list[PartitionKey]) -> None:
        self.log.append((self.name, "assign", [p for _, p in parts]))

    def _on_revoke(self, parts: list[PartitionKey]) -> None:
        self.log.append((self.name, "revoke", [p for _, p in parts]))

    def poll(self) -> list[tuple[int, int]]:
        return [(m.partition(), m.offset()) for m in self.consumer.consume(100, timeout=0)]

    def owned(self) -> list[int]:
        return sorted(p for _, p in self.consumer.assignment())


def _only(consumer: MemoryConsumer, partitions: int = 1) -> None:
    consumer.subscribe([TOPIC])
    assert consumer.consume(0, timeout=0) == []  # joins the group, takes every partition
    assert len(consumer.assignment()) == partitions


def test_produce_and_consume_with_offsets() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, partitions=2)
    produced = [
        broker.produce(TOPIC, b"v%d" % i, key=b"k", partition=i % 2, headers=[("h", b"%d" % i)])
        for i in range(6)
    ]
    assert produced == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert broker.end_offsets(TOPIC) == [3, 3]

    consumer = broker.consumer("g")
    _only(consumer, partitions=2)
    messages = consumer.consume(100, timeout=0)
    got: dict[tuple[int, int], MessageLike] = {(m.partition(), m.offset()): m for m in messages}
    assert sorted(got) == sorted(produced)
    for i, where in enumerate(produced):
        m = got[where]
        assert m.error() is None
        assert m.topic() == TOPIC
        assert (m.key(), m.value(), m.headers()) == (b"k", b"v%d" % i, [("h", b"%d" % i)])
        assert m.timestamp()[0] != 0 and m.timestamp()[1] > 0
    for p in (0, 1):
        offsets = [m.offset() for m in messages if m.partition() == p]
        assert offsets == sorted(offsets)  # each partition in offset order
    # Everything was read: nothing more until something is produced.
    assert consumer.consume(100, timeout=0) == []
    broker.produce(TOPIC, b"late", partition=1)
    assert [(m.partition(), m.offset(), m.value()) for m in consumer.consume(100, 0)] == [
        (1, 3, b"late")
    ]
    assert consumer.high_watermark((TOPIC, 1)) == 4
    consumer.close()


def test_num_messages_limits_a_batch() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    for i in range(7):
        broker.produce(TOPIC, b"%d" % i, partition=0)
    consumer = broker.consumer("g")
    _only(consumer)
    batches = [[m.offset() for m in consumer.consume(3, timeout=0)] for _ in range(3)]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    consumer.close()


def test_keys_pick_a_stable_partition_and_unkeyed_records_spread() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, partitions=4)
    for key in (b"alice", b"bob", b"carol"):
        partitions = {broker.produce(TOPIC, b"x", key=key)[0] for _ in range(5)}
        assert len(partitions) == 1
    assert len({broker.produce(TOPIC, b"x")[0] for _ in range(8)}) == 4


def test_offset_gaps_are_never_delivered() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    assert broker.produce(TOPIC, b"a", partition=0) == (0, 0)
    assert broker.produce(TOPIC, b"b", partition=0, offset_gap=3) == (0, 4)
    assert broker.produce(TOPIC, b"c", partition=0) == (0, 5)
    assert broker.produce(TOPIC, b"d", partition=0, offset_gap=1) == (0, 7)
    assert broker.end_offsets(TOPIC) == [8]
    consumer = broker.consumer("g")
    _only(consumer)
    got = [(m.offset(), m.value()) for m in consumer.consume(100, timeout=0)]
    assert got == [(0, b"a"), (4, b"b"), (5, b"c"), (7, b"d")]
    consumer.close()


def test_commit_with_metadata_round_trips() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, partitions=3)
    commits: list[str | None] = []
    consumer = broker.consumer("g", on_commit=commits.append)
    _only(consumer, partitions=3)

    assert consumer.committed([(TOPIC, 2)]) == [(TOPIC, 2, NO_OFFSET, "")]

    offsets: list[CommitOffset] = [(TOPIC, 0, 17, "lh1:abc"), (TOPIC, 1, 4, "")]
    consumer.commit(offsets, asynchronous=False)
    back = consumer.committed([(TOPIC, p) for p in range(3)])
    assert [(p, offset, metadata) for _, p, offset, metadata in back] == [
        (0, 17, "lh1:abc"),
        (1, 4, ""),
        (2, NO_OFFSET, ""),
    ]
    assert broker.committed_offsets("g", TOPIC) == [17, 4, None]
    assert broker.committed_offsets("other", TOPIC) == [None, None, None]

    # An asynchronous commit lands at once; its callback runs inside the next consume().
    consumer.commit([(TOPIC, 2, 9, "m")], asynchronous=True)
    assert commits == []
    assert broker.committed_offsets("g", TOPIC) == [17, 4, 9]
    consumer.consume(1, timeout=0)
    assert commits == [None]  # one asynchronous commit, reported as done
    consumer.close()


def test_a_new_member_resumes_from_the_committed_offset() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    for i in range(5):
        broker.produce(TOPIC, b"%d" % i, partition=0)
    first = broker.consumer("g")
    _only(first)
    assert len(first.consume(100, timeout=0)) == 5
    first.commit([(TOPIC, 0, 3, "")], asynchronous=False)
    first.close()

    second = broker.consumer("g")
    _only(second)
    assert [m.offset() for m in second.consume(100, timeout=0)] == [3, 4]
    second.close()


def test_committing_a_partition_not_assigned_raises() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, partitions=2)
    log: list[tuple[str, str, list[int]]] = []
    a, b = Member(broker, "a", log), Member(broker, "b", log)
    a.subscribe()
    b.subscribe()
    for _ in range(2):
        a.poll()
        b.poll()
    assert (a.owned(), b.owned()) == ([0], [1])
    with pytest.raises(BrokerError, match="not assigned"):
        a.consumer.commit([(TOPIC, 1, 5, "")], asynchronous=False)
    # Nothing of a rejected batch is applied, not even its assigned part.
    with pytest.raises(BrokerError, match="not assigned"):
        a.consumer.commit([(TOPIC, 0, 5, ""), (TOPIC, 1, 5, "")], asynchronous=True)
    assert broker.committed_offsets("g", TOPIC) == [None, None]
    a.consumer.close()
    b.consumer.close()


def test_two_members_split_partitions_and_a_leaver_hands_its_partitions_over() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, partitions=5)
    for i in range(10):
        broker.produce(TOPIC, b"%d" % i, partition=i % 5)
    log: list[tuple[str, str, list[int]]] = []
    a, b = Member(broker, "a", log), Member(broker, "b", log)

    a.subscribe()
    assert sorted(a.poll()) == sorted((i % 5, i // 5) for i in range(10))
    assert log == [("a", "assign", [0, 1, 2, 3, 4])]
    a.consumer.commit([(TOPIC, p, 1, "") for p in range(5)], asynchronous=False)

    b.subscribe()  # joins: eager rebalance, everyone revokes before anyone is assigned
    assert b.poll() == []  # a has not revoked yet: b gets nothing
    assert b.owned() == []
    # Range assignor: the first member gets the extra partition; both resume from commits.
    assert sorted(a.poll()) == [(0, 1), (1, 1), (2, 1)]
    assert sorted(b.poll()) == [(3, 1), (4, 1)]
    assert (a.owned(), b.owned()) == ([0, 1, 2], [3, 4])
    assert log[1:] == [
        ("a", "revoke", [0, 1, 2, 3, 4]),
        ("a", "assign", [0, 1, 2]),
        ("b", "assign", [3, 4]),
    ]
    a.consumer.commit([(TOPIC, p, 2, "") for p in range(3)], asynchronous=False)
    b.consumer.commit([(TOPIC, 3, 2, "")], asynchronous=False)

    # b leaves: its partitions go back to a, from b's committed offsets.
    broker.produce(TOPIC, b"new", partition=4)
    b.consumer.close()
    assert log[4] == ("b", "revoke", [3, 4])
    # 3 was committed at its end by b; 4 resumes from the last commit (a's, at 1).
    assert a.poll() == [(4, 1), (4, 2)]
    assert a.owned() == [0, 1, 2, 3, 4]
    assert log[5:] == [("a", "revoke", [0, 1, 2]), ("a", "assign", [0, 1, 2, 3, 4])]
    a.consumer.close()
    assert log[-1] == ("a", "revoke", [0, 1, 2, 3, 4])


def test_pause_stops_delivery_of_one_partition_and_resume_restores_it() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC, partitions=2)
    consumer = broker.consumer("g")
    _only(consumer, partitions=2)
    broker.produce(TOPIC, b"a", partition=0)
    broker.produce(TOPIC, b"b", partition=1)
    consumer.pause([(TOPIC, 0)])
    assert [(m.partition(), m.offset()) for m in consumer.consume(100, timeout=0)] == [(1, 0)]
    broker.produce(TOPIC, b"c", partition=0)
    broker.produce(TOPIC, b"d", partition=1)
    assert [(m.partition(), m.offset()) for m in consumer.consume(100, timeout=0)] == [(1, 1)]
    assert consumer.consume(100, timeout=0) == []
    consumer.resume([(TOPIC, 0)])
    # Delivery picks up where it stopped: nothing lost, nothing repeated.
    assert [(m.partition(), m.offset()) for m in consumer.consume(100, timeout=0)] == [
        (0, 0),
        (0, 1),
    ]
    consumer.close()


def test_a_rebalance_keeps_pauses() -> None:
    # As librdkafka does: a partition paused before a revoke is still paused when assigned
    # again, until the member resumes it (the engine does so on every assignment).
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    log: list[tuple[str, str, list[int]]] = []
    a, b = Member(broker, "a", log), Member(broker, "b", log)
    a.subscribe()
    assert a.poll() == []
    broker.produce(TOPIC, b"x", partition=0)
    a.consumer.pause([(TOPIC, 0)])
    assert a.poll() == []
    b.subscribe()
    b.consumer.close()  # joins and leaves: two rebalances, partition 0 stays with a
    assert a.poll() == []
    a.consumer.resume([(TOPIC, 0)])
    assert a.poll() == [(0, 0)]
    assert log == [("a", "assign", [0]), ("a", "revoke", [0]), ("a", "assign", [0])]
    a.consumer.close()


def test_consume_waits_for_a_record_and_resume_wakes_it() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    consumer = broker.consumer("g")
    _only(consumer)
    consumer.pause([(TOPIC, 0)])
    broker.produce(TOPIC, b"held", partition=0)
    got: list[list[int]] = []
    waited: list[float] = []

    def poll() -> None:
        started = time.monotonic()
        got.append([m.offset() for m in consumer.consume(10, timeout=5.0)])
        waited.append(time.monotonic() - started)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        # Resume only once the poller is blocked inside consume() (the broker's condition).
        wait_until(lambda: len(broker._lock._waiters) == 1, timeout=2.0)  # type: ignore[attr-defined]
        assert got == []
        consumer.resume([(TOPIC, 0)])
        wait_until(lambda: got, timeout=2.0, message="consume() returns once resumed")
    finally:
        thread.join(timeout=5.0)
    assert got == [[0]]
    assert waited[0] < 2.0  # woken, not timed out


def test_a_closed_consumer_refuses_calls_and_closes_once() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    revoked: list[list[int]] = []
    consumer = broker.consumer("g")
    consumer.subscribe([TOPIC], on_revoke=lambda parts: revoked.append([p for _, p in parts]))
    consumer.consume(1, timeout=0)
    consumer.close()
    consumer.close()
    assert revoked == [[0]]
    with pytest.raises(RuntimeError, match="closed"):
        consumer.consume(1, timeout=0)
    with pytest.raises(RuntimeError, match="closed"):
        consumer.commit([(TOPIC, 0, 1, "")], asynchronous=False)


def test_positions_pass_offsets_that_are_never_delivered() -> None:
    broker = MemoryBroker()
    broker.create_topic(TOPIC)
    broker.produce(TOPIC, b"a", partition=0)
    broker.mark(TOPIC, 0)  # a transaction marker after the last record
    consumer = broker.consumer("g")
    _only(consumer)
    assert [m.offset() for m in consumer.consume(100, timeout=0)] == [0]
    assert consumer.positions([(TOPIC, 0)]) == {(TOPIC, 0): 2}
    assert broker.end_offsets(TOPIC) == [2]
    consumer.close()
