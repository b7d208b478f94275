"""Deterministic demo data: an online shop's clickstream and orders over a few days.

Why: the demo, the consumer tests and the Spark jobs must agree on one realistic data set whose
counts are known up front, so that what lands can be reconciled with what was produced.

Users browse in sessions (events seconds to minutes apart; sessions of one user are more than
30 minutes apart and never cross midnight UTC), some add products to the cart, fewer buy: a
purchase session emits one ``purchase`` click per carted product and one order a few seconds
later. Clicks go to Kafka and orders to Pulsar, both keyed by user id.

A configurable fraction of records per day and stream is corrupted on purpose, taking the
defect kinds of that stream (``CLICK_DEFECTS``, ``ORDER_DEFECTS``) in turn over the whole run,
so every kind appears once a stream has at least that many malformed records.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final, Literal, get_args

from orchestration.shop.datasets import CLICKS_DATASET, ORDERS_DATASET

Stream = Literal["clicks", "orders"]
EventType = Literal["page_view", "add_to_cart", "purchase"]
DefectKind = Literal[
    "not_json",
    "missing_field",
    "wrong_type",
    "unknown_event_type",
    "negative_amount",
    "invalid_utf8",
    "total_mismatch",
]

STREAMS: Final[tuple[Stream, ...]] = get_args(Stream)
EVENT_TYPES: Final[tuple[EventType, ...]] = get_args(EventType)
CLICK_DEFECTS: Final[tuple[DefectKind, ...]] = (
    "not_json",
    "missing_field",
    "wrong_type",
    "unknown_event_type",
    "negative_amount",
    "invalid_utf8",
)
ORDER_DEFECTS: Final[tuple[DefectKind, ...]] = (
    "not_json",
    "missing_field",
    "wrong_type",
    "negative_amount",
    "invalid_utf8",
    "total_mismatch",
)
#: The dataset each stream lands in (the Spark assets read these two).
STREAM_DATASETS: Final[dict[Stream, str]] = {"clicks": CLICKS_DATASET, "orders": ORDERS_DATASET}
CLICK_REQUIRED: Final = ("event_id", "user_id", "event_type", "product_id", "ts")
ORDER_REQUIRED: Final = ("order_id", "user_id", "items", "total", "currency", "ts")
CURRENCY: Final = "EUR"
PRODUCTS: Final = 40
MAX_USERS: Final = 10_000  # user ids are ``u0000`` .. ``u9999``
#: Sessions are laid out in equal slots of the day; more than this would not leave the
#: 30-minute gap between them (a session lasts at most ``_MAX_SESSION``).
MAX_SESSIONS_PER_USER_PER_DAY: Final = 12.0
SESSION_GAP: Final = timedelta(minutes=30)

_DAY_START: Final = timedelta(minutes=10)
_DAY_LENGTH: Final = timedelta(hours=23)  # sessions end by 23:10 UTC, never past midnight
_MAX_SESSION: Final = timedelta(minutes=45)  # 8 views x 4 min + carts + checkout < 40 min
_CART_PROBABILITY: Final = 0.35
_PURCHASE_PROBABILITY: Final = 0.45  # of sessions with a cart


@dataclass(frozen=True, slots=True)
class DemoRecord:
    """One message as a producer would send it; ``valid``/``defect`` say what cleaning must find."""

    stream: Stream
    key: bytes
    value: bytes
    timestamp_ms: int
    day: date
    valid: bool
    defect: DefectKind | None


@dataclass(frozen=True, slots=True)
class Event:
    """A record before serialization: corrupting works on the payload, not on bytes."""

    stream: Stream
    user_id: str
    timestamp_ms: int
    payload: dict[str, Any]


def generate(
    days: Sequence[date],
    *,
    users: int = 50,
    sessions_per_user_per_day: float = 1.0,
    malformed_fraction: float = 0.02,
    seed: int = 0,
) -> Iterator[DemoRecord]:
    """Yield every record of ``days`` (sorted) in timestamp order, the same ones for a seed.

    Arguments are checked here, before the first record, so a bad call fails where it is made.
    The order is global by timestamp, hence also per key and stream, as a producer must send.
    """
    if not days:
        raise ValueError("days must name at least one date")
    if any(not isinstance(d, date) or isinstance(d, datetime) for d in days):
        raise ValueError(f"days must be datetime.date values (not datetimes): {list(days)!r}")
    if len(set(days)) != len(days):
        raise ValueError(f"days must not repeat a date: {sorted(days)}")
    if isinstance(users, bool) or not isinstance(users, int) or not 1 <= users <= MAX_USERS:
        raise ValueError(f"users must be an int in 1..{MAX_USERS}, got {users!r}")
    if not 0 < sessions_per_user_per_day <= MAX_SESSIONS_PER_USER_PER_DAY:
        raise ValueError(
            f"sessions_per_user_per_day must be in (0, {MAX_SESSIONS_PER_USER_PER_DAY}], "
            f"got {sessions_per_user_per_day!r}"
        )
    if not 0 <= malformed_fraction <= 1:
        raise ValueError(f"malformed_fraction must be in [0, 1], got {malformed_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return _records(sorted(days), users, sessions_per_user_per_day, malformed_fraction, seed)


def expected_per_day(records: Iterable[DemoRecord]) -> dict[date, dict[str, int]]:
    """Count ``<stream>_produced``, ``<stream>_valid`` and ``<stream>_malformed`` per day.

    Landing and cleaning are reconciled against these numbers: every produced record must be
    accounted for as clean or quarantined.
    """
    counts: dict[date, dict[str, int]] = defaultdict(
        lambda: {f"{s}_{k}": 0 for s in STREAMS for k in ("produced", "valid", "malformed")}
    )
    for record in records:
        day = counts[record.day]
        day[f"{record.stream}_produced"] += 1
        day[f"{record.stream}_{'valid' if record.valid else 'malformed'}"] += 1
    return dict(counts)


def format_ts(timestamp_ms: int) -> str:
    """ISO-8601 UTC with milliseconds and ``Z``, the wire format of every ``ts`` field."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{timestamp_ms % 1000:03d}Z"


