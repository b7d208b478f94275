"""The Spark jobs on demo data and on small hand-computed cases, in one local session."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from consumers import SourceIdentity
from consumers.landing.files import LandedRow, landed_path, write_landed
from orchestration.demo import events as demo_events
from orchestration.demo.events import DemoRecord, Stream, expected_per_day, generate
from spark_jobs import (
    CLICK_SCHEMA,
    DUPLICATE_SCHEMA,
    FUNNEL_SCHEMA,
    LANDED_SCHEMA,
    ORDER_SCHEMA,
    QUARANTINE_SCHEMA,
    RECONCILIATION_SCHEMA,
    REVENUE_SCHEMA,
    SESSION_SCHEMA,
    CleanResult,
    clean_clicks,
    clean_orders,
    daily_funnel,
    daily_revenue,
    reconcile,
    rules,
    sessionize,
)
from tests.spark import landed_row, landed_rows, replayed, retried

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAYS = [date(2024, 5, 1), date(2024, 5, 2)]
DAY = DAYS[0]
#: What a quarantine reason must say for each defect the generator plants.
DEFECT_REASONS = {
    "not_json": r"^value is not valid JSON$",
    "invalid_utf8": r"^value is not valid UTF-8$",
    "missing_field": r"^missing required field '\w+'$",
    "wrong_type": r"field '(price|total|quantity)' must be (a number|an integer), got string",
    "unknown_event_type": r"^unknown event_type '\w+'$",
    "negative_amount": r"field '(price|quantity|unit_price)' (is negative|must be >= 1)",
    "total_mismatch": r"^field 'total' [\d.]+ does not match the sum of its items [\d.]+$",
}


@pytest.fixture(scope="module")
def records() -> list[DemoRecord]:
    return list(
        generate(DAYS, users=50, sessions_per_user_per_day=3, malformed_fraction=0.15, seed=11)
    )


@pytest.fixture(scope="module")
def rows(records: list[DemoRecord]) -> list[Row]:
    return landed_rows(records)


@pytest.fixture(scope="module")
def extra_rows(rows: list[Row], records: list[DemoRecord]) -> list[Row]:
    """Replays of every 9th landed row, and producer retries of every 20th valid one."""
    replays = [replayed(row) for row in rows[::9]]
    last_offset = max(row["_offset"] for row in rows)
    valid = [row for row, record in zip(rows, records, strict=True) if record.valid]
    retries = [retried(row, last_offset + 1 + n) for n, row in enumerate(valid[::20])]
    return replays + retries


class Cleaned:
    """Both streams cleaned, cached: the validation plans are the expensive part."""

    def __init__(self, spark: SparkSession, rows: Sequence[Row]) -> None:
        self.landed = spark.createDataFrame(list(rows), LANDED_SCHEMA).cache()
        self.clicks = _cached(clean_clicks(self.landed.where("_topic = 'clicks'")))
        self.orders = _cached(clean_orders(self.landed.where("_topic = 'orders'")))
        self.sessions = sessionize(self.clicks.clean).cache()


@pytest.fixture(scope="module")
def dirty(spark: SparkSession, rows: list[Row], extra_rows: list[Row]) -> Cleaned:
    return Cleaned(spark, rows + extra_rows)


@pytest.fixture(scope="module")
def plain(spark: SparkSession, rows: list[Row]) -> Cleaned:
    return Cleaned(spark, rows)


def test_landed_rows_reconcile_with_what_was_produced(
    dirty: Cleaned, records: list[DemoRecord], extra_rows: list[Row]
) -> None:
    expected = expected_per_day(records)
    extra = Counter((row["_topic"], row["event_date"]) for row in extra_rows)
    for stream, result in (("clicks", dirty.clicks), ("orders", dirty.orders)):
        landed = dirty.landed.where(f"_topic = '{stream}'")
        got = {r["event_date"]: r for r in reconcile(landed, result).collect()}
        assert sorted(got) == DAYS
        for day, counts in got.items():
            assert counts["unaccounted"] == 0, counts
            assert counts["clean"] == expected[day][f"{stream}_valid"], counts
            assert counts["quarantined"] == expected[day][f"{stream}_malformed"], counts
            assert counts["duplicates"] == extra[stream, day], counts
            assert counts["landed"] == expected[day][f"{stream}_produced"] + extra[stream, day]


def test_duplicates_say_what_they_repeat(dirty: Cleaned, extra_rows: list[Row]) -> None:
    replays = Counter(r["_topic"] for r in extra_rows if r["_landed_at"] - r["_timestamp"] > _S)
    retries = Counter(r["_topic"] for r in extra_rows) - replays
    kinds = dirty.clicks.duplicates.unionByName(dirty.orders.duplicates).groupBy(
        "stream", "duplicate_of"
    )
    got = {(r["stream"], r["duplicate_of"]): r["count"] for r in kinds.count().collect()}
    assert got == {
        ("clicks", "lineage"): replays["clicks"],
        ("orders", "lineage"): replays["orders"],
        ("clicks", "event_id"): retries["clicks"],
        ("orders", "order_id"): retries["orders"],
    }


def test_every_defect_kind_is_quarantined_with_a_reason_naming_it(
    dirty: Cleaned, records: list[DemoRecord], rows: list[Row]
) -> None:
    by_lineage = {_lineage(row): record for row, record in zip(rows, records, strict=True)}
    quarantined = dirty.clicks.quarantined.unionByName(dirty.orders.quarantined).collect()
    seen = set()
    for row in quarantined:
        record = by_lineage[_lineage(row)]
        assert record.defect is not None and row["stream"] == record.stream
        assert re.search(DEFECT_REASONS[record.defect], row["reason"]), (record, row["reason"])
        if record.defect == "invalid_utf8":
            assert row["raw_encoding"] == "base64"
            assert base64.b64decode(row["raw"]) == record.value
        else:
            assert (row["raw_encoding"], row["raw"]) == ("utf-8", record.value.decode())
        seen.add((record.stream, record.defect))
    assert seen == {("clicks", d) for d in demo_events.CLICK_DEFECTS} | {
        ("orders", d) for d in demo_events.ORDER_DEFECTS
    }


def test_replays_and_retries_change_no_result(dirty: Cleaned, plain: Cleaned) -> None:
    for pick in (
        lambda c: c.clicks.clean,
        lambda c: c.orders.clean,
        lambda c: c.clicks.quarantined,
        lambda c: c.sessions,
        lambda c: daily_funnel(c.clicks.clean),
        lambda c: daily_revenue(c.orders.clean, c.sessions),
    ):
        with_duplicates, without = _sorted(pick(dirty)), _sorted(pick(plain))
        assert with_duplicates and with_duplicates == without


def test_outputs_have_the_declared_schemas(dirty: Cleaned) -> None:
    """Names, order and types; Spark may know a column (a count, a literal) is never null."""
    pairs = [
        (dirty.clicks.clean, CLICK_SCHEMA),
        (dirty.orders.clean, ORDER_SCHEMA),
        (dirty.clicks.quarantined, QUARANTINE_SCHEMA),
        (dirty.orders.duplicates, DUPLICATE_SCHEMA),
        (dirty.sessions, SESSION_SCHEMA),
        (daily_funnel(dirty.clicks.clean), FUNNEL_SCHEMA),
        (daily_revenue(dirty.orders.clean, dirty.sessions), REVENUE_SCHEMA),
        (reconcile(dirty.landed, dirty.clicks), RECONCILIATION_SCHEMA),
    ]
    from pyspark.testing import assertSchemaEqual  # pulls pandas in: not at collection

    for frame, schema in pairs:
        assertSchemaEqual(frame.schema, schema, ignoreNullable=True)


def test_the_cleaning_enums_match_the_generator() -> None:
    assert rules.EVENT_TYPES == demo_events.EVENT_TYPES
    assert rules.CURRENCIES == (demo_events.CURRENCY,)


def test_no_plan_runs_python(dirty: Cleaned) -> None:
    frames = [
        dirty.clicks.clean,
        dirty.orders.clean,
        dirty.orders.quarantined,
        dirty.orders.duplicates,
        dirty.sessions,
        daily_funnel(dirty.clicks.clean),
        daily_revenue(dirty.orders.clean, dirty.sessions),
    ]
    for frame in frames:
        plan = _explain(frame)
        assert "Scan" in plan  # the capture worked
        assert not re.search(r"PythonUDF|EvalPython|InPandas|InArrow|PythonRunner", plan), plan


CLICK_CASES: list[tuple[dict[str, Any] | bytes | None, str | None]] = [
    ({}, None),  # a page view without price
    ({"price": None}, None),
    ({"event_type": "purchase", "price": 12.5, "quantity": 2}, None),
    ({"ts": "2024-05-01T12:00:00+02:00"}, None),  # an offset is as good as Z
    (None, "^value is null$"),
    (b"[1, 2]", "^value is JSON but not an object$"),
    (b'{"event_id": "e1", "user_id"', "^value is not valid JSON$"),
    ({"event_type": "add_to_cart", "quantity": 1}, "^missing required field 'price'$"),
    (
        {"event_type": "add_to_cart", "price": "12.50", "quantity": 1},
        "must be a number, got string",
    ),
    ({"event_type": "purchase", "price": 1.0, "quantity": 2.5}, "must be an integer, got decimal"),
    ({"event_type": "purchase", "price": 1.0, "quantity": 0}, "'quantity' must be >= 1, got 0$"),
    ({"event_type": "purchase", "price": 1e12, "quantity": 1}, "'price' is out of range$"),
    ({"user_id": ""}, "^field 'user_id' is empty$"),
    ({"user_id": 42}, "^field 'user_id' must be a string, got bigint$"),
    ({"ts": "2024-05-01T10:00:00"}, "'ts' must be an ISO-8601 timestamp with a zone, got string"),
    ({"ts": "2024-13-45T10:00:00Z"}, "^field 'ts' is not a valid timestamp$"),
    (
        {"event_type": "refund", "price": -1.0},
        "^unknown event_type 'refund'; field 'price' is negative: -1.00$",
    ),
]

ORDER_CASES: list[tuple[dict[str, Any] | bytes | None, str | None]] = [
    ({}, None),
    ({"total": 10.00}, None),  # 0.01 off the items' 9.99: within tolerance
    ({"total": 10.01}, "^field 'total' 10.01 does not match the sum of its items 9.99$"),
    ({"items": [], "total": 0}, "^field 'items' is empty$"),
    ({"items": {}}, "^field 'items' must be an array, got object"),
    ({"items": [5], "total": 0}, r"^items\[0\]: must be an object"),
    (
        {"items": [{"product_id": "p1", "quantity": 1}], "total": 0},
        r"^items\[0\]: missing required field 'unit_price'$",
    ),
    ({"currency": "USD"}, "^unknown currency 'USD'$"),
    (b'{"order_id": "o\xff"}', "^value is not valid UTF-8$"),
]


def test_click_rules_on_hand_written_records(spark: SparkSession) -> None:
    base = {"event_id": "e", "user_id": "u1", "event_type": "page_view", "product_id": "p1"}
    result = clean_clicks(_hand_landed(spark, "clicks", base, CLICK_CASES))
    clean = _check_cases(result, CLICK_CASES)
    purchase = clean[2]
    assert (purchase["price"], purchase["quantity"]) == (Decimal("12.50"), 2)
    assert clean[3]["event_ts"] == datetime(2024, 5, 1, 10, 0)  # 12:00+02:00 in UTC
    assert clean[0]["event_date"] == DAY


def test_order_rules_on_hand_written_records(spark: SparkSession) -> None:
    item = {"product_id": "p1", "quantity": 3, "unit_price": 3.33}
    base = {"order_id": "o", "user_id": "u1", "items": [item], "total": 9.99, "currency": "EUR"}
    result = clean_orders(_hand_landed(spark, "orders", base, ORDER_CASES))
    clean = _check_cases(result, ORDER_CASES)
    assert clean[0]["items"] == [Row(product_id="p1", quantity=3, unit_price=Decimal("3.33"))]
    assert (clean[0]["item_count"], clean[0]["total"]) == (1, Decimal("9.99"))


def test_sessions_split_after_30_minutes_of_inactivity(spark: SparkSession) -> None:
    t0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)
    clicks = _clicks(
        spark,
        [
            ("a", "page_view", t0),
            ("a", "add_to_cart", t0 + 29 * minute),  # 29 min later: same session
            ("a", "purchase", t0 + 60 * minute),  # 31 min later: a new one
            ("b", "page_view", t0 + 10 * minute),
            ("b", "page_view", t0 + 40 * minute),  # exactly 30 min: a new one
            ("c", "page_view", t0 + (14 * 60 + 50) * minute),  # 23:50 and 00:10 UTC, 20 min
            ("c", "page_view", t0 + (15 * 60 + 10) * minute),  # apart: cut at midnight
        ],
    )
    got = [
        tuple(r[c] for c in ("session_id", "user_id", "event_date", "events", "duration_seconds"))
        + tuple(r[c] for c in ("page_views", "add_to_cart", "purchases"))
        for r in sessionize(clicks).orderBy("session_id").collect()
    ]

    def sid(user: str, at: datetime) -> str:
        return f"{user}-{int(at.timestamp() * 1000)}"

    assert got == [
        (sid("a", t0), "a", DAY, 2, 29 * 60.0, 1, 1, 0),
        (sid("a", t0 + 60 * minute), "a", DAY, 1, 0.0, 0, 0, 1),
        (sid("b", t0 + 10 * minute), "b", DAY, 1, 0.0, 1, 0, 0),
        (sid("b", t0 + 40 * minute), "b", DAY, 1, 0.0, 1, 0, 0),
        (sid("c", t0 + (14 * 60 + 50) * minute), "c", DAY, 1, 0.0, 1, 0, 0),
        (sid("c", t0 + (15 * 60 + 10) * minute), "c", date(2024, 5, 2), 1, 0.0, 1, 0, 0),
    ]
    # A day's sessions do not depend on the next day's clicks: per day = over the range.
    per_day = [
        sessionize(clicks.where(F.to_date("event_ts") == day)).orderBy("session_id").collect()
        for day in (DAY, date(2024, 5, 2))
    ]
    assert [r for rows in per_day for r in rows] == sessionize(clicks).orderBy(
        "session_id"
    ).collect()


def test_sessionize_rejects_a_bad_gap(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="gap_minutes"):
        sessionize(_clicks(spark, []), gap_minutes=0)


def test_daily_funnel_against_hand_computed_rates(spark: SparkSession) -> None:
    t0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    events = [
        ("u1", "page_view", "p1"),
        ("u1", "page_view", "p1"),
        ("u2", "page_view", "p1"),
        ("u3", "page_view", "p1"),
        ("u1", "add_to_cart", "p1"),
        ("u2", "add_to_cart", "p1"),
        ("u1", "purchase", "p1"),
        ("u4", "add_to_cart", "p2"),  # a cart without a view: no viewers to divide by
    ]
    clicks = _clicks(
        spark,
        [(u, e, t0 + timedelta(minutes=n)) for n, (u, e, _) in enumerate(events)],
        products=[p for _, _, p in events],
    )
    got = {r["product_id"]: r.asDict() for r in daily_funnel(clicks).collect()}
    p1, p2 = got["p1"], got["p2"]
    assert (p1["views"], p1["carts"], p1["purchases"]) == (4, 2, 1)
    assert (p1["viewers"], p1["cart_users"], p1["purchasers"]) == (3, 2, 1)
    assert p1["view_to_cart_rate"] == pytest.approx(2 / 3)
    assert p1["cart_to_purchase_rate"] == pytest.approx(1 / 2)
    assert p1["view_to_purchase_rate"] == pytest.approx(1 / 3)
    assert (p2["viewers"], p2["cart_users"], p2["purchasers"]) == (0, 1, 0)
    assert p2["view_to_cart_rate"] is None and p2["view_to_purchase_rate"] is None
    assert p2["cart_to_purchase_rate"] == 0.0
    assert p1["event_date"] == DAY


def test_daily_revenue_joins_orders_with_sessions(spark: SparkSession) -> None:
    orders = spark.createDataFrame(
        [
            _order("o1", "u1", "10.00", DAY),
            _order("o2", "u2", "5.50", DAY),
            _order("o3", "u2", "2.25", DAY),
            _order("o4", "u3", "7.00", date(2024, 5, 3)),  # a day without sessions
        ],
        ORDER_SCHEMA,
    )
    sessions = spark.createDataFrame(
        [
            _session("u1", DAY, purchases=1),
            _session("u2", DAY, purchases=2),
            _session("u3", DAY, purchases=0),
            _session("u4", date(2024, 5, 2), purchases=0),  # a day without orders
        ],
        SESSION_SCHEMA,
    )
    got = {r["event_date"]: r.asDict() for r in daily_revenue(orders, sessions).collect()}
    assert got[DAY] == {
        "event_date": DAY,
        "orders": 3,
        "revenue": Decimal("17.75"),
        "customers": 2,
        "sessions": 3,
        "sessions_with_purchase": 2,
        "revenue_per_session": Decimal("5.92"),  # 17.75 / 3 = 5.9166...
        "average_order_value": Decimal("5.92"),
    }
    no_orders, no_sessions = got[date(2024, 5, 2)], got[date(2024, 5, 3)]
    assert (no_orders["orders"], no_orders["revenue"]) == (0, Decimal("0.00"))
    assert no_orders["revenue_per_session"] == Decimal("0.00")
    assert no_orders["average_order_value"] is None
    assert (no_sessions["sessions"], no_sessions["revenue_per_session"]) == (0, None)
    assert no_sessions["average_order_value"] == Decimal("7.00")


_S = timedelta(seconds=1)  # landed this long after the record time, unless replayed


def _cached(result: CleanResult) -> CleanResult:
    return CleanResult(
        clean=result.clean.cache(),
        quarantined=result.quarantined.cache(),
        duplicates=result.duplicates.cache(),
    )


def _lineage(row: Row) -> tuple[Any, ...]:
    return tuple(row[c] for c in ("_cluster", "_topic", "_topic_id", "_partition", "_offset"))


def _sorted(frame: DataFrame) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples, sorted in Python (row order is not part of any contract)."""
    return sorted((tuple(map(repr, row)) for row in frame.collect()), key=repr)


