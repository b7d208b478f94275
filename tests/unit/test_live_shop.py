"""The live shop: demo records due by a made-up clock, at the asked pace, shaped for cleaning."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from fractions import Fraction

import pytest

from orchestration.demo import events as demo
from orchestration.demo.events import DemoRecord
from orchestration.demo.live_shop import LiveShop, run_live_shop

pytestmark = pytest.mark.unit

START_MS = 1_790_000_000_000  # an arbitrary moment in 2026
HOUR_MS = 3_600_000


def played(shop: LiveShop, until_ms: int, step_ms: int = 7_000) -> list[DemoRecord]:
    out: list[DemoRecord] = []
    for now in range(START_MS, until_ms + 1, step_ms):
        out += shop.due(now)
    return out


@pytest.fixture(scope="module")
def hour() -> list[DemoRecord]:
    shop = LiveShop(clicks_per_second=2.0, start_ms=START_MS, users=300, malformed_fraction=0.05)
    return played(shop, START_MS + HOUR_MS)


def test_records_are_due_only_once_their_time_has_come() -> None:
    shop = LiveShop(clicks_per_second=5.0, start_ms=START_MS)
    seen: list[DemoRecord] = []
    for now in range(START_MS, START_MS + 600_000, 1_000):
        due = shop.due(now)
        assert all(r.timestamp_ms <= now for r in due)
        assert all(r.timestamp_ms > now - 1_000 for r in due), "a record came late"
        seen += due
        assert shop.next_due_ms() > now
    assert [r.timestamp_ms for r in seen] == sorted(r.timestamp_ms for r in seen)


def test_the_shop_opens_in_full_swing() -> None:
    shop = LiveShop(clicks_per_second=10.0, start_ms=START_MS)
    assert shop.due(START_MS - 1) == [], "nothing from before the opening is sent"
    first_minutes = played(shop, START_MS + 120_000, step_ms=1_000)
    assert min(r.timestamp_ms for r in first_minutes) < START_MS + 1_000
    clicks = sum(r.stream == "clicks" for r in first_minutes)
    assert 0.8 * 10.0 * 120 < clicks < 1.2 * 10.0 * 120
    assert any(r.stream == "orders" for r in first_minutes), "orders flow from the start"


def test_the_click_rate_is_about_the_one_asked(hour: list[DemoRecord]) -> None:
    clicks = sum(r.stream == "clicks" for r in hour)
    assert 0.9 * 2.0 * 3600 < clicks < 1.1 * 2.0 * 3600
    assert 0 < sum(r.stream == "orders" for r in hour) < clicks / 10


def test_a_user_never_has_two_sessions_at_once(hour: list[DemoRecord]) -> None:
    # A session's ids are drawn together, so overlapping sessions of one user would show as
    # ids going back in time order.
    last_id: dict[bytes, int] = {}
    for record in (r for r in hour if r.valid):
        body = json.loads(record.value)
        number = int((body.get("event_id") or body["order_id"]).rsplit("-", 1)[1])
        assert number > last_id.get(record.key, -1), f"overlapping sessions of {record.key!r}"
        last_id[record.key] = number
    assert len(last_id) > 100, "sessions spread over the users"


def test_valid_records_are_the_demo_shape_and_ids_never_repeat(hour: list[DemoRecord]) -> None:
    ids = []
    for record in (r for r in hour if r.valid):
        body = json.loads(record.value)
        required = demo.CLICK_REQUIRED if record.stream == "clicks" else demo.ORDER_REQUIRED
        assert set(required) <= body.keys()
        assert body["ts"] == demo.format_ts(record.timestamp_ms)
        assert record.key == body["user_id"].encode()
        ids.append(body.get("event_id") or body["order_id"])
    assert len(ids) == len(set(ids))
    restarted = LiveShop(clicks_per_second=2.0, start_ms=START_MS + 1, users=300)
    later = [json.loads(r.value) for r in played(restarted, START_MS + 600_000) if r.valid]
    assert not {b.get("event_id") or b["order_id"] for b in later} & set(ids)


def test_the_malformed_share_is_exact_and_takes_every_defect_kind(
    hour: list[DemoRecord],
) -> None:
    clicks = [r for r in hour if r.stream == "clicks"]
    malformed = [r for r in clicks if not r.valid]
    assert len(malformed) == int(0.05 * len(clicks) + 1e-9)
    assert {r.defect for r in malformed} == set(demo.CLICK_DEFECTS)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="clicks_per_second"):
        LiveShop(clicks_per_second=0, start_ms=START_MS)
    with pytest.raises(ValueError, match="users"):
        LiveShop(clicks_per_second=1, start_ms=START_MS, users=demo.MAX_USERS + 1)
    with pytest.raises(ValueError, match="malformed_fraction"):
        LiveShop(clicks_per_second=1, start_ms=START_MS, malformed_fraction=1.5)


class ListSink:
    def __init__(self) -> None:
        self.records: list[DemoRecord] = []
        self.closed = False

    def send(self, record: DemoRecord) -> None:
        self.records.append(record)

    def poll(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_run_sends_each_stream_to_its_sink_and_closes_them_on_stop() -> None:
    now = [START_MS / 1000]
    stop = threading.Event()
    clicks, orders = ListSink(), ListSink()

    def advance(sent: Counter[str]) -> None:
        now[0] += 5.0  # each loop turn is five seconds of made-up time
        if now[0] > START_MS / 1000 + 2 * 3600:
            stop.set()

    shop = LiveShop(clicks_per_second=3.0, start_ms=START_MS)
    sent = run_live_shop(
        shop, {"clicks": clicks, "orders": orders}, stop, on_sent=advance, clock=lambda: now[0]
    )
    assert clicks.closed and orders.closed
    assert sent["clicks"] == len(clicks.records) > 0
    assert sent["orders"] == len(orders.records) > 0
    assert {r.stream for r in clicks.records} == {"clicks"}
    assert {r.stream for r in orders.records} == {"orders"}
    assert sent["malformed"] == sum(not r.valid for r in clicks.records + orders.records)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.02, 1 / 3])
def test_every_prefix_of_a_stream_has_its_exact_malformed_share(fraction: float) -> None:
    """After n records, exactly floor(n * fraction) are malformed, also at the multiples where a
    running float sum falls short (ten additions of 0.1 are 0.9999999999999999)."""
    shop = LiveShop(
        clicks_per_second=5.0, start_ms=START_MS, users=300, malformed_fraction=fraction
    )
    clicks = [r for r in played(shop, START_MS + 1_800_000) if r.stream == "clicks"]
    assert len(clicks) > 1_000
    exact = Fraction(repr(fraction))
    malformed = 0
    for n, record in enumerate(clicks, start=1):
        malformed += not record.valid
        assert malformed == math.floor(n * exact), f"after {n} clicks"
