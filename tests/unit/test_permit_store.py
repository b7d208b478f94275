"""The lease protocol on a real SQLite file: grants never exceed the pool, shrinking is two-phase,
idle holders give permits back, dead holders' leases expire."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers import PermitStoreError
from consumers.permits.store import LeaseReport, PermitStore

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> PermitStore:
    store = PermitStore(f"sqlite:///{tmp_path / 'state' / 'permits.db'}", clock=clock)
    store.declare_pools({"api": 10})
    return store


def report(
    workload: str, demand: int, *, in_use: int = 0, floor: int = 0, weight: float = 1.0
) -> LeaseReport:
    return LeaseReport(workload, weight, 1000, demand, in_use, max(floor, in_use), 0.0)


def granted(store: PermitStore) -> dict[tuple[str, str], int]:
    [pool] = store.status()
    return {(lease.holder, lease.workload): lease.granted for lease in pool.live()}


def test_a_lone_holder_gets_its_demand_then_the_whole_pool(store: PermitStore) -> None:
    assert store.renew("api", "p1", [report("w", 4)], ttl=5).limits == {"w": 4}
    renewal = store.renew("api", "p1", [report("w", 50, floor=4)], ttl=5)
    assert renewal.limits == {"w": 10}
    assert renewal.free == 0


def test_a_newcomer_waits_for_the_holder_to_shrink_in_two_phases(store: PermitStore) -> None:
    store.renew("api", "p1", [report("a", 50)], ttl=5)
    # All 10 are granted to p1: the newcomer gets nothing yet, but its demand is on record.
    assert store.renew("api", "p2", [report("b", 50)], ttl=5).limits == {"b": 0}
    # p1 learns its fair part is 5; it may still be using 10, so its grant stays 10 for now.
    shrink = store.renew("api", "p1", [report("a", 50, in_use=10, floor=10)], ttl=5)
    assert shrink.limits == {"a": 5}
    assert granted(store)[("p1", "a")] == 10
    # Its workers yielded down to 5: the grant follows, and p2 grows into the other half.
    store.renew("api", "p1", [report("a", 50, in_use=5, floor=5)], ttl=5)
    assert store.renew("api", "p2", [report("b", 50)], ttl=5).limits == {"b": 5}
    assert sum(granted(store).values()) == 10


def test_weights_hold_across_holders_and_grants_never_exceed_the_pool(store: PermitStore) -> None:
    holders = {"p1": ("a", 1.0), "p2": ("b", 2.0), "p3": ("c", 2.0)}
    limits = dict.fromkeys(holders, 0)
    for _ in range(6):
        for holder, (workload, weight) in holders.items():
            floor = limits[holder]  # every holder is busy up to its limit
            renewal = store.renew(
                "api", holder, [report(workload, 100, floor=floor, weight=weight)], ttl=5
            )
            limits[holder] = renewal.limits[workload]
            assert sum(granted(store).values()) <= 10
    assert limits == {"p1": 2, "p2": 4, "p3": 4}


def test_an_idle_holder_gives_its_permits_back(store: PermitStore) -> None:
    store.renew("api", "p1", [report("a", 10)], ttl=5)
    store.renew("api", "p1", [report("a", 0, floor=10)], ttl=5)  # limit drops to 0 first
    store.renew("api", "p1", [report("a", 0)], ttl=5)
    assert granted(store) == {("p1", "a"): 0}
    assert store.renew("api", "p2", [report("b", 10)], ttl=5).limits == {"b": 10}


def test_a_dead_holders_lease_expires(store: PermitStore, clock: Clock) -> None:
    store.renew("api", "p1", [report("a", 10)], ttl=5)
    assert store.renew("api", "p2", [report("b", 10)], ttl=5).limits == {"b": 0}
    clock.now += 4.9
    assert store.renew("api", "p2", [report("b", 10)], ttl=5).limits == {"b": 0}
    clock.now += 0.2  # p1 never renewed: its lease is over
    assert store.renew("api", "p2", [report("b", 10)], ttl=5).limits == {"b": 10}
    [pool] = store.status()
    assert [lease.holder for lease in pool.leases if lease.expires_in <= 0] == ["p1"]


def test_release_frees_at_once_and_undeclared_pools_are_refused(store: PermitStore) -> None:
    store.renew("api", "p1", [report("a", 10)], ttl=5)
    store.release("api", "p1")
    assert store.renew("api", "p2", [report("b", 10)], ttl=5).limits == {"b": 10}
    with pytest.raises(PermitStoreError, match="'nope' is not declared"):
        store.renew("nope", "p1", [report("a", 1)], ttl=5)


def test_an_unreachable_database_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    store = PermitStore("postgresql+psycopg2://lanehouse:s3cret@127.0.0.1:1/lanehouse")
    with pytest.raises(PermitStoreError) as caught:
        store.declare_pools({"api": 1})
    assert "127.0.0.1:1" in str(caught.value)
    assert "s3cret" not in str(caught.value)