def _records(
    days: list[date], users: int, sessions_rate: float, malformed_fraction: float, seed: int
) -> Iterator[DemoRecord]:
    rng = random.Random(seed)
    prices = product_prices(rng)
    turns = defect_turns()
    for day in days:
        events: list[Event] = []
        counter = itertools.count()

        def next_id(kind: str, day: date = day, counter: Iterator[int] = counter) -> str:
            return f"{kind}-{day:%Y%m%d}-{next(counter):07d}"

        for user in range(users):
            user_id = f"u{user:04d}"
            for start_ms in _session_starts(rng, day, sessions_rate):
                events += session_events(rng, user_id, start_ms, prices, next_id)
        records: list[DemoRecord] = []
        for stream, defects in turns.items():
            of_stream = [e for e in events if e.stream == stream]
            records += _serialize(rng, of_stream, malformed_fraction, defects)
        records.sort(key=lambda r: r.timestamp_ms)  # stable: ties keep per-user order
        yield from records


def _session_starts(rng: random.Random, day: date, rate: float) -> list[int]:
    """Start times in equal slots of the day, late enough in each slot to leave the gap."""
    count = int(rate) + (rng.random() < rate - int(rate))
    if count == 0:
        return []
    slot = _DAY_LENGTH / count
    latest = (slot - _MAX_SESSION - SESSION_GAP - timedelta(minutes=1)).total_seconds()
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
    starts = []
    for k in range(count):
        slot_start = midnight + _DAY_START + k * slot
        offset = timedelta(seconds=rng.uniform(0, latest))
        starts.append(int((slot_start + offset).timestamp() * 1000))
    return starts


def product_prices(rng: random.Random) -> list[Decimal]:
    """The shop's price list, drawn first from a seeded generator."""
    return [Decimal(rng.randint(199, 15_000)) / 100 for _ in range(PRODUCTS)]


def defect_turns() -> dict[Stream, Iterator[DefectKind]]:
    """Per stream, the defect kinds in the order malformed records take them."""
    return {"clicks": itertools.cycle(CLICK_DEFECTS), "orders": itertools.cycle(ORDER_DEFECTS)}


