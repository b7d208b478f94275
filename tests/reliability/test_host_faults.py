"""Faults between hosts: each consumer process on a simulated host of its own (a network
namespace, ``hosts.py``) whose links to the broker and to the permit database the test cuts, as a
partition between machines would (packets dropped, TCP hangs). Every run is checked by the suite's
one verifier (``verifier.py``), stall check included: no partition with lag and no progress for
longer than the stall bound outside the fault's own window.

- a replica cut from the broker past its session timeout, then healed;
- a replica cut from the permit database (PostgreSQL) but not from the broker: the pool is never
  over-issued across replicas, and work resumes after healing;
- a replica cut in the middle of a rebalance.

Each test has its own broker, topic and group (a wedged Tansu group coordinator cannot spill
into another test) and its own namespaces and links, removed afterwards. Skipped only where
``ip netns add`` is not permitted (not root).
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from consumers.backends.kafka.consumer import committed_offsets, log_end_offsets
from consumers.dev.embedded.tansu import create_topic
from tests.helpers import wait_until
from tests.reliability.faults import fill
from tests.reliability.hosts import (
    Host,
    HubPostgres,
    HubTansu,
    NetnsUnavailableError,
    Network,
    Replica,
    check_netns,
    network,
    start_postgres_on,
    start_replica,
    start_tansu_on,
)
from tests.reliability.verifier import STALL_BOUND, CommitSampler, PermitSampler, Verdict, verify
from tests.support.processes import lines, write_spec
from tests.support.recording import Row, read_run

pytestmark = pytest.mark.reliability

PARTITIONS = 4
KEYS = 200
#: The client setting every spec here carries (``TEST_CLIENT_CONFIG``): a member cut for
#: longer than this is out of the group.
SESSION_TIMEOUT = 2.0
#: Backpressure on: a partition's buffer is full within a fraction of a second, so partitions
#: are paused when they are lost or revoked (the stall of issue 27, item 1).
BUFFERED = "max_buffered: 300\n"
POOL, TTL = 20, 3.0


def wait_for(predicate: Callable[[], object], timeout: float) -> float | None:
    """Seconds until ``predicate`` held, or ``None`` after ``timeout`` (the verdict then says
    what stalled, rather than a timeout saying only that something did)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            return None
        time.sleep(0.01)
    return time.monotonic() - start


_ASSIGNED = re.compile(r"assigned \[(.*)\]")
_REVOKED = re.compile(r"revoking \[(.*)\] \(commit=")
_PARTITION = re.compile(r"\[(\d+)\]'|, (\d+)\)")


def events(replica: Replica) -> list[tuple[str, set[int]]]:
    """The replica's assignments and revokes, in order, as its log says them."""
    found = []
    for line in replica.log_text().splitlines():
        if (match := _ASSIGNED.search(line)) is not None:
            kind = "assigned"
        elif (match := _REVOKED.search(line)) is not None:
            kind = "revoked"
        else:
            continue
        parts = {int(a or b) for a, b in _PARTITION.findall(match[1])}
        found.append((kind, parts))
    return found


def owned(replica: Replica) -> set[int]:
    """The partitions the replica holds now, by its log."""
    held: set[int] = set()
    for kind, parts in events(replica):
        held = set(parts) if kind == "assigned" else held - parts
    return held


def rows(replica: Replica) -> list[Row]:
    return read_run(str(replica.run))


ALL = set(range(PARTITIONS))


