"""The tap: events are built once, offered without blocking, and every drop is counted."""

from __future__ import annotations

import json
import threading

import pytest

from consumers import Record
from consumers.engine.tap import Tap

pytestmark = pytest.mark.unit


def rec(offset: int = 0, key: bytes | None = b"k", value: bytes | None = b"v") -> Record:
    return Record("orders", 2, offset, key, value)


def test_publish_without_subscribers_does_nothing() -> None:
    tap = Tap()
    assert not tap.active("w")
    tap.publish("w", rec(), "ok")  # nobody listens: no error, nothing kept
    sub = tap.subscribe("w")
    assert sub.queue.empty()
    assert tap.dropped_total("w") == 0


def test_event_fields() -> None:
    tap = Tap()
    sub = tap.subscribe("w")
    other = tap.subscribe("x")
    assert tap.active("w")
    tap.publish("w", rec(offset=7, key=b"user-1", value=b'{"a": 1}'), "ok")
    dropped_before, event = sub.queue.get_nowait()
    assert dropped_before == 0
    assert event.pop("ts") > 1_600_000_000_000  # epoch milliseconds
    assert event == {
        "workload": "w",
        "topic": "orders",
        "partition": 2,
        "offset": 7,
        "key": "user-1",
        "outcome": "ok",
        "value_preview": '{"a": 1}',
        "value_bytes": 8,
    }
    json.dumps(event)  # JSON-ready as is
    assert other.queue.empty()  # another workload's subscriber sees nothing


def test_preview_is_bounded_and_invalid_utf8_is_replaced() -> None:
    tap = Tap(preview_bytes=4)
    sub = tap.subscribe("w")
    tap.publish("w", rec(value=b"x" * 10_000), "ok")
    tap.publish("w", rec(value=b"ab\xffcdef"), "ok")
    tap.publish("w", rec(value="aéé".encode()), "ok")  # cut inside the second two-byte é
    tap.publish("w", rec(value=None), "ok")
    events = [sub.queue.get_nowait()[1] for _ in range(4)]
    assert [(e["value_preview"], e["value_bytes"]) for e in events] == [
        ("xxxx", 10_000),
        ("ab\ufffdc", 7),
        ("aé\ufffd", 5),
        (None, None),
    ]


def test_key_decoding() -> None:
    tap = Tap()
    sub = tap.subscribe("w")
    for key in (b"plain", "ключ".encode(), b"\x00\xff", None):
        tap.publish("w", rec(key=key), "ok")
    keys = [sub.queue.get_nowait()[1]["key"] for _ in range(4)]
    assert keys == ["plain", "ключ", "\x00\\xff", None]


def test_full_queue_drops_for_that_subscriber_only_and_counts() -> None:
    tap = Tap(queue_size=3)
    slow = tap.subscribe("w")
    fast = tap.subscribe("w")
    for offset in range(3):
        tap.publish("w", rec(offset), "ok")
    assert [fast.queue.get_nowait()[1]["offset"] for _ in range(3)] == [0, 1, 2]
    for offset in range(3, 8):
        tap.publish("w", rec(offset), "ok")  # never blocks, never raises
    assert slow.dropped == 5
    assert fast.dropped == 2  # it took 3, then 3 more fit and 2 did not
    assert tap.dropped_total("w") == 7
    # The slow subscriber frees a slot: the next event carries the drops seen before it.
    assert slow.queue.get_nowait()[1]["offset"] == 0
    tap.publish("w", rec(8), "ok")
    items = [slow.queue.get_nowait() for _ in range(3)]
    assert [(before, event["offset"]) for before, event in items] == [(0, 1), (0, 2), (5, 8)]


def test_unsubscribe_stops_delivery_and_keeps_the_drop_total() -> None:
    tap = Tap(queue_size=1)
    first = tap.subscribe("w")
    second = tap.subscribe("w")
    tap.publish("w", rec(0), "ok")
    tap.publish("w", rec(1), "ok")
    assert tap.dropped_total("w") == 2
    tap.unsubscribe(first)
    tap.unsubscribe(first)  # twice is harmless
    assert tap.active("w")
    assert tap.subscribers("w") == 1
    tap.unsubscribe(second)
    assert not tap.active("w")
    tap.publish("w", rec(2), "ok")
    assert first.queue.qsize() == second.queue.qsize() == 1
    assert tap.dropped_total("w") == 2  # a counter: ended subscriptions still count


def test_publish_while_subscribers_come_and_go() -> None:
    """``publish`` reads a snapshot tuple: concurrent (un)subscribes never break it."""
    tap = Tap(queue_size=10)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            while not stop.is_set():
                tap.unsubscribe(tap.subscribe("w"))
        except BaseException as exc:  # the test fails below with the error
            errors.append(exc)

    thread = threading.Thread(target=churn)
    thread.start()
    keeper = tap.subscribe("w")
    try:
        for offset in range(20_000):
            tap.publish("w", rec(offset), "ok")
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert keeper.queue.qsize() == 10
    assert keeper.dropped == 20_000 - 10


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        Tap(queue_size=0)
    with pytest.raises(ValueError):
        Tap(preview_bytes=-1)