def session_events(
    rng: random.Random,
    user_id: str,
    start_ms: int,
    prices: list[Decimal],
    next_id: Callable[[str], str],
) -> list[Event]:
    """Views, maybe carts (of viewed products), maybe a checkout with its order.

    ``next_id("c")`` names a click and ``next_id("o")`` an order; ids must not repeat.
    """
    now = start_ms
    events: list[Event] = []

    def click(event_type: EventType, product: int, quantity: int | None = None) -> None:
        payload: dict[str, Any] = {
            "event_id": next_id("c"),
            "user_id": user_id,
            "event_type": event_type,
            "product_id": f"p{product:03d}",
        }
        if quantity is not None:
            payload["price"] = float(prices[product])
            payload["quantity"] = quantity
        elif rng.random() < 0.2:
            payload["price"] = None  # page views may carry an explicit null price
        payload["ts"] = format_ts(now)
        events.append(Event("clicks", user_id, now, payload))

    weights = [1 / (rank + 1) for rank in range(PRODUCTS)]  # a few products are popular
    viewed: list[int] = []
    for _ in range(rng.randint(1, 8)):
        viewed.append(rng.choices(range(PRODUCTS), weights)[0])
        click("page_view", viewed[-1])
        now += rng.randint(5_000, 240_000)
    if rng.random() >= _CART_PROBABILITY:
        return events
    cart = {p: rng.choice((1, 1, 1, 2, 3)) for p in rng.sample(viewed, min(3, len(viewed)))}
    for product, quantity in cart.items():
        click("add_to_cart", product, quantity)
        now += rng.randint(5_000, 60_000)
    if rng.random() >= _PURCHASE_PROBABILITY:
        return events
    now += rng.randint(30_000, 120_000)
    for product, quantity in cart.items():
        click("purchase", product, quantity)
        now += rng.randint(2_000, 10_000)
    items = [
        {"product_id": f"p{p:03d}", "quantity": q, "unit_price": float(prices[p])}
        for p, q in cart.items()
    ]
    order = {
        "order_id": next_id("o"),
        "user_id": user_id,
        "items": items,
        "total": float(sum((q * prices[p] for p, q in cart.items()), Decimal(0))),
        "currency": CURRENCY,
        "ts": format_ts(now),
    }
    events.append(Event("orders", user_id, now, order))
    return events


def _serialize(
    rng: random.Random,
    events: list[Event],
    malformed_fraction: float,
    defects: Iterator[DefectKind],
) -> list[DemoRecord]:
    """Corrupt ``round(fraction * n)`` random records with the next kinds from ``defects``."""
    bad = sorted(rng.sample(range(len(events)), round(malformed_fraction * len(events))))
    kinds = dict(zip(bad, defects, strict=False))
    return [to_record(rng, event, kinds.get(index)) for index, event in enumerate(events)]


def to_record(rng: random.Random, event: Event, defect: DefectKind | None) -> DemoRecord:
    """The message for ``event``, with ``defect`` if one is given; filed under its UTC day."""
    value = _encode(event.payload) if defect is None else _corrupt(rng, event, defect)
    return DemoRecord(
        stream=event.stream,
        key=event.user_id.encode(),
        value=value,
        timestamp_ms=event.timestamp_ms,
        day=datetime.fromtimestamp(event.timestamp_ms / 1000, tz=UTC).date(),
        valid=defect is None,
        defect=defect,
    )


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def _corrupt(rng: random.Random, event: Event, defect: DefectKind) -> bytes:
    """The bytes of ``event`` with exactly one defect of the given kind."""
    payload = json.loads(json.dumps(event.payload))  # a deep copy
    if defect == "not_json":
        data = _encode(payload)
        return data[: len(data) // 2]  # a truncated message
    if defect == "invalid_utf8":
        user = json.dumps(event.user_id).encode()
        return _encode(payload).replace(user, user[:-1] + b'\xff"', 1)
    if defect == "missing_field":
        required = CLICK_REQUIRED if event.stream == "clicks" else ORDER_REQUIRED
        del payload[rng.choice(required)]
    elif defect == "unknown_event_type":
        payload["event_type"] = rng.choice(("wishlist", "refund", "PageView"))
    elif defect == "total_mismatch":
        delta = Decimal(rng.randint(50, 2_000)) / 100 * rng.choice((-1, 1))
        payload["total"] = float(Decimal(str(payload["total"])) + delta)
    elif event.stream == "clicks" and defect == "wrong_type":
        payload["price"] = "abc"
    elif event.stream == "clicks":  # negative_amount
        if "quantity" in payload and rng.random() < 0.5:
            payload["quantity"] = -payload["quantity"]
        else:
            payload["price"] = -abs(payload.get("price") or 9.99)
    elif defect == "wrong_type":
        if rng.random() < 0.5:
            payload["total"] = "abc"
        else:
            payload["items"][0]["quantity"] = "two"
    else:  # an order with a negative amount whose total still matches its items
        item = payload["items"][0]
        field = rng.choice(("quantity", "unit_price"))
        item[field] = -item[field]
        payload["total"] = float(
            sum(
                (Decimal(str(i["unit_price"])) * i["quantity"] for i in payload["items"]),
                Decimal(0),
            )
        )
    return _encode(payload)