def _explain(frame: DataFrame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain(mode="formatted")
    return out.getvalue()


def _hand_landed(
    spark: SparkSession,
    stream: Stream,
    base: dict[str, Any],
    cases: Sequence[tuple[dict[str, Any] | bytes | None, str | None]],
) -> DataFrame:
    """One landed row per case at offset = case index; a dict case patches ``base``."""
    at = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    rows = []
    for offset, (case, _) in enumerate(cases):
        if not isinstance(case, dict):
            value = case
        else:
            body = {**base, "ts": "2024-05-01T10:00:00.000Z", **case}
            for id_field in ("event_id", "order_id"):  # unique ids: no case is a duplicate
                if id_field in body:
                    body[id_field] = f"{body[id_field]}{offset}"
            value = json.dumps(body).encode()
        rows.append(landed_row(stream, value, key=b"u1", timestamp=at, partition=0, offset=offset))
    return spark.createDataFrame(rows, LANDED_SCHEMA)


def _check_cases(result: CleanResult, cases: Sequence[tuple[object, str | None]]) -> dict[int, Row]:
    """Every case clean or quarantined as expected; returns the clean rows by case index."""
    clean = {row["_offset"]: row for row in result.clean.collect()}
    reasons = {row["_offset"]: row["reason"] for row in result.quarantined.collect()}
    for index, (case, expected) in enumerate(cases):
        if expected is None:
            assert index in clean, (case, reasons.get(index))
        else:
            assert re.search(expected, reasons.get(index, "<clean>")), (case, reasons.get(index))
    assert len(clean) + len(reasons) == len(cases)
    return clean


def _clicks(
    spark: SparkSession,
    events: Sequence[tuple[str, str, datetime]],
    products: Sequence[str] | None = None,
) -> DataFrame:
    rows = []
    for n, (user, event_type, at) in enumerate(events):
        priced = event_type != "page_view"
        rows.append(
            Row(
                event_id=f"e{n}",
                user_id=user,
                event_type=event_type,
                product_id=products[n] if products else "p1",
                price=Decimal("9.99") if priced else None,
                quantity=1 if priced else None,
                event_ts=at,
                _cluster="c",
                _topic="clicks",
                _topic_id="t",
                _partition=0,
                _offset=n,
                _timestamp=at,
                event_date=at.date(),
            )
        )
    return spark.createDataFrame(rows, CLICK_SCHEMA)


def _order(order_id: str, user: str, total: str, day: date) -> Row:
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    item = Row(product_id="p1", quantity=1, unit_price=Decimal(total))
    return Row(
        order_id=order_id,
        user_id=user,
        items=[item],
        item_count=1,
        total=Decimal(total),
        currency="EUR",
        order_ts=at,
        _cluster="c",
        _topic="orders",
        _topic_id="t",
        _partition=0,
        _offset=0,
        _timestamp=at,
        event_date=day,
    )


def _session(user: str, day: date, purchases: int) -> Row:
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    return Row(
        session_id=f"{user}-{day}",
        user_id=user,
        session_start=at,
        session_end=at,
        event_date=day,
        events=1 + purchases,
        page_views=1,
        add_to_cart=0,
        purchases=purchases,
        duration_seconds=0.0,
    )


def test_files_the_landing_sink_writes_read_back_as_the_landed_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The sink's Parquet files and ``LANDED_SCHEMA`` agree: Spark reads them with the schema
    (``event_date`` from the directory) and cleaning reconciles with what was written."""
    records = [r for r in generate([date(2026, 11, 19), date(2026, 11, 20)], users=5, seed=3)]
    clicks = [r for r in records if r.stream == "clicks"]
    source = SourceIdentity("kafka", "127.0.0.1:9092", "clicks", "topic-id-1")
    by_day: dict[date, list[LandedRow]] = {}
    for offset, record in enumerate(clicks):
        row = LandedRow(0, offset, record.key, record.value, record.timestamp_ms)
        by_day.setdefault(record.day, []).append(row)
    for day, rows in by_day.items():
        path = landed_path(tmp_path, "clickstream", day, source, 0, rows[0].offset)
        write_landed(path, source, rows, 1_795_000_000_000, "clickstream", "hash-1")
    landed = (
        spark.read.schema(LANDED_SCHEMA)
        .option("basePath", str(tmp_path / "landed" / "clickstream"))
        .parquet(str(tmp_path / "landed" / "clickstream" / "event_date=*"))
    )
    assert landed.count() == len(clicks)
    result = clean_clicks(landed)
    counts = {r["event_date"]: r.asDict() for r in reconcile(landed, result).collect()}
    expected = expected_per_day(clicks)
    assert set(counts) == set(by_day)
    for day, counted in counts.items():
        assert counted["unaccounted"] == 0
        assert counted["landed"] == expected[day]["clicks_produced"]
        assert counted["clean"] == expected[day]["clicks_valid"]
    back = result.clean.select("_topic_id", "_partition", "_offset").first()
    assert back is not None and back["_topic_id"] == "topic-id-1"


def test_a_local_session_starts_without_banner_or_pandas_notice() -> None:
    """What a user of ``lanehouse demo`` sees of Spark: no log4j banner, no "default log level"
    notice, no pandas-support warning (the paths the project uses are tested on pandas 3)."""
    code = (
        "from spark_jobs.session import local_spark_session\n"
        "import pyspark.testing.utils\n"
        "s = local_spark_session('quiet-check')\n"
        "print('rows', s.range(3).count())\n"
        "s.stop()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True
    )
    assert "rows 3" in done.stdout
    for noise in (
        "Using Spark's default log4j profile",
        "Setting default log level",
        "does not yet fully support pandas",
    ):
        assert noise not in done.stderr, done.stderr
