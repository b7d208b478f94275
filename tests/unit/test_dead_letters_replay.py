"""The broker-neutral dead-letter jobs (``dead_letters/listing.py``, ``replay.py``) on the
in-memory store: the same rules the Kafka and Pulsar stores are held to in
``tests/integration/test_dead_letters.py`` and ``test_pulsar_dead_letters.py``, without a broker."""

from __future__ import annotations

import pytest

from consumers import BrokerError
from consumers.backends.memory import MemoryBroker
from consumers.backends.memory_admin import MemoryDeadLetters
from consumers.dead_letters.listing import list_dead_letters
from consumers.dead_letters.replay import replay_dead_letters
from consumers.dead_letters.selection import replay_group
from consumers.engine.dead_letter_headers import HEADER_REPLAY_COUNT
from tests.support.dead_letters import HOUR_MS, Dead, headers_of, now_ms

pytestmark = pytest.mark.unit

ONE = [(HEADER_REPLAY_COUNT, b"1")]


def broker_with(dlq_partitions: int, letters: list[Dead], raw: int = 0) -> MemoryBroker:
    broker = MemoryBroker()
    broker.create_topic("dlq", dlq_partitions)
    broker.create_topic("orders.in", 2)
    broker.create_topic("elsewhere", 3)
    for d in letters:
        headers = [(name, value) for name, value in headers_of(d) if value is not None]
        broker.produce("dlq", d.value, d.key, partition=d.dlq_partition, headers=headers)
    for _ in range(raw):
        broker.produce("dlq", b"not a dead letter", b"raw", partition=0)
    return broker


def target(
    broker: MemoryBroker, topic: str
) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]]:
    return [
        (m.partition(), m.key(), m.value(), m.headers())
        for partition in broker.read(topic)
        for m in partition
    ]


def test_list_keeps_the_workloads_recent_letters_in_topic_order() -> None:
    now = now_ms()
    old, new = now - 2 * HOUR_MS, now - 60_000
    store = MemoryDeadLetters(
        broker_with(
            2,
            [
                Dead("orders", b"o1", b"v1", "orders.in", 1, 10, (("t", b"1"),), old, 1),
                Dead("payments", b"p1", b"w1", "payments.in", 0, 5, (), new, 0),
                Dead("orders", b"o2", b"v2", "orders.in", 0, 11, (), new, 0),
                Dead("orders", b"o4", b"v4", "orders.in", 1, 13, (), new, 1),
            ],
            raw=1,
        )
    )
    entries = list_dead_letters(store, "dlq", "orders")
    assert [(e.partition, e.offset, e.key) for e in entries] == [
        (0, 1, b"o2"),
        (1, 0, b"o1"),
        (1, 1, b"o4"),
    ]
    assert entries[1].info.original_headers == (("t", b"1"),)
    assert [e.key for e in list_dead_letters(store, "dlq", "orders", since_ms=now - HOUR_MS)] == [
        b"o2",
        b"o4",
    ]
    assert [e.key for e in list_dead_letters(store, "dlq", "orders", limit=2)] == [b"o2", b"o1"]
    assert list_dead_letters(store, "dlq", "nobody") == []
    assert store.progress == {}  # listing marks nothing


def test_replay_republishes_once_back_to_the_source_partition() -> None:
    broker = broker_with(
        1,
        [
            Dead("orders", b"a", b"v1", "orders.in", 1, 10),
            Dead("payments", b"p", b"w", "orders.in"),
            Dead("orders", b"a", b"v2", "orders.in", 0, 11),
            Dead("orders", None, b"v3", "elsewhere", 7, 12),  # no partition 7 there
        ],
        raw=1,
    )
    store = MemoryDeadLetters(broker)
    summary = replay_dead_letters(store, "dlq", "orders", None)
    assert (summary.replayed, summary.skipped_other_workloads, summary.malformed) == (3, 1, 1)
    assert target(broker, "orders.in") == [(0, b"a", b"v2", ONE), (1, b"a", b"v1", ONE)]
    assert [(k, v) for _, k, v, _ in target(broker, "elsewhere")] == [(None, b"v3")]
    assert store.progress == {(replay_group("orders"), "dlq", 0): 5}

    again = replay_dead_letters(store, "dlq", "orders", None)
    assert again == type(again)()
    assert len(target(broker, "orders.in")) == 2


