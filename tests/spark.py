"""Spark test helpers: the local session behind the session-scoped ``spark`` fixture
(tests/conftest.py; only a test session that needs Spark pays the JVM start), and landed rows
from demo records."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from pyspark.sql import Row, SparkSession

from orchestration.demo.events import DemoRecord, Stream
from spark_jobs import local_spark_session

PARTITIONS = 3
CLUSTERS = {"clicks": "demo-kafka", "orders": "demo-pulsar"}
SOURCE_KINDS = {"clicks": "kafka", "orders": "pulsar"}


@contextmanager
def spark_for_tests(app_name: str) -> Iterator[SparkSession]:
    """A quiet local session, stopped afterwards.

    Code generation may not fall back to the interpreter: a plan whose generated code outgrows
    Java's limits then fails the test instead of silently running slower.
    """
    session = local_spark_session(app_name, extra_conf={"spark.sql.codegen.fallback": "false"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def landed_rows(records: Iterable[DemoRecord]) -> list[Row]:
    """Rows as the landing sink writes them (``LANDED_SCHEMA``), with made-up lineage.

    One topic per stream; partition = CRC-32 of the key mod 3 (so a key stays in one
    partition); offsets count up per partition in record order.
    """
    offsets: dict[tuple[str, int], int] = defaultdict(int)
    rows = []
    for record in records:
        partition = zlib.crc32(record.key) % PARTITIONS
        rows.append(
            landed_row(
                record.stream,
                record.value,
                key=record.key,
                timestamp=datetime.fromtimestamp(record.timestamp_ms / 1000, tz=UTC),
                partition=partition,
                offset=offsets[record.stream, partition],
            )
        )
        offsets[record.stream, partition] += 1
    return rows


def landed_row(
    stream: Stream,
    value: bytes | None,
    *,
    key: bytes,
    timestamp: datetime,
    partition: int,
    offset: int,
) -> Row:
    """One landed row (``LANDED_SCHEMA``) of ``stream``'s topic, landed a second later."""
    return Row(
        value=value,
        _source_kind=SOURCE_KINDS[stream],
        _cluster=CLUSTERS[stream],
        _topic=stream,
        _topic_id=f"{stream}-incarnation-1",
        _partition=partition,
        _offset=offset,
        _key=key,
        _timestamp=timestamp,
        _landed_at=timestamp + timedelta(seconds=1),
        _workload=f"demo-{stream}",
        _spec_hash="spec-1",
        event_date=timestamp.astimezone(UTC).date(),
    )


def replayed(row: Row, *, after: timedelta = timedelta(hours=1)) -> Row:
    """The same landed record landed again later (a replay after a crash): same lineage key."""
    return Row(**{**row.asDict(), "_landed_at": row["_landed_at"] + after})


def retried(row: Row, offset: int) -> Row:
    """The same message sent again by a retrying producer: same value, new offset, later."""
    later = row["_timestamp"] + timedelta(milliseconds=50)
    return Row(**{**row.asDict(), "_offset": offset, "_timestamp": later, "_landed_at": later})
