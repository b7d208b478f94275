"""A process's side of a shared pool on a real SQLite file: local limits follow leases, a lost
database stops new permits when the lease ends, a clean stop gives permits back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from consumers import PermitClient, PermitStoreError
from consumers.permits.shared import SharedPermitPool
from consumers.permits.store import LeaseReport, PermitStore, Renewal
from tests.helpers import until

pytestmark = pytest.mark.unit


class FlakyStore(PermitStore):
    """A real store whose renewals can be made to fail (the database went away)."""

    down = False

    def renew(self, pool: str, holder: str, reports: list[LeaseReport], ttl: float) -> Renewal:
        if self.down:
            raise PermitStoreError("permit database: connection refused")
        return super().renew(pool, holder, reports, ttl)


@pytest.fixture
def store(tmp_path: Path) -> FlakyStore:
    store = FlakyStore(f"sqlite:///{tmp_path / 'permits.db'}")
    store.declare_pools({"api": 10})
    return store


class Flood:
    """A workload with endless work: takes every permit it may, gives back what it must."""

    def __init__(
        self, pool: SharedPermitPool, name: str, weight: float = 1.0, cap: int = 100
    ) -> None:
        self.pool = pool
        self.client: PermitClient = pool.register(
            name, weight, cap, self._on_grant, pending=lambda: 100
        )
        self.peak = 0

    def _on_grant(self) -> bool:
        self.peak = max(self.peak, self.client.held)
        return True

    def step(self) -> None:
        """Finish one record if any, yield what is owed, take what is allowed."""
        c = self.client
        while c.held and self.pool.should_yield(c):
            self.pool.release(c)
        while self.pool.try_acquire(c):
            self.peak = max(self.peak, c.held)
        self.pool.wait(c)


def pool(store: PermitStore, holder: str, ttl: float = 2.0) -> SharedPermitPool:
    return SharedPermitPool("api", store, lease_ttl=ttl, sync_interval=0.05, holder=holder)


async def test_two_processes_converge_to_weighted_shares_within_the_pool(
    store: FlakyStore,
) -> None:
    p1, p2 = pool(store, "h1"), pool(store, "h2")
    a, b = Flood(p1, "a", 1.0), Flood(p2, "b", 4.0)
    await p1.start()
    await p2.start()
    try:

        async def drive() -> None:
            while True:
                a.step()
                b.step()
                assert a.client.held + b.client.held <= 10
                await asyncio.sleep(0.005)

        driver = asyncio.ensure_future(drive())
        await until(lambda: (a.client.held, b.client.held) == (2, 8))
        assert not driver.done()
        driver.cancel()
    finally:
        await p1.stop()
        await p2.stop()
    assert store.status()[0].leases == []  # a clean stop deletes its leases


async def test_a_lost_database_stops_new_permits_when_the_lease_ends(store: FlakyStore) -> None:
    p = pool(store, "h1", ttl=1.0)
    w = Flood(p, "a")
    await p.start()
    try:
        await until(lambda: w.client.limit == 10)
        w.step()
        assert w.client.held == 10
        store.down = True
        # Renewals fail, yet the lease still counts: nothing changes before the TTL is gone.
        await until(lambda: p.renewal_failures >= 3)
        assert w.client.limit == 10
        await until(lambda: w.client.limit == 0, within=2.0)
        assert p.renewal_failures > 0
        # Running records keep their permits but give them back as they finish.
        assert w.client.held == 10 and p.should_yield(w.client)
        w.step()
        assert w.client.held == 0
        store.down = False
        await until(lambda: w.client.limit == 10)
    finally:
        await p.stop()


async def test_waited_counts_only_the_time_the_pool_held_a_workload_back(
    store: FlakyStore,
) -> None:
    """At its own concurrency a workload waits for its records, not for the pool: only the one
    the pool keeps below its concurrency has waited for permits."""
    p = pool(store, "h1")
    small, big = Flood(p, "small", cap=4), Flood(p, "big", cap=100)
    await p.start()

    def waited() -> dict[str, float]:
        return {lease.workload: lease.wait_seconds for lease in store.status()[0].leases}

    try:

        async def drive() -> None:
            while True:
                small.step()
                big.step()
                await asyncio.sleep(0.005)

        driver = asyncio.ensure_future(drive())
        await until(lambda: (small.client.held, big.client.held) == (4, 6))
        await until(lambda: waited().get("big", 0.0) >= 0.3)
        assert waited()["small"] == 0.0
        driver.cancel()
    finally:
        await p.stop()