def test_the_guard_the_limit_and_since() -> None:
    now, count = now_ms(), HEADER_REPLAY_COUNT
    broker = broker_with(
        1,
        [
            Dead("orders", b"old", b"v0", "orders.in", last_failure_ms=now - 3 * HOUR_MS),
            Dead("orders", b"tired", b"v1", "orders.in", 0, 1, ((count, b"3"),)),
            Dead("orders", b"twice", b"v2", "orders.in", 0, 2, ((count, b"2"),)),
            Dead("orders", b"fresh", b"v3", "orders.in", 0, 3),
        ],
    )
    store = MemoryDeadLetters(broker)
    first = replay_dead_letters(store, "dlq", "orders", "elsewhere", 2, now - HOUR_MS)
    assert (first.replayed, first.exhausted, first.skipped_older) == (1, 1, 1)
    assert [e.key for e in first.exhausted_entries] == [b"tired"]
    assert [(k, h) for _, k, _, h in target(broker, "elsewhere")] == [(b"twice", [(count, b"3")])]

    rest = replay_dead_letters(store, "dlq", "orders", "elsewhere")
    assert (rest.replayed, rest.exhausted, rest.skipped_older) == (1, 0, 0)
    assert [k for _, k, _, _ in target(broker, "elsewhere")] == [b"twice", b"fresh"]


def test_a_refused_batch_is_not_marked_and_the_rerun_sends_it() -> None:
    letters = [Dead("orders", str(i).encode(), b"v", "orders.in") for i in range(5)]
    broker = broker_with(1, letters)
    store = MemoryDeadLetters(broker)
    broker.unavailable.add("orders.in")
    with pytest.raises(BrokerError, match=r"republishing to orders\.in failed"):
        replay_dead_letters(store, "dlq", "orders", None)
    assert store.progress == {}

    broker.unavailable.clear()
    seen: list[tuple[int, int | None]] = []
    summary = replay_dead_letters(
        store, "dlq", "orders", None, progress=lambda done, total: seen.append((done, total))
    )
    assert summary.replayed == 5
    assert seen == [(3, 5), (5, 5)]  # one call a batch of three

    # A later run covers only what came since: its total counts from where the progress stands.
    for d in [Dead("orders", b"late", b"v", "orders.in")] * 2:
        headers = [(name, value) for name, value in headers_of(d) if value is not None]
        broker.produce("dlq", d.value, d.key, partition=0, headers=headers)
    seen.clear()
    later = replay_dead_letters(
        store, "dlq", "orders", None, progress=lambda done, total: seen.append((done, total))
    )
    assert (later.replayed, seen) == (2, [(2, 2)])


def test_replays_go_to_the_target_store_when_the_source_is_elsewhere() -> None:
    dead = broker_with(1, [Dead("orders", b"k", b"v", "orders.in", 1)])
    source = MemoryBroker()
    source.create_topic("orders.in", 2)
    summary = replay_dead_letters(
        MemoryDeadLetters(dead), "dlq", "orders", None, target=MemoryDeadLetters(source)
    )
    assert summary.replayed == 1
    assert target(source, "orders.in") == [(1, b"k", b"v", ONE)]
    assert target(dead, "orders.in") == []


def test_missing_topics_name_themselves() -> None:
    store = MemoryDeadLetters(broker_with(1, []))
    with pytest.raises(BrokerError, match="dead-letter topic 'nope' does not exist"):
        list_dead_letters(store, "nope", "orders")
    with pytest.raises(BrokerError, match="target topic 'nope' does not exist"):
        replay_dead_letters(store, "dlq", "orders", "nope")
