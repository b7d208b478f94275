"""The database side of shared permit pools: pool sizes and leases, on SQLite or PostgreSQL.

One row per pool (its size) and one lease row per (pool, holder process, workload): the
workload's weight, cap and demand, the permits it has in use, and ``granted``, the permits it may
hold until ``expires_at``. Every renewal is one short transaction, serialised per pool (the pool
row is locked ``FOR UPDATE`` on PostgreSQL; SQLite takes its write lock at ``BEGIN IMMEDIATE``):

1. read the pool's unexpired leases, delete long-dead ones;
2. divide the pool among every workload with demand (weighted max-min, :mod:`consumers.permits.fair_share`),
   then each workload's part among its holders;
3. give this holder its targets as far as the permits the *others* were granted allow, never
   below its ``floor`` (what it may still be using), and write its rows with a fresh expiry.

So the granted permits of unexpired leases never add up to more than the pool's size. A holder
raises its local limit only after its grant is committed, and lowers its grant in the database
only after its local limit came down (its ``floor``): see :mod:`consumers.permits.shared`.
Time is the database's clock on PostgreSQL (holders on different machines compare expiries on
one clock); SQLite is one machine, so the local clock serves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from consumers.errors import PermitStoreError
from consumers.permits.fair_share import fair_shares

log = logging.getLogger("lanehouse.permits")

metadata = sa.MetaData()

pools_table = sa.Table(
    "lanehouse_permit_pools",
    metadata,
    sa.Column("pool", sa.String(64), primary_key=True),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

leases_table = sa.Table(
    "lanehouse_permit_leases",
    metadata,
    sa.Column("pool", sa.String(64), primary_key=True),
    sa.Column("holder", sa.String(200), primary_key=True),
    sa.Column("workload", sa.String(64), primary_key=True),
    sa.Column("weight", sa.Float, nullable=False),
    sa.Column("cap", sa.Integer, nullable=False),
    sa.Column("demand", sa.Integer, nullable=False),
    sa.Column("in_use", sa.Integer, nullable=False),
    sa.Column("granted", sa.Integer, nullable=False),
    sa.Column("wait_seconds", sa.Float, nullable=False),
    sa.Column("renewed_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
)

#: Expired leases are kept this many TTLs for ``lanehouse permits status``, then deleted.
_DEAD_LEASE_TTLS = 6
#: PostgreSQL ends a session idle inside a transaction this long (ms): see create_permit_engine.
_IDLE_IN_TRANSACTION_MS = 1000


@dataclass(frozen=True)
class LeaseReport:
    """What a holder says about one of its workloads at a renewal."""

    workload: str
    weight: float
    cap: int
    demand: int
    in_use: int
    #: The grant may not drop below this: permits in use or still allowed by the local limit.
    floor: int
    wait_seconds: float


@dataclass(frozen=True)
class Renewal:
    """The outcome of one renewal for one holder."""

    #: Per workload: the local limit to apply now (at most what was granted in the database).
    limits: dict[str, int]
    size: int
    #: Permits of the pool not granted to anyone after this renewal.
    free: int


@dataclass(frozen=True)
class LeaseRow:
    pool: str
    holder: str
    workload: str
    weight: float
    cap: int
    demand: int
    in_use: int
    granted: int
    wait_seconds: float
    #: Seconds since the last renewal, and until expiry (negative: expired).
    age: float
    expires_in: float


@dataclass(frozen=True)
class PoolStatus:
    pool: str
    size: int
    leases: list[LeaseRow]

    def live(self) -> list[LeaseRow]:
        return [lease for lease in self.leases if lease.expires_in > 0]


#: The insert with ``ON CONFLICT`` of each database the store runs on.
_INSERTS: dict[str, Any] = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def create_permit_engine(url: str) -> Engine:
    """An engine that fails fast when the database is away (a renewal must not hang past its
    lease) and serialises SQLite writers from the start of each transaction."""
    if url.startswith("sqlite"):
        database = sa.make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 5.0}, poolclass=sa.NullPool)

        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA busy_timeout=5000")

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    # A holder cut off from the database inside a renewal leaves its session waiting in a
    # transaction with the pool's row locked: every other holder's renewal then waits on that
    # lock, so one partitioned host stopped the whole pool until the partition healed (or the
    # server's TCP keepalive, hours). The server ends such a session after a second
    # (a renewal's transaction idles for milliseconds), and the keepalives and the user
    # timeout let the holder see its dead connection in seconds instead of TCP's minutes.
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        pool_size=2,
        connect_args={
            "connect_timeout": 3,
            "options": (
                "-c statement_timeout=5000 -c lock_timeout=5000 "
                f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_MS}"
            ),
            "keepalives": 1,
            "keepalives_idle": 1,
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": 3000,
        },
    )


class PermitStore:
    """Pools and leases in one database; every method is one transaction and may block."""

    def __init__(
        self, url: str, *, engine: Engine | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.url = url
        self.engine = engine or create_permit_engine(url)
        self._server_clock = self.engine.dialect.name == "postgresql"
        self._clock = clock
        self._ready = False

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise PermitStoreError(
                f"permit database {self.describe()}: {reason[0] if reason else type(exc).__name__}"
            ) from exc

    def describe(self) -> str:
        """The URL without its password (safe for logs)."""
        return self.engine.url.render_as_string(hide_password=True)

    def _now(self, conn: Connection) -> float:
        if self._server_clock:
            return float(
                conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
            )
        return self._clock()

    def ensure_schema(self) -> None:
        """Create the tables if missing (concurrent starters may race: the loser retries)."""
        if self._ready:
            return
        for attempt in range(2):
            try:
                with self._transaction() as conn:
                    metadata.create_all(conn, checkfirst=True)
                break
            except PermitStoreError:
                if attempt:
                    raise
        self._ready = True

    def declare_pools(self, sizes: dict[str, int]) -> None:
        """Insert or resize pools (the config file is the truth; the last starter wins).

        The insert skips a pool that exists: a row lock cannot guard a row that is not there
        yet, and three processes declaring one new pool at once on PostgreSQL failed one with
        a duplicate key."""
        self.ensure_schema()
        insert = _INSERTS[self.engine.dialect.name]
        with self._transaction() as conn:
            now = self._now(conn)
            for pool, size in sizes.items():
                new = insert(pools_table).values(pool=pool, size=size, updated_at=now)
                conn.execute(new.on_conflict_do_nothing(index_elements=["pool"]))
                row = conn.execute(
                    sa.select(pools_table.c.size)
                    .where(pools_table.c.pool == pool)
                    .with_for_update()
                ).one()
                if row.size != size:
                    log.warning("permit pool %s resized from %d to %d", pool, row.size, size)
                    conn.execute(
                        pools_table.update()
                        .where(pools_table.c.pool == pool)
                        .values(size=size, updated_at=now)
                    )

    def renew(self, pool: str, holder: str, reports: list[LeaseReport], ttl: float) -> Renewal:
        """Renew ``holder``'s leases in ``pool`` and compute its new grants (module docstring)."""
        with self._transaction() as conn:
            size = conn.execute(
                sa.select(pools_table.c.size).where(pools_table.c.pool == pool).with_for_update()
            ).scalar_one_or_none()
            if size is None:
                raise PermitStoreError(f"permit pool {pool!r} is not declared in the database")
            now = self._now(conn)
            leases = leases_table.c
            conn.execute(
                leases_table.delete().where(
                    leases.pool == pool, leases.expires_at < now - _DEAD_LEASE_TTLS * ttl
                )
            )
            others = conn.execute(
                sa.select(
                    leases.holder, leases.workload, leases.weight, leases.demand, leases.granted
                ).where(leases.pool == pool, leases.holder != holder, leases.expires_at > now)
            ).all()
            mine = {r.workload: r for r in reports}
            targets = _targets(size, holder, others, reports)
            available = size - sum(row.granted for row in others)
            granted = _grants(available, mine, targets)
            conn.execute(leases_table.delete().where(leases.pool == pool, leases.holder == holder))
            if reports:
                conn.execute(
                    leases_table.insert(),
                    [
                        {
                            "pool": pool,
                            "holder": holder,
                            "workload": r.workload,
                            "weight": r.weight,
                            "cap": r.cap,
                            "demand": r.demand,
                            "in_use": r.in_use,
                            "granted": granted[r.workload],
                            "wait_seconds": r.wait_seconds,
                            "renewed_at": now,
                            "expires_at": now + ttl,
                        }
                        for r in reports
                    ],
                )
        return Renewal(
            limits={w: min(targets[w], granted[w]) for w in mine},
            size=size,
            free=available - sum(granted.values()),
        )

    def release(self, pool: str, holder: str) -> None:
        """Drop every lease of ``holder`` (a clean stop gives its permits back at once)."""
        with self._transaction() as conn:
            # Behind any renewal of this pool still in flight, so it cannot re-insert them after.
            conn.execute(
                sa.select(pools_table.c.size).where(pools_table.c.pool == pool).with_for_update()
            )
            leases = leases_table.c
            conn.execute(leases_table.delete().where(leases.pool == pool, leases.holder == holder))

    def status(self) -> list[PoolStatus]:
        """Every pool with its leases, expired ones included (marked by ``expires_in``)."""
        self.ensure_schema()
        with self._transaction() as conn:
            now = self._now(conn)
            pools = conn.execute(sa.select(pools_table).order_by(pools_table.c.pool)).all()
            rows = conn.execute(
                sa.select(leases_table).order_by(
                    leases_table.c.pool, leases_table.c.workload, leases_table.c.holder
                )
            ).all()
        return [
            PoolStatus(
                pool=p.pool,
                size=p.size,
                leases=[_lease_row(r._asdict(), now) for r in rows if r.pool == p.pool],
            )
            for p in pools
        ]

    def close(self) -> None:
        self.engine.dispose()