@dataclass
class Hosts:
    """The test's network, its broker on the hub, and the replicas it started (stopped, and
    their logs shown, at the end)."""

    net: Network
    broker: HubTansu
    tmp: Path
    replicas: list[Replica] = field(default_factory=list)

    def start(
        self, name: str, spec: Path, delay: float, env: dict[str, str] | None = None
    ) -> Replica:
        replica = start_replica(
            self.net.add_host(name), spec, self.tmp / f"{name}.txt", delay, env=env
        )
        self.replicas.append(replica)
        return replica

    def topic(self, name: str, count: int) -> tuple[str, str, set[tuple[str, int]], dict[int, int]]:
        """A fresh topic holding ``count`` records, a fresh group; the records and log ends."""
        suffix = uuid.uuid4().hex[:8]
        topic, group = f"hosts-{name}-{suffix}", f"g-hosts-{name}-{suffix}"
        create_topic(self.broker.bootstrap, topic, PARTITIONS)
        records = fill(self.broker, topic, count, KEYS, PARTITIONS)
        return topic, group, records, log_end_offsets(self.broker.bootstrap, topic, PARTITIONS)

    def stop_all(self) -> dict[str, int]:
        """SIGTERM to every replica at once (drain, commit, leave), then their exit statuses."""
        for replica in self.replicas:
            if replica.process.poll() is None:
                replica.process.terminate()
        return {r.host.name: r.stop(signalled=True) for r in self.replicas}

    def logs(self) -> str:
        return "\n".join(
            f"--- {r.host.name} (exit {r.process.poll()}) ---\n{r.log_text()[-3000:]}"
            for r in self.replicas
        )


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    """A network of simulated hosts with Tansu listening on its hub; every replica killed and
    every namespace and link removed afterwards, also on failure."""
    try:
        check_netns()
    except NetnsUnavailableError as exc:
        pytest.skip(f"faults between hosts need network namespaces: {exc}")
    with network() as net:
        broker = start_tansu_on(net.address("broker"), tmp_path / "tansu")
        made = Hosts(net, broker, tmp_path)
        try:
            yield made
        finally:
            for replica in made.replicas:
                if replica.process.poll() is None:
                    replica.process.kill()
                    replica.process.wait(timeout=30)
            broker.stop()


@pytest.fixture
def hub_postgres(hosts: Hosts, tmp_path: Path) -> Iterator[HubPostgres]:
    """A PostgreSQL listening on the hub's database address."""
    server = start_postgres_on(hosts.net.address("database"), tmp_path / "postgres")
    try:
        yield server
    finally:
        server.cleanup()


def finish(
    hosts: Hosts,
    topic: str,
    group: str,
    records: set[tuple[str, int]],
    ends: dict[int, int],
    sampler: CommitSampler,
    permits: PermitSampler | None = None,
) -> tuple[Verdict, dict[str, int]]:
    """Wait (past the stall bound at most) until every partition is committed to its end, stop
    the replicas, and verify every run."""
    wait_for(lambda: sampler.latest() == ends, STALL_BOUND + 15)
    committed = committed_offsets(hosts.broker.bootstrap, group, topic, PARTITIONS)
    exits = hosts.stop_all()
    runs = [r.run for r in hosts.replicas]
    return verify(records, runs, sampler, committed, ends, permits=permits), exits


def test_a_replica_cut_from_the_broker_past_its_session_timeout(hosts: Hosts) -> None:
    """Two replicas split the partitions; one is cut from the broker (its link down: packets
    dropped) until the other has taken its partitions over, then healed: it joins again and
    gets partitions back. Nothing lost, order within each assignment, no commit regression,
    committed = log end once idle, and no partition left behind without progress."""
    topic, group, records, ends = hosts.topic("broker-cut", 16_000)
    spec = write_spec(hosts.tmp / "spec.yaml", hosts.broker, topic, group, 10, extra=BUFFERED)
    with CommitSampler(hosts.broker.bootstrap, group, topic, PARTITIONS) as sampler:
        a = hosts.start("a", spec, 0.02)
        b = hosts.start("b", spec, 0.02)
        split = wait_for(
            lambda: owned(a) and owned(b) and owned(a) | owned(b) == ALL and lines(b.run) > 100,
            60,
        )
        assert split is not None, f"the replicas never split the partitions\n{hosts.logs()}"
        theirs, a_at_cut = owned(b), len(rows(a))
        cut = time.monotonic()
        with sampler.watch.fault():
            hosts.net.cut(b.host)
            takeover = wait_for(
                lambda: owned(a) == ALL and theirs & {row[2] for row in rows(a)[a_at_cut:]},
                STALL_BOUND,
            )
            hosts.net.heal(b.host)
        healed, cut_for = time.monotonic(), time.monotonic() - cut
        back = back_after_heal(b)
        left_at_heal = sum(ends.values()) - sum(sampler.latest().values())
        verdict, exits = finish(hosts, topic, group, records, ends, sampler)
        after = sampler.longest_stall(ends, since=healed)
    print(
        verdict.line(
            f"replica cut from the broker {cut_for:.1f}s (session {SESSION_TIMEOUT:.0f}s), "
            f"taken over in {_s(takeover)}, back {_s(back)} after the heal "
            f"({left_at_heal} records to commit then), stall after heal {_stall(after)}"
        )
    )
    assert takeover is not None, f"the other replica never took the partitions\n{hosts.logs()}"
    assert back is not None, f"the healed replica never got partitions back\n{hosts.logs()}"
    assert verdict.ok, f"{verdict}\n{hosts.logs()}"
    assert set(exits.values()) == {0}, f"{exits}\n{hosts.logs()}"


