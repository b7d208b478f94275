"""The demo generator: deterministic, ordered per key, realistic, and corrupted as asked."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from orchestration.demo import events as demo
from orchestration.demo.events import DemoRecord, expected_per_day, generate

pytestmark = pytest.mark.unit

DAYS = [date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 3)]
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture(scope="module")
def records() -> list[DemoRecord]:
    return list(
        generate(DAYS, users=80, sessions_per_user_per_day=2.5, malformed_fraction=0.06, seed=7)
    )


def payload(record: DemoRecord) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(record.value)
    return value


def test_the_same_seed_gives_the_same_records_and_another_seed_others(
    records: list[DemoRecord],
) -> None:
    again = generate(DAYS, users=80, sessions_per_user_per_day=2.5, malformed_fraction=0.06, seed=7)
    other = generate(DAYS, users=80, sessions_per_user_per_day=2.5, malformed_fraction=0.06, seed=8)
    assert list(again) == records
    assert list(other) != records


def test_records_come_in_timestamp_order_per_key_and_stream(records: list[DemoRecord]) -> None:
    last: dict[tuple[str, bytes], int] = {}
    for record in records:
        previous = last.get((record.stream, record.key), -1)
        assert record.timestamp_ms > previous, record
        last[record.stream, record.key] = record.timestamp_ms


def test_valid_records_follow_the_schema(records: list[DemoRecord]) -> None:
    for record in (r for r in records if r.valid):
        body = payload(record)
        assert record.defect is None
        assert record.key == body["user_id"].encode()
        assert ISO.match(body["ts"]), body
        moment = datetime.fromisoformat(body["ts"].replace("Z", "+00:00"))
        assert int(moment.timestamp() * 1000) == record.timestamp_ms
        assert moment.date() == record.day
        if record.stream == "clicks":
            assert body["event_type"] in demo.EVENT_TYPES
            assert set(demo.CLICK_REQUIRED) <= body.keys()
            if body["event_type"] == "page_view":
                assert body.get("price") is None and "quantity" not in body
            else:
                assert body["price"] > 0 and body["quantity"] >= 1
        else:
            assert set(demo.ORDER_REQUIRED) <= body.keys() and body["currency"] == "EUR"
            total = sum(
                (Decimal(str(i["unit_price"])) * i["quantity"] for i in body["items"]), Decimal(0)
            )
            assert Decimal(str(body["total"])) == total


def test_ids_are_unique(records: list[DemoRecord]) -> None:
    ids = [
        payload(r).get("event_id") or payload(r)["order_id"]
        for r in records
        if r.valid  # a malformed record may have lost its id
    ]
    assert len(ids) == len(set(ids))


def test_the_funnel_narrows_and_every_order_follows_its_purchases() -> None:
    clean = generate(DAYS, users=80, sessions_per_user_per_day=2.5, malformed_fraction=0, seed=7)
    valid = [payload(r) for r in clean]
    steps = Counter(p["event_type"] for p in valid if "event_id" in p)
    assert steps["page_view"] > 3 * steps["add_to_cart"] > 0
    assert steps["add_to_cart"] > steps["purchase"] > 0
    purchases: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    for p in valid:
        if p.get("event_type") == "purchase":
            purchases[p["user_id"]].append((_ts(p), p["product_id"]))
    for order in (p for p in valid if "order_id" in p):
        recent = {
            product
            for at, product in purchases[order["user_id"]]
            if timedelta(0) < _ts(order) - at < timedelta(minutes=2)
        }
        assert {i["product_id"] for i in order["items"]} <= recent, order


def test_sessions_of_a_user_are_more_than_30_minutes_apart(records: list[DemoRecord]) -> None:
    times: dict[bytes, list[int]] = defaultdict(list)
    for record in records:
        if record.stream == "clicks":
            times[record.key].append(record.timestamp_ms)
    gaps = [b - a for t in times.values() for a, b in itertools.pairwise(t)]
    in_session = [g for g in gaps if g <= 5 * 60_000]
    between = [g for g in gaps if g > 5 * 60_000]
    assert in_session and between
    assert min(between) > 30 * 60_000


def test_the_malformed_fraction_is_kept_per_day_and_stream(records: list[DemoRecord]) -> None:
    counts = expected_per_day(records)
    assert sorted(counts) == DAYS
    for day in counts.values():
        for stream in demo.STREAMS:
            produced = day[f"{stream}_produced"]
            assert produced == day[f"{stream}_valid"] + day[f"{stream}_malformed"]
            assert day[f"{stream}_malformed"] == round(0.06 * produced)
    assert sum(d["clicks_produced"] + d["orders_produced"] for d in counts.values()) == len(records)


def test_every_defect_kind_appears_and_is_what_it_says(records: list[DemoRecord]) -> None:
    seen = {(r.stream, r.defect) for r in records if not r.valid}
    expected = {("clicks", d) for d in demo.CLICK_DEFECTS} | {
        ("orders", d) for d in demo.ORDER_DEFECTS
    }
    assert seen == expected
    for record in (r for r in records if not r.valid):
        assert _defect_of(record) == record.defect, record


def test_no_malformed_records_when_the_fraction_is_zero() -> None:
    records = list(generate(DAYS[:1], users=20, malformed_fraction=0.0, seed=1))
    assert records and all(r.valid for r in records)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"days": []}, "at least one date"),
        ({"days": [datetime(2024, 5, 1, tzinfo=UTC)]}, "datetime.date"),
        ({"days": [date(2024, 5, 1), date(2024, 5, 1)]}, "repeat"),
        ({"users": 0}, "users"),
        ({"users": True}, "users"),
        ({"users": demo.MAX_USERS + 1}, "users"),
        ({"sessions_per_user_per_day": 0}, "sessions_per_user_per_day"),
        ({"sessions_per_user_per_day": 13}, "sessions_per_user_per_day"),
        ({"malformed_fraction": -0.1}, "malformed_fraction"),
        ({"malformed_fraction": float("nan")}, "malformed_fraction"),
        ({"seed": "1"}, "seed"),
    ],
)
def test_bad_arguments_raise_at_the_call(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"days": DAYS[:1], **kwargs}
    with pytest.raises(ValueError, match=message):
        generate(**arguments)  # no iteration: the call itself must fail


def _ts(body: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(body["ts"].replace("Z", "+00:00"))


def _defect_of(record: DemoRecord) -> str:
    """Classify a malformed record independently of how the generator made it."""
    try:
        text = record.value.decode()
    except UnicodeDecodeError:
        return "invalid_utf8"
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return "not_json"
    required = demo.CLICK_REQUIRED if record.stream == "clicks" else demo.ORDER_REQUIRED
    if not set(required) <= body.keys():
        return "missing_field"
    if record.stream == "clicks":
        if body.get("price") == "abc":
            return "wrong_type"
        if body["event_type"] not in demo.EVENT_TYPES:
            return "unknown_event_type"
        if (body.get("price") or 0) < 0 or body.get("quantity", 1) < 1:
            return "negative_amount"
        return "valid"
    items = body["items"]
    if body["total"] == "abc" or any(isinstance(i["quantity"], str) for i in items):
        return "wrong_type"
    if any(i["quantity"] < 0 or i["unit_price"] < 0 for i in items):
        return "negative_amount"
    total = sum((Decimal(str(i["unit_price"])) * i["quantity"] for i in items), Decimal(0))
    return "total_mismatch" if abs(Decimal(str(body["total"])) - total) > Decimal("0.01") else ""