def _lease_row(row: dict[str, Any], now: float) -> LeaseRow:
    """A lease as stored, with its two timestamps turned into ages relative to ``now``."""
    renewed_at, expires_at = row.pop("renewed_at"), row.pop("expires_at")
    return LeaseRow(**row, age=now - renewed_at, expires_in=expires_at - now)


def _targets(
    size: int, holder: str, others: Sequence[Any], reports: list[LeaseReport]
) -> dict[str, int]:
    """This holder's fair part per workload: the pool split among workloads by weight and
    demand, then each workload's part among its holders by demand."""
    claims = [(row.holder, row.workload, row.weight, row.demand) for row in others]
    claims += [(holder, r.workload, r.weight, r.demand) for r in reports]
    demand: dict[str, int] = {}
    weight: dict[str, float] = {}
    for _, workload, w, d in claims:
        demand[workload] = demand.get(workload, 0) + max(d, 0)
        weight[workload] = max(weight.get(workload, 0.0), w)
    by_workload = fair_shares(size, demand, weight)
    targets: dict[str, int] = {}
    for r in reports:
        holders = {h: d for h, workload, _, d in claims if workload == r.workload}
        parts = fair_shares(by_workload[r.workload], holders, dict.fromkeys(holders, 1.0))
        targets[r.workload] = parts[holder]
    return targets


def _grants(
    available: int, mine: dict[str, LeaseReport], targets: dict[str, int]
) -> dict[str, int]:
    """Grants for this holder: each workload's floor, then growth toward its target out of what
    the others left (if a lost lease left floors above that, floors are cut to fit)."""
    floors = {w: r.floor for w, r in mine.items()}
    if sum(floors.values()) >= available:
        return fair_shares(max(available, 0), floors, dict.fromkeys(floors, 1.0))
    growth = {w: max(targets[w] - floors[w], 0) for w in mine}
    weights = {w: mine[w].weight for w in mine}
    extra = fair_shares(available - sum(floors.values()), growth, weights)
    return {w: floors[w] + extra[w] for w in mine}