def back_after_heal(replica: Replica) -> float | None:
    """Seconds until a healed replica has a new assignment and handles records of partitions
    it owns (None: not within the stall bound and a margin)."""
    at_heal, assignments = len(rows(replica)), len(events(replica))
    return wait_for(
        lambda: (
            owned(replica)
            and len(events(replica)) > assignments
            and owned(replica) & {row[2] for row in rows(replica)[at_heal:]}
        ),
        STALL_BOUND + 15,
    )


def _renewal_state(admin: sa.Engine, address: str) -> str | None:
    """The state of the transaction the session from ``address`` has open (``active``,
    ``idle in transaction``), or ``None`` when it has none."""
    with admin.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT max(state) FROM pg_stat_activity "
            "WHERE client_addr = %(address)s::inet AND xact_start IS NOT NULL",
            {"address": address},
        ).scalar()


def cut_mid_renewal(net: Network, host: Host, admin: sa.Engine, attempts: int = 60) -> int:
    """Cut ``host`` from the database at an instant it is inside a renewal's transaction (the
    pool's row locked ``FOR UPDATE``), the worst instant: the server then waits for a client
    that can no longer say anything. A renewal lasts milliseconds, so: cut as one is seen, keep
    the cut if the server still waits inside it, else heal and try again. Returns the tries."""
    address = host.addresses["database"]
    for attempt in range(1, attempts + 1):
        wait_until(lambda: _renewal_state(admin, address), 10, interval=0.001)
        net.cut(host, "database")
        # A statement the server was running when the cut came finishes in milliseconds.
        wait_until(lambda: _renewal_state(admin, address) != "active", 5)
        if _renewal_state(admin, address) == "idle in transaction":
            return attempt
        net.heal(host, "database")
    raise AssertionError(f"no renewal caught in {attempts} tries")


def test_a_replica_cut_from_the_permit_database_mid_renewal(
    hosts: Hosts, hub_postgres: HubPostgres
) -> None:
    """Two replicas share a pool of 20 permits leased through PostgreSQL; one is cut from the
    database but not from the broker (it keeps its partitions) inside a renewal, with the pool's
    row locked, until the other has been granted the whole pool, then healed. The unexpired
    leases never hold more than the pool, the cut replica starts no record once its lease has
    ended, the other goes on, and the cut one works again after the heal."""
    url = hub_postgres.create_database()
    config = hosts.tmp / "lanehouse.yaml"
    config.write_text(
        f"permits:\n  url: {url}\n  lease_ttl: {TTL}s\n  sync_interval: 100ms\n"
        f"  pools:\n    shared: {{size: {POOL}}}\n"
    )
    env = {"LANEHOUSE_CONFIG": str(config)}
    topic, group, records, ends = hosts.topic("database-cut", 16_000)
    permits_spec = "permits: {pool: shared, weight: 1}\n"
    spec = write_spec(hosts.tmp / "spec.yaml", hosts.broker, topic, group, 50, extra=permits_spec)
    admin = sa.create_engine(hub_postgres.sqlalchemy_url, isolation_level="AUTOCOMMIT")

    with (
        CommitSampler(hosts.broker.bootstrap, group, topic, PARTITIONS) as sampler,
        PermitSampler(url, "shared") as permits,
    ):
        a = hosts.start("a", spec, 0.04, env)
        b = hosts.start("b", spec, 0.04, env)

        def lease(replica: Replica) -> tuple[int, float] | None:
            prefix = f"{socket.gethostname()}:{replica.process.pid}:"
            found = [v for h, v in permits.latest.items() if h.startswith(prefix)]
            return found[0] if found else None

        both = wait_for(
            lambda: lines(a.run) > 100 and lines(b.run) > 100 and lease(a) and lease(b), 60
        )
        assert both is not None, f"the replicas never both worked\n{hosts.logs()}"
        with sampler.watch.fault():
            tries = cut_mid_renewal(hosts.net, b.host, admin)
            cut, a_at_cut = time.monotonic(), lines(a.run)
            expired = wait_for(lambda: (found := lease(b)) is None or found[1] <= 0, TTL + 10)
            # The other replica renews into the whole pool once the cut one's lease is gone.
            whole = wait_for(lambda: (found := lease(a)) is not None and found[0] == POOL, 10)
            quiet_from = lines(b.run)
            # The cut lasts one second more: the outage is the fault's input, not a wait.
            time.sleep(1.0)
            started_while_expired = lines(b.run) - quiet_from
            a_during = lines(a.run) - a_at_cut
            hosts.net.heal(b.host, "database")
        healed, cut_for = time.monotonic(), time.monotonic() - cut
        b_at_heal = lines(b.run)
        resumed = wait_for(lambda: lines(b.run) > b_at_heal + 100, STALL_BOUND + 15)
        verdict, exits = finish(hosts, topic, group, records, ends, sampler, permits)
        after = sampler.longest_stall(ends, since=healed)
    admin.dispose()
    print(
        verdict.line(
            f"replica cut from the permit database mid-renewal ({tries} tries) {cut_for:.1f}s "
            f"(lease {TTL:.0f}s): lease gone in {_s(expired)}, the other granted the whole "
            f"pool {_s(whole)} later and handled {a_during} records during the cut, the cut "
            f"one started {started_while_expired} after its lease, resumed {_s(resumed)} "
            f"after the heal, stall after heal {_stall(after)}"
        )
    )
    assert expired is not None, f"the cut replica's lease never expired\n{hosts.logs()}"
    assert whole is not None, f"the other replica never got the whole pool\n{hosts.logs()}"
    assert started_while_expired == 0, "the cut replica handled records past its lease"
    assert resumed is not None, f"the cut replica never resumed\n{hosts.logs()}"
    assert permits.samples > 50, f"{permits.samples} samples of the leases"
    assert verdict.ok, f"{verdict}\n{permits.over[:5]}\n{hosts.logs()}"
    assert set(exits.values()) == {0}, f"{exits}\n{hosts.logs()}"


def test_a_replica_cut_in_the_middle_of_a_rebalance(hosts: Hosts) -> None:
    """One replica holds every partition; a second one starts, and is cut from the broker the
    moment the group starts rebalancing for it (the first revokes its partitions), until the
    first holds every partition again; then healed past the session timeout. Nothing lost,
    order, commits, and no partition left behind without progress."""
    topic, group, records, ends = hosts.topic("rebalance-cut", 20_000)
    spec = write_spec(hosts.tmp / "spec.yaml", hosts.broker, topic, group, 10, extra=BUFFERED)
    with CommitSampler(hosts.broker.bootstrap, group, topic, PARTITIONS) as sampler:
        a = hosts.start("a", spec, 0.02)
        alone = wait_for(lambda: owned(a) == ALL and lines(a.run) > 100, 60)
        assert alone is not None, f"the first replica never got the partitions\n{hosts.logs()}"
        revokes = sum(kind == "revoked" for kind, _ in events(a))
        b = hosts.start("b", spec, 0.02)
        rebalancing = wait_for(
            lambda: sum(kind == "revoked" for kind, _ in events(a)) > revokes, 60
        )
        assert rebalancing is not None, f"the group never rebalanced\n{hosts.logs()}"
        cut = time.monotonic()
        with sampler.watch.fault():
            hosts.net.cut(b.host)
            assigned_at_cut = len(events(a))
            b_events = len(events(b))
            takeover = wait_for(
                lambda: len(events(a)) > assigned_at_cut and owned(a) == ALL, STALL_BOUND
            )
            # Healed past the session timeout, also where the takeover came sooner.
            time.sleep(max(0.0, 2 * SESSION_TIMEOUT - (time.monotonic() - cut)))
            b_in_cut = events(b)[b_events:]
            hosts.net.heal(b.host)
        healed, cut_for = time.monotonic(), time.monotonic() - cut
        back = back_after_heal(b)
        left_at_heal = sum(ends.values()) - sum(sampler.latest().values())
        verdict, exits = finish(hosts, topic, group, records, ends, sampler)
        after = sampler.longest_stall(ends, since=healed)
    print(
        verdict.line(
            f"replica cut mid-rebalance {cut_for:.1f}s (cut {rebalancing:.1f}s after it "
            f"started; its callbacks while cut: {b_in_cut}), the other held every partition "
            f"in {_s(takeover)}, the cut one back {_s(back)} after the heal ({left_at_heal} "
            f"records to commit then), stall after heal {_stall(after)}"
        )
    )
    assert takeover is not None, f"the first replica never got every partition back\n{hosts.logs()}"
    assert back is not None, f"the healed replica never got partitions back\n{hosts.logs()}"
    assert verdict.ok, f"{verdict}\n{hosts.logs()}"
    assert set(exits.values()) == {0}, f"{exits}\n{hosts.logs()}"


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f}s"


def _stall(found: tuple[float, int] | None) -> str:
    return "n/a" if found is None else f"{found[0]:.1f}s (partition {found[1]})"
